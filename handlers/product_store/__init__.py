"""The product port: the data of 1buy.ai's product that handlers read and write.

Alerts (a user's watch on a part, with its rules), parts (their current values), notifications
(what the alert scanner produced), the parts' price history and vendors' daily quotas (what the
catalogue walk writes), in the shape the product's TypeScript backend writes them: camelCase
documents. It is a resource (scheduler.plugin.api.Resource) of the handlers that use it, the
alert scanner and the catalogue walk: `PRODUCTS`, opened once by the daemon on
`[resource_urls] products` (TICKD_RESOURCE_URLS__PRODUCTS), by default the job store's URL.
Backends, chosen by that URL:

- `sqlite:///path`: by default the same SQLite file as the jobs, tables `alerts`, `parts`,
  `notifications`, `price_history` and `quota_usage` of its own; documents kept as JSON (times
  as ISO 8601 strings) beside the few columns the queries need.
- `mongodb://host/database`: by default the same database as the jobs, collections `alerts`,
  `parts`, `notifications`, `priceHistory` and `quotaSlots`, documents exactly as the product
  writes them.

The store never interprets a rule: it hands alerts and parts over as stored, and writes back what
the scanner computed, each write conditional on the state that was read. Every method takes or
returns a batch, one round trip per batch (on FerretDB, updates go out in bounded commands).
Failures are StoreError (scheduler.store.kit), `transient` when worth retrying.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

from tickd.scheduler.plugin.api import Resource, ResourceEnv
from tickd.scheduler.store.kit import open_patiently

Doc = dict[str, Any]
# A rule by its alert's id and its position in the alert's `rules` as read.
RuleKey = tuple[str, int]

# `active` (of an alert and of a rule) as the product's TypeScript backend and its web UI write
# it: true, 1, or a word of TRUE_WORDS in any case with blanks around, as the scanner reads every
# other flag (normalize.truth). Every backend's due query matches exactly what `is_true` accepts
# (MongoDB with TRUE_PATTERN, SQLite in the `scannable` column), so the scanner never reads an
# alert it would then find nothing active in. The letters are spelled as classes, not with a
# case-insensitive flag, and the blanks as ASCII ones: MongoDB (PCRE), FerretDB (Go) and Python
# would each fold or strip other characters their own way.
TRUE_WORDS = ("true", "yes", "y", "1", "on")
_BLANKS = r"[ \t\r\n]*"
TRUE_PATTERN = (
    f"^{_BLANKS}(?:"
    + "|".join("".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in w) for w in TRUE_WORDS)
    + f"){_BLANKS}$"
)
_TRUE_TEXT = re.compile(TRUE_PATTERN)


@dataclass(frozen=True, kw_only=True, slots=True)
class Alert:
    """An alert document as read: values as stored, in whatever form the product wrote them."""

    # `_id` as a string (an ObjectId becomes its hex form).
    id: str
    doc: Doc
    # Why the stored document cannot be read (then `doc` is empty): the alert's error alone,
    # never the scan's.
    unreadable: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleUpdate:
    """A rule's state after a check; applied only if the rule is still as it was read, every
    field of it (a field added since is not seen).

    That condition is what keeps two scans from both acting on one rule: the first write changes
    the rule (its `lastCheckedAt` at least), so the second one's condition no longer holds. It
    also keeps a scan from writing over a rule the product changed meanwhile."""

    alert_id: str
    # The rule's position in the alert's `rules` as read; the write is refused if it has moved.
    index: int
    # The rule as read, every field compared with what is stored.
    rule_as_read: Doc
    # camelCase fields to set on the rule: lastCheckedAt, cursor, lastError...
    changes: Doc
    # Written as the rule's `lastScanId`: names the scan whose write won.
    scan_id: str
    # The alert's new `nextCheckAt` (the due query's order), written with the rule.
    next_check_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Reschedule:
    """Move an alert's `nextCheckAt` without touching a rule (it was read with nothing due),
    only if `nextCheckAt` is still as read, so a concurrent scan's value is not overwritten."""

    alert_id: str
    next_check_at_as_read: Any
    next_check_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Notification:
    """One triggered rule, for the app (`read`) and for email (`emailedAt`)."""

    # Derived from the rule's state as read: two scans acting on one read make one notification.
    id: str
    user_id: str
    email: str | None
    alert_id: str
    rule_id: str
    part_id: str
    part_name: str
    type: str
    operator: str
    threshold: Any
    # Canonical values (a number, a word, a list of part numbers, a map of flags).
    previous_value: Any
    current_value: Any
    # One line for the app: the part, what changed, before and after.
    message: str
    # Why the rule matched.
    reason: str
    created_at: datetime
    read: bool = False
    notify_email: bool = False
    emailed_at: datetime | None = None
    # Scans whose delivery failed; after a bound, the notification is given up (email_failed_at).
    email_attempts: int = 0
    email_error: str | None = None
    email_failed_at: datetime | None = None
    # The part's `priceCurrency` (ISO 4217) when the rule watches its price and the data has one.
    currency: str | None = None
    # The alert's `timeZone` (IANA name) when it has one: the email shows times in it.
    time_zone: str | None = None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored document that cannot be decoded: its id, and why (readable text)."""

    id: str
    error: str


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a claim took: the notifications to email, and those whose stored document cannot be
    read, which the store has already given up (`emailFailedAt`, `emailError`) so that no scan
    reads them again."""

    notifications: list[Notification]
    unreadable: list[Unreadable]


