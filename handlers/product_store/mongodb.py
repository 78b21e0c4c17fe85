"""The product's data in MongoDB (`mongodb://host/database`): collections `alerts`, `parts`,
`notifications` and `priceHistory` of the job store's database, documents as the product's
TypeScript backend writes them (camelCase, BSON dates), and `emailClaims` and `quotaSlots` of the
scheduler's own.

Conditional rule writes without transactions. Each alert's write is one UpdateOne whose filter is
the alert's id and every field of each touched rule as read at its position
(`{"rules.<i>.<field>": <as read>, ...}`), and whose update sets fields of `rules.<i>`: atomic on
the document on MongoDB, so of two scans that read the same rule only the first write matches,
and a rule the product changed, moved or removed meanwhile is not written over. A bulk write
reports only counts, so the winners are read back: every rule written carries the scan's id
(`lastScanId`).

FerretDB 1.24 (the development and test server, on its PostgreSQL handler) and why the code is
as it is:
- no positional `$` with `$elemMatch`, no `arrayFilters`, and `$elemMatch` matches nothing on
  arrays of documents; a numeric position in a dotted path works on both servers.
- a filtered update (or findAndModify) is not atomic: two concurrent updates with the same
  filter can both match. There two simultaneous scans may both write a rule (equivalent states)
  and both count it as triggered; its notification is still inserted once, since its id is
  derived from the rule as read and an insert on a unique `_id` is atomic.
- the same holds for email claims, so a claim is an insert: a document in `emailClaims`, `_id`
  `<notification id>#<n>`, inserted after the latest claim of the notification, which a scan
  may only do once that one was released or has expired; of two scans inserting the same `_id`
  one wins. Claims record what became of them (`done` once emailed or given up, `released`
  when handed back) and are forgotten a day later.
- a filter on `_id` is looked up by key (alone or with conditions, which FerretDB then checks
  itself); other filters (`$in` on `_id`, another field) may scan the collection, and each
  statement is committed on its own. So what can go by `_id` does (notifications, claims this
  store holds, an alert's conditional write: about 7 ms per alert at 2,000 alerts on the
  development machine; on FerretDB's SQLite handler, which scans for `_id` with a condition
  too, 0.1 to 0.5 s). Production MongoDB uses its indexes.
- the same holds for a vendor's daily quota, so it is not a counter raised with `$inc` under a
  condition (two instances could both pass the condition and overspend), but slots: one document
  per unit in `quotaSlots`, `_id` `<key>|<day>|<n>` for n from 1 to the limit. A reservation
  reads the day's highest n and inserts the next ones; a slot another instance took first is
  refused as a duplicate and not granted. Each n <= limit can be inserted once, so no day ever
  grants more than its limit, whatever the server. A key's slots older than QUOTA_RETENTION
  are deleted when its day's first slot is taken.
- commands of at most FERRETDB_STATEMENTS_PER_UPDATE statements (FERRETDB_ALERT_WRITES_PER_COMMAND
  for the heavy alert writes), at most FERRETDB_CONCURRENT_OPERATIONS operations in flight, only
  missing indexes created: as the job store (scheduler/store/mongodb.py) does.

Ids. The product may use ObjectIds; ids travel as strings and every query matches both forms.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, ClassVar, ParamSpec, TypeVar

import bson
from bson import ObjectId, Regex
from pymongo import (
    ASCENDING,
    DESCENDING,
    AsyncMongoClient,
    IndexModel,
    ReplaceOne,
    ReturnDocument,
    UpdateOne,
)
from pymongo.asynchronous.collection import AsyncCollection

from handlers.product_store import (
    TRUE_PATTERN,
    Alert,
    Bounce,
    Doc,
    Notification,
    PriceCheck,
    Reschedule,
    RuleKey,
    RuleUpdate,
    bounce_key,
)
from handlers.product_store.documents import (
    PriceWrite,
    bounce_from_doc,
    by_alert,
    notification_from_doc,
    notification_to_doc,
    price_entries,
    price_writes,
    rule_conditions,
    rule_fields,
    rules_sending_email,
)
from scheduler.storage.mongodb import (
    MongoDatabase,
    chunks,
    client_options,
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)

P = ParamSpec("P")
T = TypeVar("T")
Client = AsyncMongoClient[Doc]
Documents = AsyncCollection[Doc]

DUE_ORDER = [("nextCheckAt", ASCENDING), ("_id", ASCENDING)]
OLDEST_FIRST = [("createdAt", ASCENDING), ("_id", ASCENDING)]
# What is waiting for an email (and may be claimed, unless a live claim holds it).
EMAIL_PENDING: Doc = {"notifyEmail": True, "emailedAt": None, "emailFailedAt": None}
# A claim's state: held by a scan until `until`; done (emailed or given up); handed back.
CLAIMED, DONE, RELEASED = "claimed", "done", "released"
# An alert's conditional write (many fields of several rules) took FerretDB's PostgreSQL handler
# about 7 ms at 2,000 alerts (its SQLite handler 100 to 500 ms, hence a bound of its own).
FERRETDB_ALERT_WRITES_PER_COMMAND = 10
SOCKET_TIMEOUT_MS = 30_000
# Claims older than this are deleted: far longer than any scan that could still act on one.
CLAIM_RETENTION = timedelta(days=1)
# Missing or null (never priced) sorts first, then the longest ago.
PRICE_ORDER = [("priceCheckedAt", ASCENDING), ("_id", ASCENDING)]
NEWEST_FIRST = [("checkedAt", DESCENDING), ("_id", DESCENDING)]
# Quota slots of a key older than this are deleted (by the first reservation of a day).
QUOTA_RETENTION = timedelta(days=7)
# Rounds of a reservation that lost slots to others and has already been granted some: it then
# returns what it has rather than retrying on. One granted nothing retries while there is room.
QUOTA_ROUNDS = 5
# Keys and days whose top slot a store remembers; past this, it starts over.
QUOTA_TOPS_REMEMBERED = 1000

ALERT_INDEXES = [IndexModel(DUE_ORDER, name="alerts_due")]
# Every stored form of `active` that handlers.product_store.is_true accepts: `1` matches an int,
# a long and a double.
ACTIVE: Doc = {"$in": [True, 1, Regex(TRUE_PATTERN)]}
NOTIFICATION_INDEXES = [
    IndexModel(
        [*((field, ASCENDING) for field in EMAIL_PENDING), *OLDEST_FIRST],
        name="notifications_to_email",
    ),
    IndexModel([("userId", ASCENDING), *OLDEST_FIRST], name="notifications_by_user"),
]
PART_INDEXES = [IndexModel(PRICE_ORDER, name="parts_to_price")]
PRICE_HISTORY_INDEXES = [
    IndexModel(
        [("partId", ASCENDING), ("checkedAt", ASCENDING), ("_id", ASCENDING)],
        name="price_history_by_part",
    ),
]
QUOTA_SLOT_INDEXES = [
    IndexModel([("key", ASCENDING), ("day", ASCENDING), ("n", ASCENDING)], name="quota_slots"),
]
BOUNCE_INDEXES = [IndexModel([("lastAt", DESCENDING)], name="bounces_recent_first")]
CLAIM_INDEXES = [
    IndexModel([("notificationId", ASCENDING), ("seq", ASCENDING)], name="claims_latest"),
    IndexModel([("token", ASCENDING), ("state", ASCENDING)], name="claims_by_token"),
    IndexModel([("at", ASCENDING)], name="claims_by_age"),
]


def product_client_options(url: str) -> dict[str, Any]:
    """The job store's client options, with a longer socket timeout: the scanner's bulk writes
    are heavier than the engine's (on FerretDB's SQLite handler they took seconds), and a scan
    has minutes."""
    options = client_options(url)
    if "socketTimeoutMS" in options:
        options["socketTimeoutMS"] = SOCKET_TIMEOUT_MS
    return options


def id_forms(ids: Iterable[str]) -> list[Any]:
    """Each id as a string and, when it can be one, as an ObjectId or a 64-bit integer (ids of
    imported data): matches any of them."""
    forms: list[Any] = []
    for value in dict.fromkeys(ids):
        forms.append(value)
        if ObjectId.is_valid(value):
            forms.append(ObjectId(value))
        elif _is_int64_text(value):
            forms.append(int(value))
    return forms


@dataclass(frozen=True)
class StoredId:
    """An `_id` as read, compared and hashed by its BSON encoding: 7 is neither 7.0 nor "7",
    and an id that is a document can key a dict too."""

    value: Any = field(compare=False)
    encoded: bytes


def stored_id(value: Any) -> StoredId:
    return StoredId(value, bson.encode({"_id": value}))


PartKey = tuple[str, StoredId | None]


def checks_by_part(checks: Sequence[PriceCheck]) -> dict[PartKey, list[PriceCheck]]:
    """The checks of each part, in order, by (id as text, `_id` as read when given)."""
    by_part: dict[PartKey, list[PriceCheck]] = {}
    for check in checks:
        as_read = None if check.stored_id is None else stored_id(check.stored_id)
        by_part.setdefault((check.part_id, as_read), []).append(check)
    return by_part


def matched_ids(wanted: Iterable[PartKey], found: Sequence[Any]) -> dict[PartKey, Any]:
    """Each wanted part -> the `_id` stored for it: the one read, if found, else a found `_id`
    whose text it is."""
    found_as_is = {stored_id(stored) for stored in found}
    by_text: dict[str, Any] = {}
    for stored in found:
        by_text.setdefault(str(stored), stored)
    matched: dict[PartKey, Any] = {}
    for part_id, as_read in wanted:
        if as_read is not None:
            if as_read in found_as_is:
                matched[(part_id, as_read)] = as_read.value
        elif part_id in by_text:
            matched[(part_id, as_read)] = by_text[part_id]
    return matched


def _is_int64_text(value: str) -> bool:
    try:
        number = int(value)
    except ValueError:
        return False
    return str(number) == value and -(2**63) <= number < 2**63


def due_filter(now: datetime) -> Doc:
    # `$not: {$gt}` also matches an unset nextCheckAt; a condition on `rules.active` is "some
    # rule is active" (FerretDB's $elemMatch cannot say it).
    return {"active": ACTIVE, "rules.active": ACTIVE, "nextCheckAt": {"$not": {"$gt": now}}}


def next_claim(
    latest: Doc | None, notification_id: str, *, now: datetime, token: str, until: datetime
) -> Doc | None:
    """The claim a scan inserts to take a notification, or None while another claim holds it
    (live) or it is done. Its `_id` follows the latest claim's: two scans that read the same
    latest claim insert the same `_id`, and only one of them can."""
    if latest is not None and _holds(latest, now):
        return None
    seq = 1 if latest is None else int(latest["seq"]) + 1
    return {
        "_id": f"{notification_id}#{seq}",
        "notificationId": notification_id,
        "seq": seq,
        "token": token,
        "until": until,
        "state": CLAIMED,
        "at": now,
    }


def _holds(claim: Doc, now: datetime) -> bool:
    return bool(claim["state"] == DONE or (claim["state"] == CLAIMED and claim["until"] >= now))


def price_write(part_id: Any, write: PriceWrite) -> UpdateOne:
    """A part's price write, by its `_id` as stored (looked up by key on FerretDB)."""
    update: Doc = {"$set": write.sets}
    if write.unsets:
        update["$unset"] = dict.fromkeys(write.unsets, "")
    return UpdateOne({"_id": part_id}, update)


