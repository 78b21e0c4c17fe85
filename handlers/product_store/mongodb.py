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
  missing indexes created: as the job store (scheduler/store/mongodb/) does.

Ids. The product may use ObjectIds; ids travel as strings and every query matches both forms.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from pymongo import (
    ASCENDING,
    DESCENDING,
    ReplaceOne,
    ReturnDocument,
    UpdateOne,
)

from tickd.handlers.product_store import (
    Alert,
    Bounce,
    Claimed,
    Doc,
    Notification,
    Reschedule,
    RuleKey,
    RuleUpdate,
    Unreadable,
    bounce_key,
)
from tickd.handlers.product_store.documents import (
    bounce_from_doc,
    by_alert,
    decoded_notification,
    notification_to_doc,
    rules_sending_email,
)
from tickd.handlers.product_store.mongodb_prices import (
    MongoPrices,
)
from tickd.handlers.product_store.mongodb_queries import (
    CLAIM_RETENTION,
    CLAIMED,
    DONE,
    DUE_ORDER,
    EMAIL_PENDING,
    OLDEST_FIRST,
    RELEASED,
    alert_write,
    due_filter,
    id_filter,
    id_forms,
    next_claim,
    reschedule_write,
    written_by,
)
from tickd.scheduler.store.kit.mongodb import (
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)


class MongoProductStore(MongoPrices):
    """Alerts, parts and notifications in MongoDB; every batch is a bounded number of commands.
    A URL gives it a client of its own, with a longer socket timeout (product_client_options);
    it may also share the job store's client."""

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
    ) -> Claimed:
        if limit <= 0:
            return Claimed([], [])
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
        decoded = {
            doc["_id"]: decoded_notification(doc["_id"], doc)
            for doc in docs
            if doc["_id"] in won_ids
        }
        unreadable = {i: n for i, n in decoded.items() if isinstance(n, Unreadable)}
        await self._give_up_unreadable(unreadable, now)
        sendable = [n for n in decoded.values() if isinstance(n, Notification)]
        return Claimed(sendable, list(unreadable.values()))

    async def _give_up_unreadable(self, unreadable: dict[Any, Unreadable], at: datetime) -> None:
        """Given up with their error, by `_id` as stored, and their claims done: never claimed
        again. `$set` alone, which holds whatever the document's other fields are."""
        writes = [
            UpdateOne({"_id": i}, {"$set": {"emailError": n.error, "emailFailedAt": at}})
            for i, n in unreadable.items()
        ]
        await self._bulk(self.notification_docs, writes)
        await self._end_claims(list(unreadable), DONE, at)

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
        decoded = [decoded_notification(doc["_id"], doc) async for doc in cursor]
        return [n for n in decoded if isinstance(n, Notification)]
