"""The product's data in the embedded SQLite file, beside the jobs (`sqlite:///path`).

Documents are kept as the product writes them, camelCase JSON with times as ISO 8601 strings,
next to the few columns the queries need (`scannable`, `next_check_at`, `email_pending`...).
sqlite3 blocks, so, as in the job store, one dedicated thread owns this store's connection (a
second connection to the same file, in WAL mode). Every write is one `BEGIN IMMEDIATE`
transaction: a conditional update reads and writes under the write lock, so even two processes
on one file cannot both apply an update to one rule.

The catalogue walk. Parts are taken in the order of an index on the expression
`json_extract(doc, '$.priceCheckedAt')`, NULL (never priced) first: the times are the codec's
ISO 8601 text (UTC, `+00:00`), which sorts as the times do, so a file made before the walk
existed (a `parts` table of `id` and `doc` only) just gains the index. `price_history` keeps the
entries (`checked_at` in microseconds since the epoch for the order), `quota_usage` one counter
per key and UTC day, which `reserve_quota` reads and raises in one transaction.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any, TypeVar

from tickd.handlers.product_store import (
    Alert,
    Bounce,
    Claimed,
    Doc,
    Notification,
    PriceCheck,
    Reschedule,
    RuleKey,
    RuleUpdate,
    Unreadable,
    bounce_key,
)
from tickd.handlers.product_store.documents import (
    PriceWrite,
    bounce_from_doc,
    by_alert,
    decode_failure,
    decoded_notification,
    is_scannable,
    notification_to_doc,
    price_entries,
    price_writes,
    rule_fields,
    rule_is_as_read,
    rules_sending_email,
)
from tickd.scheduler.store.kit import StoreError, as_datetime, micros, to_json_ready
from tickd.scheduler.store.kit.sqlite import SQLiteFile

log = logging.getLogger("tickd.products")
T = TypeVar("T")
# Ids per `IN (...)`: well under SQLite's limit on bound parameters.
IDS_PER_STATEMENT = 500

SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    id TEXT PRIMARY KEY,
    doc TEXT NOT NULL,
    -- active, with an active rule: what the due query scans.
    scannable INTEGER NOT NULL,
    -- nextCheckAt in microseconds since the epoch; NULL (never scanned) sorts first.
    next_check_at INTEGER
);
CREATE INDEX IF NOT EXISTS alerts_due ON alerts (next_check_at, id) WHERE scannable = 1;

CREATE TABLE IF NOT EXISTS parts (
    id TEXT PRIMARY KEY,
    doc TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS notifications (
    id TEXT PRIMARY KEY,
    doc TEXT NOT NULL,
    user_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    -- notifyEmail, not emailed yet, not given up: what a scan may claim to send.
    email_pending INTEGER NOT NULL,
    claim_token TEXT,
    claim_until INTEGER
);
CREATE INDEX IF NOT EXISTS notifications_to_email ON notifications (created_at, id)
    WHERE email_pending = 1;
CREATE INDEX IF NOT EXISTS notifications_by_user ON notifications (user_id, created_at);
CREATE INDEX IF NOT EXISTS notifications_claims ON notifications (claim_token)
    WHERE claim_token IS NOT NULL;

-- The catalogue walk's order (the expression must read exactly as in PRICE_CHECKED_AT).
CREATE INDEX IF NOT EXISTS parts_to_price ON parts (json_extract(doc, '$.priceCheckedAt'), id);

CREATE TABLE IF NOT EXISTS price_history (
    id TEXT PRIMARY KEY,
    part_id TEXT NOT NULL,
    -- checkedAt in microseconds since the epoch.
    checked_at INTEGER NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS price_history_by_part ON price_history (part_id, checked_at, id);

CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    -- In microseconds since the epoch.
    until INTEGER NOT NULL
);

-- Hard bounces by address (bounce_key); `last_at` in microseconds since the epoch.
CREATE TABLE IF NOT EXISTS email_bounces (
    address TEXT PRIMARY KEY,
    doc TEXT NOT NULL,
    last_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS quota_usage (
    key TEXT NOT NULL,
    -- The UTC day, ISO 8601.
    day TEXT NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (key, day)
);
"""