@dataclass(frozen=True, kw_only=True, slots=True)
class Bounce:
    """Permanent refusals of one address by the receiving mail server (hard bounces)."""

    # As the alerts spell it; the domain in lower case (the record's key).
    address: str
    count: int
    first_at: datetime
    last_at: datetime
    # The server's last reply.
    last_error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class PriceCheck:
    """What the vendor said of one part's price: a price, or why there is none."""

    part_id: str
    checked_at: datetime
    # Names where the price came from in its history entry (the catalogue walk's quota key).
    source: str
    price: float | None = None
    currency: str | None = None
    # Set when the check failed (the vendor's status and reason); then `price` is None.
    error: str | None = None
    # A failure not of the part's making (the vendor is failing): `priceError` is recorded but
    # `priceCheckedAt` is left as it was, so the part keeps its place at the head of the walk.
    keep_place: bool = False
    # The vendor's failures on this part in a row, this one included, kept in `priceError`
    # ("vendorFailures"): the walk reads it back to stop keeping the part's place after a few.
    vendor_failures: int = 0
    # The part's `_id` exactly as `parts_to_price` returned it (an int, a UUID... on MongoDB):
    # written by it, so an id of any type is matched, and 5 is never taken for "5".
    stored_id: Any = None


class ProductStore(Protocol):
    """Alerts, parts and notifications of the product."""

    async def open(self) -> None:
        """Connect, and create the tables or indexes the scanner's queries need."""

    async def close(self) -> None:
        """Close what this store opened (never a client it was handed)."""

    async def due_alerts(self, now: datetime, limit: int) -> list[Alert]:
        """Up to `limit` alerts to scan: active (`is_true`), with at least one active rule,
        whose `nextCheckAt` is unset or <= now. Unset first (never scanned), then the most
        overdue, then by id: each scan takes the alerts that waited longest, so scans of a few
        hundred alerts eventually cover any number of them, and none is starved. One whose
        stored document cannot be decoded comes with `unreadable` set."""

    async def parts(self, part_ids: Collection[str]) -> dict[str, Doc]:
        """The parts with these ids that exist, by id (as a string), documents as stored. One
        whose stored document cannot be decoded is left out (logged), as if it were missing."""

    async def update_rules(
        self, updates: Sequence[RuleUpdate], reschedules: Sequence[Reschedule] = ()
    ) -> set[RuleKey]:
        """Apply the updates alert by alert, in one bulk write: all of an alert's updates
        together, and only if every rule they touch is still as read; and each reschedule
        whose alert's nextCheckAt is still as read. Returns the rules updated.

        All or none per alert: one write per alert rather than per rule (five times fewer
        statements), and an alert whose rules moved on meanwhile is simply checked again."""

    async def insert_notifications(self, notifications: Sequence[Notification]) -> int:
        """Insert those whose id is new; an existing id is left as it is (a retried or concurrent
        scan). Returns how many were inserted."""

    async def claim_unemailed(
        self, *, now: datetime, until: datetime, token: str, limit: int
    ) -> Claimed:
        """Claim up to `limit` notifications to email, oldest first: `notifyEmail`, not emailed,
        not given up, and unclaimed or claimed by a scan whose claim expired before `now`. A
        notification is claimed by one token at a time, so two scans never send it both.
        Returns those claimed with `token`. One whose stored document cannot be decoded is
        given up at once, its error written on it where the document can take it, and
        returned as unreadable: it never holds back the others."""

    async def mark_emailed(self, ids: Sequence[str], at: datetime) -> None:
        """Record a successful send (`emailedAt`) and drop the claim: never sent again."""

    async def record_email_failure(
        self, ids: Sequence[str], *, error: str, at: datetime, give_up: bool
    ) -> None:
        """Count a failed delivery (`emailAttempts`, `emailError`) and drop the claim; with
        `give_up`, also set `emailFailedAt`, after which it is never claimed again."""

    async def release_email_claims(self, token: str) -> None:
        """Drop the claims `token` still holds (a scan that stopped before sending them)."""

    async def turn_off_email(self, user_id: str, alert_id: str | None) -> int:
        """Unsubscribe: `notifyEmail: false` on every rule of the user's alert `alert_id`, or of
        every alert of the user when `alert_id` is None, and on their notifications not yet
        emailed (so what is waiting is not sent either). An alert of another user is left as
        it is. Idempotent; returns how many alerts had a rule that still sent email."""

    # -- hard bounces: addresses the receiving server refused for good --------------------------

    async def record_bounce(self, address: str, *, error: str, at: datetime) -> int:
        """Count one permanent refusal of `address` (keyed with its domain in lower case);
        returns the count so far."""

    async def bounces(
        self, addresses: Collection[str] | None = None, *, limit: int = 1000
    ) -> list[Bounce]:
        """The bounce records of these addresses (those that have one), or, with None, every
        record, the most recent bounce first, at most `limit`."""

    async def clear_bounce(self, address: str) -> bool:
        """Forget the address's bounces (ops, once it is fixed); False if it had none."""

    # -- the catalogue walk -------------------------------------------------------------------

    async def parts_to_price(self, *, checked_before: datetime, limit: int) -> list[Doc]:
        """Up to `limit` parts whose `priceCheckedAt` is unset or before `checked_before`, in the
        walk's order: never checked first, then the longest ago, then by id. A walk that stops
        (at its quota or its deadline) thus resumes where it left off on its next run."""

    async def record_price_checks(self, checks: Sequence[PriceCheck]) -> set[str]:
        """A few round trips per batch (bounded commands on FerretDB). Each check sets the
        part's `priceCheckedAt` (unless `keep_place`). With a price it also sets `price` and
        `priceCurrency`, removes `priceError`, and adds an entry to the price history; with an
        error it sets `priceError` ({"message", "at"}) and leaves the price as it was. A part
        that no longer exists is skipped, and a check recorded twice (same part and
        `checked_at`) adds one entry. Returns the ids of the parts written: a check whose id is
        missing was not recorded."""

    async def price_history(self, part_id: str, *, limit: int = 100) -> list[Doc]:
        """The part's history entries, newest first: {"_id", "partId", "price", "currency",
        "checkedAt", "source"}."""

    async def reserve_quota(self, key: str, day: date, *, limit: int, want: int) -> int:
        """Take up to `want` units of `key`'s quota for the UTC `day`, never more than `limit` in
        all that day: atomic across tasks, processes and instances, on every backend. Returns
        the units granted, 0 once the day's quota is spent. Units are never given back."""

    async def quota_used(self, key: str, day: date) -> int:
        """Units of `key`'s quota taken on `day`."""

    async def take_lease(self, name: str, *, owner: str, until: datetime, now: datetime) -> bool:
        """Hold `name` until `until` if nobody else holds it, or their hold ended before `now`
        (a walker that died). Of two takers at once, one wins (on FerretDB, whose deletes
        are not atomic, a hold that expired can rarely pass to two: leases keep work from
        being done twice, they guard nothing that must never happen twice)."""

    async def release_lease(self, name: str, *, owner: str) -> None:
        """Give `name` back, if `owner` still holds it."""

    # -- data for the demo, the tests and the app ---------------------------------------------

    async def upsert_parts(self, parts: Sequence[Doc]) -> None:
        """Insert or replace parts by `_id` (a part's values are current, not history)."""

    async def upsert_alerts(self, alerts: Sequence[Doc]) -> None:
        """Insert or replace alerts by `_id`."""

    async def insert_missing_alerts(self, alerts: Sequence[Doc]) -> int:
        """Insert the alerts whose `_id` is new, leave the others (and the scanner's state in
        them) as they are. Returns how many were inserted."""

    async def get_alert(self, alert_id: str) -> Alert | None: ...

    async def notifications(
        self, *, user_id: str | None = None, limit: int = 1000
    ) -> list[Notification]:
        """Oldest first, of one user or of all; one that cannot be decoded is left out."""


