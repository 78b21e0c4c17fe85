"""The product's documents on MongoDB: ids in every form the product writes them, the filters
and writes of the scan, the email claims, the price checks and the quota slots, and the indexes
they need. The store (mongodb.py) puts them together."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

import bson
from bson import ObjectId, Regex
from pymongo import (
    ASCENDING,
    DESCENDING,
    AsyncMongoClient,
    IndexModel,
    UpdateOne,
)
from pymongo.asynchronous.collection import AsyncCollection

from tickd.handlers.product_store import (
    TRUE_PATTERN,
    Doc,
    PriceCheck,
    Reschedule,
    RuleUpdate,
)
from tickd.handlers.product_store.documents import (
    PriceWrite,
    rule_conditions,
    rule_fields,
)
from tickd.scheduler.store.kit.mongodb import (
    client_options,
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