def to_price(checked_before: datetime) -> Doc:
    # `$not: {$gte}` also matches a missing or null priceCheckedAt (never priced).
    return {"priceCheckedAt": {"$not": {"$gte": checked_before}}}


def quota_slot(key: str, day: date, n: int, at: datetime) -> Doc:
    """The n-th unit of `key`'s quota on `day`: its `_id` can be inserted once."""
    return {
        "_id": f"{key}|{day.isoformat()}|{n:08d}",
        "key": key,
        "day": day.isoformat(),
        "n": n,
        "at": at,
    }


def id_filter(alert_id: str) -> Any:
    """Equality on `_id` (which FerretDB looks up by key; `$in` it scans for), or both forms for
    an id that may be an ObjectId."""
    return {"$in": id_forms([alert_id])} if ObjectId.is_valid(alert_id) else alert_id


def alert_write(updates: list[RuleUpdate]) -> UpdateOne:
    """One alert's rule updates and nextCheckAt, if every rule they touch is still as read.

    Conditions are per field (`rules.<i>.<field>`), not on whole rules: the same test, which
    FerretDB evaluates about ten times faster than equality of embedded documents."""
    conditions = {
        f"rules.{u.index}.{field}": value
        for u in updates
        for field, value in rule_conditions(u.rule_as_read).items()
    }
    changes = {
        f"rules.{u.index}.{field}": value
        for u in updates
        for field, value in rule_fields(u).items()
    }
    return UpdateOne(
        {"_id": id_filter(updates[0].alert_id), **conditions},
        {"$set": {**changes, "nextCheckAt": updates[0].next_check_at}},
    )