CLAIMABLE = "email_pending = 1 AND (claim_token IS NULL OR claim_until < ?)"
PRICE_CHECKED_AT = "json_extract(doc, '$.priceCheckedAt')"
# Never priced, then priced before a time: two searches of the index `parts_to_price` (one
# query with OR would scan all of it whenever fewer than `limit` parts are left to price).
NEVER_PRICED = f"SELECT id, doc FROM parts WHERE {PRICE_CHECKED_AT} IS NULL ORDER BY id LIMIT ?"
PRICED_BEFORE = (
    f"SELECT id, doc FROM parts WHERE {PRICE_CHECKED_AT} < ? "
    f"ORDER BY {PRICE_CHECKED_AT}, id LIMIT ?"
)


# Alerts to score again at open: `scannable` of a file written when only a boolean `active`
# counted. Those with an `active` (theirs or a rule's) that is not a JSON boolean are read back
# and scored as today (is_scannable); a file without any costs one pass over its inactive alerts.
NOT_BOOLEAN = "NOT IN ('true', 'false', 'null')"
MAY_BE_UNSCORED = f"""
SELECT id, doc FROM alerts WHERE scannable = 0 AND (
    json_type(doc, '$.active') {NOT_BOOLEAN}
    OR EXISTS (SELECT 1 FROM json_each(doc, '$.rules')
               WHERE CASE WHEN type = 'object' THEN json_type(value, '$.active') END {NOT_BOOLEAN})
)"""


def to_json(doc: Any) -> str:
    return json.dumps(to_json_ready(doc), separators=(",", ":"))


def from_json(text: str) -> Doc | Unreadable:
    """A stored document, or why it cannot be loaded (an integer of more digits than Python
    reads, nesting deeper than its parser goes, text that is not a JSON object): each row is
    decoded on its own, so one such row never fails the batch it is read in."""
    try:
        doc = json.loads(text)
    except Exception as exc:
        return Unreadable("", f"the stored document cannot be read: {decode_failure(exc)}")
    if not isinstance(doc, dict):
        return Unreadable("", "the stored document is not a JSON object")
    return doc


def readable_rows(rows: Iterable[sqlite3.Row], what: str) -> dict[str, Doc]:
    """The rows' documents by id, each that cannot be loaded left out and logged."""
    docs: dict[str, Doc] = {}
    for row in rows:
        doc = from_json(row["doc"])
        if isinstance(doc, Unreadable):
            log.warning("%s %s: %s; left out", what, row["id"], doc.error)
        else:
            docs[row["id"]] = doc
    return docs


def id_chunks(ids: Collection[str]) -> Iterator[list[str]]:
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), IDS_PER_STATEMENT):
        yield unique[start : start + IDS_PER_STATEMENT]