def is_true(value: Any) -> bool:
    """Whether a stored `active` says yes (see TRUE_WORDS): `true`, a number equal to 1 (MongoDB
    matches 1 as an int, a long or a double), or a true word. Anything else is no."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value == 1
    return isinstance(value, str) and _TRUE_TEXT.fullmatch(value) is not None


def bounce_key(address: str) -> str:
    """An address as its bounce record's key: the domain is case-insensitive, the local part
    (strictly) is not, so only the domain is lowered."""
    local, at, domain = address.strip().rpartition("@")
    return f"{local}{at}{domain.lower()}" if at else address.strip()


def open_product_store(url: str) -> ProductStore:
    """The product store for a URL (not yet opened: `await store.open()`)."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        from tickd.handlers.product_store.sqlite import SQLiteProductStore

        return SQLiteProductStore(url)
    if scheme in ("mongodb", "mongodb+srv"):
        from tickd.handlers.product_store.mongodb import MongoProductStore

        return MongoProductStore(url)
    # By default the products live beside the jobs; a store of another kind (postgresql://)
    # needs a URL of their own, and the message says where to put it.
    raise ValueError(
        f"resource_urls.products: unsupported scheme {scheme!r}"
        " (expected sqlite://, mongodb:// or mongodb+srv://; with a store_url of another kind,"
        " set [resource_urls] products to one of those)"
    )


@asynccontextmanager
async def opened_product_store(env: ResourceEnv) -> AsyncIterator[ProductStore]:
    """The product store the daemon opens once for every handler that uses it, patiently (its
    database may come up after tickd), closed on shutdown."""
    store = await open_patiently(lambda: open_product_store(env.url(PRODUCTS_NAME)), env.stop)
    try:
        yield store
    finally:
        await store.close()


PRODUCTS_NAME = "products"
PRODUCTS: Resource[ProductStore] = Resource(PRODUCTS_NAME, open=opened_product_store)


__all__ = [
    "PRODUCTS",
    "TRUE_PATTERN",
    "TRUE_WORDS",
    "Alert",
    "Bounce",
    "Claimed",
    "Doc",
    "Notification",
    "PriceCheck",
    "ProductStore",
    "Reschedule",
    "RuleKey",
    "RuleUpdate",
    "Unreadable",
    "bounce_key",
    "is_true",
    "open_product_store",
]