def reschedule_write(reschedule: Reschedule) -> UpdateOne:
    return UpdateOne(
        {"_id": id_filter(reschedule.alert_id), "nextCheckAt": reschedule.next_check_at_as_read},
        {"$set": {"nextCheckAt": reschedule.next_check_at}},
    )


def written_by(doc: Doc, update: RuleUpdate) -> bool:
    """Whether the rule at the update's position now carries this scan's write."""
    rules = doc.get("rules")
    if not isinstance(rules, list) or not 0 <= update.index < len(rules):
        return False
    rule = rules[update.index]
    return (
        isinstance(rule, dict)
        and rule.get("id") == update.rule_as_read.get("id")
        and rule.get("lastScanId") == update.scan_id
    )


class MongoProductStore(MongoDatabase):
    """Alerts, parts and notifications in MongoDB; every batch is a bounded number of commands.
    A URL gives it a client of its own, with a longer socket timeout (product_client_options);
    it may also share the job store's client."""

    INDEXES: ClassVar[Mapping[str, Sequence[IndexModel]]] = {
        "alerts": ALERT_INDEXES,
        "notifications": NOTIFICATION_INDEXES,
        "emailClaims": CLAIM_INDEXES,
        "parts": PART_INDEXES,
        "priceHistory": PRICE_HISTORY_INDEXES,
        "quotaSlots": QUOTA_SLOT_INDEXES,
        "emailBounces": BOUNCE_INDEXES,
    }
    WHAT: ClassVar[str] = "the product store"

    def __init__(self, target: str | Client, *, database: str | None = None) -> None:
        super().__init__(target, database=database)
        # The email claims this store won and has not ended: notification id -> claim id, and
        # the notifications of each claiming token.
        self._claims: dict[str, str] = {}
        self._claims_of_token: dict[str, set[str]] = {}
        # The highest quota slot known taken, by key and day (a lower bound: others take more).
        self._quota_tops: dict[tuple[str, date], int] = {}

    def client_options(self, url: str) -> dict[str, Any]:
        return product_client_options(url)

    # -- collections ----------------------------------------------------------------------------

    @property
    def alerts(self) -> Documents:
        return self.database["alerts"]

    @property
    def part_docs(self) -> Documents:
        return self.database["parts"]

    @property
    def notification_docs(self) -> Documents:
        return self.database["notifications"]

    @property
    def email_claims(self) -> Documents:
        return self.database["emailClaims"]

    @property
    def price_history_docs(self) -> Documents:
        return self.database["priceHistory"]

    @property
    def lease_docs(self) -> Documents:
        return self.database["leases"]

    @property
    def quota_slots(self) -> Documents:
        return self.database["quotaSlots"]

    @property
    def bounce_docs(self) -> Documents:
        return self.database["emailBounces"]

    async def _bulk(
        self, collection: Documents, writes: Sequence[Any], *, heavy: bool = False
    ) -> None:
        """In commands of the size FerretDB can take (one command on MongoDB). FerretDB commits
        each statement on its own; alert writes go FERRETDB_ALERT_WRITES_PER_COMMAND a command,
        well within the socket timeout."""
        size = self._statements_per_update
        if size is not None and heavy:
            size = FERRETDB_ALERT_WRITES_PER_COMMAND
        for batch in chunks(writes, size):
            await collection.bulk_write(batch, ordered=False)

    async def _find(self, collection: Documents, query: Doc, **options: Any) -> list[Doc]:
        return [doc async for doc in collection.find(query, **options)]

    # -- the scan -------------------------------------------------------------------------------

    @translating_errors
    async def due_alerts(self, now: datetime, limit: int) -> list[Alert]:
        if limit <= 0:  # pymongo reads a limit of 0 as "no limit"
            return []
        cursor = in_one_batch(self.alerts.find(due_filter(now)).sort(DUE_ORDER), limit)
        return [Alert(id=str(doc["_id"]), doc=doc) async for doc in cursor]

    @translating_errors
    async def parts(self, part_ids: Collection[str]) -> dict[str, Doc]:
        if not part_ids:
            return {}
        docs = await self._find(self.part_docs, {"_id": {"$in": id_forms(part_ids)}})
        return {str(doc["_id"]): doc for doc in docs}

    @translating_errors
    async def update_rules(
        self, updates: Sequence[RuleUpdate], reschedules: Sequence[Reschedule] = ()
    ) -> set[RuleKey]:
        groups = by_alert(updates).values()
        writes = [alert_write(g) for g in groups] + [reschedule_write(r) for r in reschedules]
        if not writes:
            return set()
        await self._bulk(self.alerts, writes, heavy=True)
        return await self._winners(updates)

    async def _winners(self, updates: Sequence[RuleUpdate]) -> set[RuleKey]:
        """The updates whose rule now carries their scan's id: one read for the batch."""
        if not updates:
            return set()
        ids = id_forms(u.alert_id for u in updates)
        docs = await self._find(self.alerts, {"_id": {"$in": ids}}, projection={"rules": 1})
        by_id = {str(doc["_id"]): doc for doc in docs}
        return {
            (u.alert_id, u.index)
            for u in updates
            if u.alert_id in by_id and written_by(by_id[u.alert_id], u)
        }

    @translating_errors
    async def insert_notifications(self, notifications: Sequence[Notification]) -> int:
        if not notifications:
            return 0
        docs = [notification_to_doc(n) for n in notifications]
        refused = await insert_ignoring_duplicates(self.notification_docs, docs)
        return len(docs) - len(refused)

    @translating_errors
    async def claim_unemailed(
        self, *, now: datetime, until: datetime, token: str, limit: int
    ) -> list[Notification]:
        if limit <= 0:
            return []
        pending = self.notification_docs.find(EMAIL_PENDING).sort(OLDEST_FIRST)
        docs = [doc async for doc in in_one_batch(pending, limit)]
        latest = await self._latest_claims([doc["_id"] for doc in docs])
        claims = [
            claim
            for doc in docs
            if (
                claim := next_claim(
                    latest.get(doc["_id"]), doc["_id"], now=now, token=token, until=until
                )
            )
        ]
        refused = await insert_ignoring_duplicates(self.email_claims, claims) if claims else set()
        won = [claim for i, claim in enumerate(claims) if i not in refused]
        self._hold(token, won)
        await self.email_claims.delete_many({"at": {"$lt": now - CLAIM_RETENTION}})
        won_ids = {claim["notificationId"] for claim in won}
        return [notification_from_doc(doc) for doc in docs if doc["_id"] in won_ids]

    async def _latest_claims(self, notification_ids: list[Any]) -> dict[str, Doc]:
        if not notification_ids:
            return {}
        query = {"notificationId": {"$in": notification_ids}}
        cursor = self.email_claims.find(query).sort("seq", ASCENDING)
        return {doc["notificationId"]: doc async for doc in cursor}  # the highest seq stays

    def _hold(self, token: str, claims: list[Doc]) -> None:
        """Remember the claims this store won, to end them by `_id` (FerretDB looks up `_id`
        by key and scans for anything else)."""
        for claim in claims:
            self._claims[claim["notificationId"]] = claim["_id"]
            self._claims_of_token.setdefault(token, set()).add(claim["notificationId"])

    async def _end_claims(self, ids: Iterable[str], state: str, at: datetime | None) -> None:
        """The live claims on these notifications become `state` (only their holder ends them):
        by `_id` for those this store holds, by query for any other. `at` (when it happened)
        starts the claim's retention again; None leaves it at the claim's time."""
        ids = list(ids)
        held = [self._claims.pop(i) for i in ids if i in self._claims]
        ended = {"$set": {"state": state} if at is None else {"state": state, "at": at}}
        # By `_id` alone: only the holder ends a claim, and FerretDB scans for any other filter.
        await self._bulk(self.email_claims, [UpdateOne({"_id": c}, ended) for c in held])
        if len(held) < len(ids):
            others = {"notificationId": {"$in": ids}, "state": CLAIMED}
            await self.email_claims.update_many(others, ended)

    async def _update_each(self, ids: Sequence[str], update: Doc) -> None:
        """The same update of each notification, by `_id` (see `_hold`)."""
        await self._bulk(self.notification_docs, [UpdateOne({"_id": i}, update) for i in ids])

    @translating_errors
    async def mark_emailed(self, ids: Sequence[str], at: datetime) -> None:
        await self._update_each(ids, {"$set": {"emailedAt": at}})
        await self._end_claims(ids, DONE, at)

    @translating_errors
    async def record_email_failure(
        self, ids: Sequence[str], *, error: str, at: datetime, give_up: bool
    ) -> None:
        failed: Doc = {"emailError": error}
        if give_up:
            failed["emailFailedAt"] = at
        await self._update_each(ids, {"$set": failed, "$inc": {"emailAttempts": 1}})
        await self._end_claims(ids, DONE if give_up else RELEASED, at)

    @translating_errors
    async def release_email_claims(self, token: str) -> None:
        held = self._claims_of_token.pop(token, None)
        if held is None:  # not this store's claims: find them
            await self.email_claims.update_many(
                {"token": token, "state": CLAIMED}, {"$set": {"state": RELEASED}}
            )
            return
        still_held = [i for i in held if i in self._claims]
        await self._end_claims(still_held, RELEASED, None)

    @translating_errors
    async def turn_off_email(self, user_id: str, alert_id: str | None) -> int:
        """Each alert's rules by position (FerretDB has no `$[]`); a rule the product adds
        between the read and the write keeps its own setting."""
        query: Doc = {"userId": {"$in": id_forms([user_id])}}
        if alert_id is not None:
            query["_id"] = id_filter(alert_id)
        docs = await self._find(self.alerts, query, projection={"rules": 1})
        writes = [
            UpdateOne(
                {"_id": doc["_id"]},
                {"$set": {f"rules.{i}.notifyEmail": False for i in positions}},
            )
            for doc in docs
            if (positions := rules_sending_email(doc))
        ]
        await self._bulk(self.alerts, writes, heavy=True)
        if docs:
            await self.notification_docs.update_many(
                {
                    "userId": user_id,
                    "alertId": {"$in": [str(doc["_id"]) for doc in docs]},
                    **EMAIL_PENDING,
                },
                {"$set": {"notifyEmail": False}},
            )
        return len(writes)

    # -- hard bounces ---------------------------------------------------------------------------

    @translating_errors
    async def record_bounce(self, address: str, *, error: str, at: datetime) -> int:
        key = bounce_key(address)
        doc = await self.bounce_docs.find_one_and_update(
            {"_id": key},
            {
                "$inc": {"count": 1},
                "$set": {"lastAt": at, "lastError": error},
                "$setOnInsert": {"address": key, "firstAt": at},
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return int(doc["count"]) if doc else 1

    @translating_errors
    async def bounces(
        self, addresses: Collection[str] | None = None, *, limit: int = 1000
    ) -> list[Bounce]:
        if limit <= 0:
            return []
        if addresses is None:
            cursor = self.bounce_docs.find({}).sort([("lastAt", DESCENDING), ("_id", ASCENDING)])
            return [bounce_from_doc(doc) async for doc in in_one_batch(cursor, limit)]
        keys = list({bounce_key(a) for a in addresses})
        if not keys:
            return []
        return [
            bounce_from_doc(d) for d in await self._find(self.bounce_docs, {"_id": {"$in": keys}})
        ]

    @translating_errors
    async def clear_bounce(self, address: str) -> bool:
        deleted = await self.bounce_docs.delete_one({"_id": bounce_key(address)})
        return deleted.deleted_count == 1

    # -- the catalogue walk ---------------------------------------------------------------------

    @translating_errors
    async def parts_to_price(self, *, checked_before: datetime, limit: int) -> list[Doc]:
        if limit <= 0:
            return []
        cursor = self.part_docs.find(to_price(checked_before)).sort(PRICE_ORDER)
        return [doc async for doc in in_one_batch(cursor, limit)]

    @translating_errors
    async def record_price_checks(self, checks: Sequence[PriceCheck]) -> set[str]:
        if not checks:
            return set()
        by_part = checks_by_part(checks)
        # The parts that exist: none is created, and each write then goes by its `_id` as
        # stored alone. By the id as read where the caller kept it, else by its string forms.
        as_read = {key: key[1].value for key in by_part if key[1] is not None}
        forms = list(as_read.values()) + id_forms(key[0] for key in by_part if key not in as_read)
        found = await self._find(self.part_docs, {"_id": {"$in": forms}}, projection={"_id": 1})
        stored = matched_ids(by_part, [doc["_id"] for doc in found])
        updates = [price_write(stored[key], price_writes(by_part[key])[key[0]]) for key in stored]
        if updates:
            await self._bulk(self.part_docs, updates)
        entries = price_entries([check for key in stored for check in by_part[key]])
        if entries:
            await insert_ignoring_duplicates(self.price_history_docs, entries)
        return {part_id for part_id, _ in stored}

    @translating_errors
    async def price_history(self, part_id: str, *, limit: int = 100) -> list[Doc]:
        if limit <= 0:
            return []
        cursor = self.price_history_docs.find({"partId": part_id}).sort(NEWEST_FIRST)
        return [doc async for doc in in_one_batch(cursor, limit)]

    @translating_errors
    async def reserve_quota(self, key: str, day: date, *, limit: int, want: int) -> int:
        """Slots top + 1... inserted, round after round while others take some first. A round
        that loses a slot finds a higher top next time, so the rounds end once the limit is
        reached; and a reservation given nothing tries again until then (0 means spent)."""
        granted = 0
        at = datetime.now(UTC)  # for people reading the slots; no query uses it
        for round_ in range(1, limit + 2):
            remembered = self._quota_tops.get((key, day))
            top = await self._top_slot(key, day) if remembered is None else remembered
            slots = [
                quota_slot(key, day, n, at)
                for n in range(top + 1, min(top + want - granted, limit) + 1)
            ]
            if not slots and remembered is not None:
                # Spent, as far as this store knows: make sure (ops may have deleted slots).
                self._remember_top(key, day, None)
                continue
            if not slots:
                break
            refused = await insert_ignoring_duplicates(self.quota_slots, slots)
            granted += len(slots) - len(refused)
            self._remember_top(key, day, slots[-1]["n"] if len(refused) < len(slots) else None)
            if top == 0 and 0 not in refused:  # this day's first slot: forget old days
                cutoff = (day - QUOTA_RETENTION).isoformat()
                await self.quota_slots.delete_many({"key": key, "day": {"$lt": cutoff}})
            if granted >= want or (granted > 0 and round_ >= QUOTA_ROUNDS):
                break
        return granted

    def _remember_top(self, key: str, day: date, top: int | None) -> None:
        """Every slot number tried is taken now, by this store or another, so the next
        reservation starts past them without reading the top (FerretDB reads every slot of the
        collection for it). After a round that won nothing, others are ahead: forget, read."""
        if top is None:
            self._quota_tops.pop((key, day), None)
            return
        if len(self._quota_tops) > QUOTA_TOPS_REMEMBERED:
            self._quota_tops.clear()
        self._quota_tops[(key, day)] = top

    async def _top_slot(self, key: str, day: date) -> int:
        """The highest slot number taken of the day (0 before the first)."""
        cursor = self.quota_slots.find({"key": key, "day": day.isoformat()}, projection={"n": 1})
        top = await cursor.sort("n", DESCENDING).limit(1).to_list()
        return int(top[0]["n"]) if top else 0

    @translating_errors
    async def quota_used(self, key: str, day: date) -> int:
        return await self.quota_slots.count_documents({"key": key, "day": day.isoformat()})

    @translating_errors
    async def take_lease(self, name: str, *, owner: str, until: datetime, now: datetime) -> bool:
        """An insert on the lease's `_id`, which one taker wins; a hold that ended is deleted
        first, by its exact owner and end, so a hold taken meanwhile is not."""
        hold = {"_id": name, "owner": owner, "until": until}
        if not await insert_ignoring_duplicates(self.lease_docs, [hold]):
            return True
        current = await self.lease_docs.find_one({"_id": name})
        if current is not None and current["owner"] == owner:
            await self.lease_docs.update_one({"_id": name}, {"$set": {"until": until}})
            return True
        if current is not None and current["until"] >= now:
            return False
        if current is not None:
            await self.lease_docs.delete_one(current)
        return not await insert_ignoring_duplicates(self.lease_docs, [hold])

    @translating_errors
    async def release_lease(self, name: str, *, owner: str) -> None:
        await self.lease_docs.delete_one({"_id": name, "owner": owner})

    # -- data for the demo, the tests and the app -----------------------------------------------

    @translating_errors
    async def upsert_parts(self, parts: Sequence[Doc]) -> None:
        await self._bulk(
            self.part_docs, [ReplaceOne({"_id": p["_id"]}, p, upsert=True) for p in parts]
        )

    @translating_errors
    async def upsert_alerts(self, alerts: Sequence[Doc]) -> None:
        await self._bulk(
            self.alerts, [ReplaceOne({"_id": a["_id"]}, a, upsert=True) for a in alerts]
        )

    @translating_errors
    async def insert_missing_alerts(self, alerts: Sequence[Doc]) -> int:
        if not alerts:
            return 0
        refused = await insert_ignoring_duplicates(self.alerts, list(alerts))
        return len(alerts) - len(refused)

    @translating_errors
    async def get_alert(self, alert_id: str) -> Alert | None:
        doc = await self.alerts.find_one({"_id": id_filter(alert_id)})
        return None if doc is None else Alert(id=str(doc["_id"]), doc=doc)

    @translating_errors
    async def notifications(
        self, *, user_id: str | None = None, limit: int = 1000
    ) -> list[Notification]:
        if limit <= 0:
            return []
        query = {} if user_id is None else {"userId": user_id}
        cursor = in_one_batch(self.notification_docs.find(query).sort(OLDEST_FIRST), limit)
        return [notification_from_doc(doc) async for doc in cursor]