def placeholders(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def alert_row(doc: Mapping[str, Any]) -> tuple[str, str, int, int | None]:
    """(id, doc, scannable, next_check_at) for the alerts table."""
    next_check = doc.get("nextCheckAt")
    when = None if next_check is None else as_datetime(next_check, "nextCheckAt")
    return str(doc["_id"]), to_json(doc), int(is_scannable(doc)), micros(when)


def notification_row(n: Notification) -> tuple[Any, ...]:
    pending = n.notify_email and n.emailed_at is None and n.email_failed_at is None
    doc = to_json(notification_to_doc(n))
    return n.id, doc, n.user_id, micros(n.created_at), int(pending)


def price_entry_row(entry: Doc) -> tuple[str, str, int | None, str]:
    """(id, part_id, checked_at, doc) for the price_history table."""
    return entry["_id"], entry["partId"], micros(entry["checkedAt"]), to_json(entry)


class SQLiteProductStore(SQLiteFile):
    SCHEMA = SCHEMA
    THREAD = "tickd-products"

    async def open(self) -> None:
        await super().open()
        await self._write(_score_again)

    # -- plumbing -------------------------------------------------------------------------------

    async def _call(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        def call(db: sqlite3.Connection) -> T:
            try:
                return _in_transaction(db, fn) if write else fn(db)
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite: {exc}") from exc

        return await self._in_thread(call)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._call(fn, write=False)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._call(fn, write=True)

    # -- the scan -------------------------------------------------------------------------------

    async def due_alerts(self, now: datetime, limit: int) -> list[Alert]:
        sql = (
            "SELECT id, doc FROM alerts WHERE scannable = 1 "
            "AND (next_check_at IS NULL OR next_check_at <= ?) "
            "ORDER BY next_check_at, id LIMIT ?"
        )
        rows = await self._read(lambda db: db.execute(sql, (micros(now), limit)).fetchall())
        return [stored_alert(row["id"], row["doc"]) for row in rows]

    async def parts(self, part_ids: Collection[str]) -> dict[str, Doc]:
        def select(db: sqlite3.Connection) -> dict[str, Doc]:
            found: dict[str, Doc] = {}
            for ids in id_chunks(part_ids):
                sql = f"SELECT id, doc FROM parts WHERE id IN ({placeholders(ids)})"
                found |= readable_rows(db.execute(sql, ids), "part")
            return found

        return await self._read(select)

    async def update_rules(
        self, updates: Sequence[RuleUpdate], reschedules: Sequence[Reschedule] = ()
    ) -> set[RuleKey]:
        if not updates and not reschedules:
            return set()
        ids = [u.alert_id for u in updates] + [r.alert_id for r in reschedules]

        def apply(db: sqlite3.Connection) -> set[RuleKey]:
            docs = _docs(db, "alerts", ids)
            _reschedule_unreadable(db, [r for r in reschedules if r.alert_id not in docs])
            applied = {
                (u.alert_id, u.index)
                for group in by_alert(updates).values()
                if _apply_updates(docs, group)
                for u in group
            }
            moved = {r.alert_id for r in reschedules if _apply_reschedule(docs, r)}
            touched = {alert_id for alert_id, _ in applied} | moved
            rows = [alert_row(docs[alert_id]) for alert_id in touched]
            db.executemany(
                "UPDATE alerts SET doc = ?, scannable = ?, next_check_at = ? WHERE id = ?",
                [(doc, scannable, at, alert_id) for alert_id, doc, scannable, at in rows],
            )
            return applied

        return await self._write(apply)

    async def insert_notifications(self, notifications: Sequence[Notification]) -> int:
        rows = [notification_row(n) for n in notifications]
        sql = (
            "INSERT OR IGNORE INTO notifications (id, doc, user_id, created_at, email_pending) "
            "VALUES (?, ?, ?, ?, ?)"
        )

        def insert(db: sqlite3.Connection) -> int:
            return sum(db.execute(sql, row).rowcount for row in rows)

        return await self._write(insert) if rows else 0

    async def claim_unemailed(
        self, *, now: datetime, until: datetime, token: str, limit: int
    ) -> Claimed:
        at = micros(now)
        select = f"SELECT id FROM notifications WHERE {CLAIMABLE} ORDER BY created_at, id LIMIT ?"
        claim = "UPDATE notifications SET claim_token = ?, claim_until = ? WHERE id = ?"

        def claim_oldest(db: sqlite3.Connection) -> Claimed:
            ids = [row["id"] for row in db.execute(select, (at, limit))]
            db.executemany(claim, [(token, micros(until), i) for i in ids])
            decoded = _decoded_notifications(
                db, "claim_token = ? ORDER BY created_at, id", (token,)
            )
            unreadable = [n for n in decoded if isinstance(n, Unreadable)]
            _give_up_unreadable(db, unreadable, now)
            sendable = [n for n in decoded if isinstance(n, Notification)]
            return Claimed(sendable, unreadable)

        return await self._write(claim_oldest)

    async def mark_emailed(self, ids: Sequence[str], at: datetime) -> None:
        sets = "doc = json_set(doc, '$.emailedAt', ?), email_pending = 0"
        await self._update_notifications(ids, sets, (to_json_ready(at),))

    async def record_email_failure(
        self, ids: Sequence[str], *, error: str, at: datetime, give_up: bool
    ) -> None:
        sets = (
            "doc = json_set(doc, '$.emailError', ?, '$.emailFailedAt', ?, '$.emailAttempts', "
            "coalesce(json_extract(doc, '$.emailAttempts'), 0) + 1), "
            "email_pending = email_pending AND NOT ?"
        )
        failed_at = to_json_ready(at) if give_up else None
        await self._update_notifications(ids, sets, (error, failed_at, give_up))

    async def _update_notifications(
        self, ids: Sequence[str], sets: str, args: tuple[Any, ...]
    ) -> None:
        """Set `sets` on the notifications and drop their claims."""

        def update(db: sqlite3.Connection) -> None:
            for chunk in id_chunks(ids):
                sql = (
                    f"UPDATE notifications SET {sets}, claim_token = NULL, claim_until = NULL "
                    f"WHERE id IN ({placeholders(chunk)})"
                )
                db.execute(sql, (*args, *chunk))

        if ids:
            await self._write(update)

    async def release_email_claims(self, token: str) -> None:
        sql = (
            "UPDATE notifications SET claim_token = NULL, claim_until = NULL WHERE claim_token = ?"
        )
        await self._write(lambda db: db.execute(sql, (token,)))

    async def turn_off_email(self, user_id: str, alert_id: str | None) -> int:
        where, args = ("id = ?", (alert_id,)) if alert_id is not None else ("1", ())
        # The user's alerts are found by reading them (no column holds the user): an
        # unsubscribe is rare, and one user's "all" reads the table once.
        select = f"SELECT id, doc FROM alerts WHERE {where}"
        pending = (
            "UPDATE notifications SET doc = json_set(doc, '$.notifyEmail', json('false')), "
            "email_pending = 0 WHERE user_id = ? AND email_pending = 1 "
            "AND json_extract(doc, '$.alertId') = ?"
        )

        def turn_off(db: sqlite3.Connection) -> int:
            docs = readable_rows(db.execute(select, args), "alert")
            mine = {i: doc for i, doc in docs.items() if str(doc.get("userId")) == user_id}
            changed = 0
            for alert_id_, doc in mine.items():
                positions = rules_sending_email(doc)
                for index in positions:
                    doc["rules"][index]["notifyEmail"] = False
                if positions:
                    changed += 1
                    row = alert_row(doc)
                    db.execute(
                        "UPDATE alerts SET doc = ?, scannable = ?, next_check_at = ? WHERE id = ?",
                        (row[1], row[2], row[3], alert_id_),
                    )
                db.execute(pending, (user_id, alert_id_))
            return changed

        return await self._write(turn_off)

    # -- hard bounces ---------------------------------------------------------------------------

    async def record_bounce(self, address: str, *, error: str, at: datetime) -> int:
        key = bounce_key(address)
        upsert = (
            "INSERT INTO email_bounces (address, doc, last_at) VALUES (?, ?, ?) "
            "ON CONFLICT (address) DO UPDATE SET doc = excluded.doc, last_at = excluded.last_at"
        )

        def record(db: sqlite3.Connection) -> int:
            row = db.execute("SELECT doc FROM email_bounces WHERE address = ?", (key,)).fetchone()
            before: Doc = json.loads(row["doc"]) if row else {"firstAt": at, "count": 0}
            count = int(before["count"]) + 1
            doc = {**before, "address": key, "count": count, "lastAt": at, "lastError": error}
            db.execute(upsert, (key, to_json(doc), micros(at)))
            return count

        # Read and raised under the write lock: two bounces at once count two.
        return await self._write(record)

    async def bounces(
        self, addresses: Collection[str] | None = None, *, limit: int = 1000
    ) -> list[Bounce]:
        def select(db: sqlite3.Connection) -> list[Bounce]:
            if addresses is None:
                sql = "SELECT doc FROM email_bounces ORDER BY last_at DESC, address LIMIT ?"
                rows = db.execute(sql, (limit,)).fetchall()
            else:
                rows = []
                for keys in id_chunks([bounce_key(a) for a in addresses]):
                    sql = f"SELECT doc FROM email_bounces WHERE address IN ({placeholders(keys)})"
                    rows += db.execute(sql, keys).fetchall()
            return [bounce_from_doc(json.loads(row["doc"])) for row in rows]

        return await self._read(select) if limit > 0 else []

    async def clear_bounce(self, address: str) -> bool:
        sql = "DELETE FROM email_bounces WHERE address = ?"
        deleted = await self._write(lambda db: db.execute(sql, (bounce_key(address),)).rowcount)
        return bool(deleted)

    # -- the catalogue walk ---------------------------------------------------------------------

    async def parts_to_price(self, *, checked_before: datetime, limit: int) -> list[Doc]:
        before = to_json_ready(checked_before)

        def select(db: sqlite3.Connection) -> list[Doc]:
            rows = db.execute(NEVER_PRICED, (limit,)).fetchall()
            if len(rows) < limit:
                rows += db.execute(PRICED_BEFORE, (before, limit - len(rows))).fetchall()
            return list(readable_rows(rows, "part").values())

        # SQLite reads a negative LIMIT as "no limit".
        return await self._read(select) if limit > 0 else []

    async def record_price_checks(self, checks: Sequence[PriceCheck]) -> set[str]:
        writes = price_writes(checks)
        entries = price_entries(checks)

        def record(db: sqlite3.Connection) -> set[str]:
            docs = _docs(db, "parts", writes)
            for part_id, doc in docs.items():
                _apply_price_write(doc, writes[part_id])
            db.executemany(
                "UPDATE parts SET doc = ? WHERE id = ?",
                [(to_json(doc), part_id) for part_id, doc in docs.items()],
            )
            db.executemany(
                "INSERT OR IGNORE INTO price_history (id, part_id, checked_at, doc) "
                "VALUES (?, ?, ?, ?)",
                [price_entry_row(e) for e in entries if e["partId"] in docs],
            )
            return set(docs)

        return await self._write(record) if writes else set()

    async def price_history(self, part_id: str, *, limit: int = 100) -> list[Doc]:
        sql = (
            "SELECT id, doc FROM price_history WHERE part_id = ? "
            "ORDER BY checked_at DESC, id DESC LIMIT ?"
        )
        if limit <= 0:
            return []
        rows = await self._read(lambda db: db.execute(sql, (part_id, limit)).fetchall())
        return list(readable_rows(rows, "price history entry").values())

    async def reserve_quota(self, key: str, day: date, *, limit: int, want: int) -> int:
        select = "SELECT used FROM quota_usage WHERE key = ? AND day = ?"
        add = (
            "INSERT INTO quota_usage (key, day, used) VALUES (?, ?, ?) "
            "ON CONFLICT (key, day) DO UPDATE SET used = used + excluded.used"
        )

        def reserve(db: sqlite3.Connection) -> int:
            row = db.execute(select, (key, day.isoformat())).fetchone()
            granted = max(0, min(want, limit - (row["used"] if row else 0)))
            if granted:
                db.execute(add, (key, day.isoformat(), granted))
            return granted

        # Read and raised under the write lock: no other writer between the two.
        return await self._write(reserve)

    async def quota_used(self, key: str, day: date) -> int:
        sql = "SELECT used FROM quota_usage WHERE key = ? AND day = ?"
        row = await self._read(lambda db: db.execute(sql, (key, day.isoformat())).fetchone())
        return 0 if row is None else int(row["used"])

    async def take_lease(self, name: str, *, owner: str, until: datetime, now: datetime) -> bool:
        take = (
            "INSERT INTO leases (name, owner, until) VALUES (?, ?, ?) ON CONFLICT (name) DO "
            "UPDATE SET owner = excluded.owner, until = excluded.until "
            "WHERE leases.until < ? OR leases.owner = excluded.owner"
        )

        def take_if_free(db: sqlite3.Connection) -> bool:
            return db.execute(take, (name, owner, micros(until), micros(now))).rowcount == 1

        return await self._write(take_if_free)

    async def release_lease(self, name: str, *, owner: str) -> None:
        sql = "DELETE FROM leases WHERE name = ? AND owner = ?"
        await self._write(lambda db: db.execute(sql, (name, owner)))

    # -- data for the demo, the tests and the app -----------------------------------------------

    async def upsert_parts(self, parts: Sequence[Doc]) -> None:
        rows = [(str(part["_id"]), to_json(part)) for part in parts]
        sql = "INSERT OR REPLACE INTO parts (id, doc) VALUES (?, ?)"
        await self._write(lambda db: db.executemany(sql, rows))

    async def upsert_alerts(self, alerts: Sequence[Doc]) -> None:
        await self._insert_alerts(alerts, "INSERT OR REPLACE")

    async def insert_missing_alerts(self, alerts: Sequence[Doc]) -> int:
        return await self._insert_alerts(alerts, "INSERT OR IGNORE")

    async def _insert_alerts(self, alerts: Sequence[Doc], verb: str) -> int:
        rows = [alert_row(alert) for alert in alerts]
        sql = f"{verb} INTO alerts (id, doc, scannable, next_check_at) VALUES (?, ?, ?, ?)"
        return await self._write(lambda db: sum(db.execute(sql, row).rowcount for row in rows))

    async def get_alert(self, alert_id: str) -> Alert | None:
        sql = "SELECT doc FROM alerts WHERE id = ?"
        row = await self._read(lambda db: db.execute(sql, (alert_id,)).fetchone())
        return None if row is None else stored_alert(alert_id, row["doc"])

    async def notifications(
        self, *, user_id: str | None = None, limit: int = 1000
    ) -> list[Notification]:
        where, args = ("user_id = ?", (user_id,)) if user_id is not None else ("1", ())
        sql = f"{where} ORDER BY created_at, id LIMIT ?"
        decoded = await self._read(lambda db: _decoded_notifications(db, sql, (*args, limit)))
        return [n for n in decoded if isinstance(n, Notification)]


def stored_alert(alert_id: str, text: str) -> Alert:
    doc = from_json(text)
    if isinstance(doc, Unreadable):
        return Alert(id=alert_id, doc={}, unreadable=doc.error)
    return Alert(id=alert_id, doc=doc)


def _score_again(db: sqlite3.Connection) -> None:
    found = readable_rows(db.execute(MAY_BE_UNSCORED), "alert")
    scannable = [(alert_id,) for alert_id, doc in found.items() if is_scannable(doc)]
    db.executemany("UPDATE alerts SET scannable = 1 WHERE id = ?", scannable)


def _in_transaction(db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run `fn` holding the write lock from its first read: BEGIN IMMEDIATE ... COMMIT."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = fn(db)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return result


def _docs(db: sqlite3.Connection, table: str, ids: Collection[str]) -> dict[str, Doc]:
    """The documents of `table` with these ids that exist and can be loaded, by id."""
    docs: dict[str, Doc] = {}
    for chunk in id_chunks(ids):
        sql = f"SELECT id, doc FROM {table} WHERE id IN ({placeholders(chunk)})"
        docs |= readable_rows(db.execute(sql, chunk), table.removesuffix("s"))
    return docs


def _apply_updates(docs: dict[str, Doc], updates: list[RuleUpdate]) -> bool:
    """One alert's updates, all of them if every rule is still as read, else none."""
    alert = docs.get(updates[0].alert_id)
    if alert is None or not all(rule_is_as_read(alert, u) for u in updates):
        return False
    for update in updates:
        alert["rules"][update.index].update(to_json_ready(rule_fields(update)))
    alert["nextCheckAt"] = to_json_ready(updates[0].next_check_at)
    return True


def _apply_price_write(part: Doc, write: PriceWrite) -> None:
    part.update(to_json_ready(write.sets))
    for name in write.unsets:
        part.pop(name, None)


def _apply_reschedule(docs: dict[str, Doc], reschedule: Reschedule) -> bool:
    alert = docs.get(reschedule.alert_id)
    if alert is None or alert.get("nextCheckAt") != reschedule.next_check_at_as_read:
        return False
    alert["nextCheckAt"] = to_json_ready(reschedule.next_check_at)
    return True


def _reschedule_unreadable(db: sqlite3.Connection, reschedules: Sequence[Reschedule]) -> None:
    """Move the due time of alerts whose document cannot be loaded (their scan recorded the
    error): the column alone, so they are read again later, not at the head of every scan."""
    sql = "UPDATE alerts SET next_check_at = ? WHERE id = ?"
    db.executemany(sql, [(micros(r.next_check_at), r.alert_id) for r in reschedules])


def _decoded_notifications(
    db: sqlite3.Connection, where: str, args: tuple[Any, ...]
) -> list[Notification | Unreadable]:
    rows = db.execute(f"SELECT id, doc FROM notifications WHERE {where}", args).fetchall()
    return [decoded_notification(row["id"], row["doc"], json.loads) for row in rows]


# The error goes into the document where SQLite can edit it (it parses some JSON Python
# cannot); a document SQLite cannot parse either is kept whole, as text, under `storedText`.
GIVE_UP_UNREADABLE = """
UPDATE notifications SET email_pending = 0, claim_token = NULL, claim_until = NULL,
    doc = CASE WHEN json_valid(doc) AND json_type(doc) = 'object'
        THEN json_set(doc, '$.emailError', :error, '$.emailFailedAt', :at)
        ELSE json_object('_id', id, 'emailError', :error, 'emailFailedAt', :at, 'storedText', doc)
    END
WHERE id = :id"""


def _give_up_unreadable(
    db: sqlite3.Connection, unreadable: Sequence[Unreadable], at: datetime
) -> None:
    rows = [{"error": n.error, "at": to_json_ready(at), "id": n.id} for n in unreadable]
    db.executemany(GIVE_UP_UNREADABLE, rows)
