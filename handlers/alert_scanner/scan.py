"""One scan of the alerts: the whole of one run of the `alert_scanner` handler, engine-free.

1. Read at most `alerts_per_scan` alerts that are due (ProductStore.due_alerts: the ones that
   waited longest first, so successive scans cover every alert).
2. Flatten them into their due rules: active, and never checked or checked longer ago than their
   cooldown; at most `max_rules` of them (the rest stay due for the next scan).
3. Look the parts up in batches, at most `lookup_concurrency` at once, and check each batch's
   rules as its parts arrive (rules.evaluate).
4. Insert the notifications of the rules that fired.
5. Write every checked rule's new state in one bulk write, an alert's rules together, and only
   if they are still as read.
6. Send the emails (delivery.py).

Idempotent by construction: every check writes lastCheckedAt and moves the cursor, so re-running
on the same data fires nothing; the write is conditional on the rule as read, so of two scans
that read one rule only one moves it (on MongoDB and SQLite; FerretDB 1.24 does not apply a
filtered update atomically, and there both may); and a notification's id is derived from the
rule as read, so two scans (or a scan re-run after dying between steps 4 and 5) that act on one
read make one notification, on every store. Notifications go in before the rule states so that
a crash between the two loses nothing: the re-run reads the same rule state, and its insert of
the same notification is a no-op.

Every stage is bounded: alerts and rules per scan, lookups and SMTP connections at once,
notifications emailed per scan. A million rules take many scans, never unbounded memory.

A run of the handler (`scan_until_done`) makes steps 1 to 5 back to back while the last scan
stopped at its bound with more due (so a backlog is worked off in one run, not one bound a run),
at most `scans_per_run` scans, each started only if it can end before the run's share of its
deadline for scanning, and then step 6 once: a delivery that failed is retried by the next run,
as `email_scans` counts, not by the next scan of the same run seconds later.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from tickd.handlers.alert_scanner import normalize
from tickd.handlers.alert_scanner.concurrency import run_all
from tickd.handlers.alert_scanner.delivery import EmailPolicy, deliver_pending
from tickd.handlers.alert_scanner.emails import safe_text
from tickd.handlers.alert_scanner.errors import unforeseen
from tickd.handlers.alert_scanner.normalize import NormalizationError
from tickd.handlers.alert_scanner.rules import (
    InvalidRule,
    Keep,
    Verdict,
    display,
    evaluate,
    parse_operator,
    parse_type,
    part_currency,
)
from tickd.handlers.product_store import (
    Alert,
    Doc,
    Notification,
    ProductStore,
    Reschedule,
    RuleKey,
    RuleUpdate,
    is_true,
)
from tickd.scheduler.logs import FIELDS, log_event
from tickd.scheduler.plugin.api import Clock, Mailer

log = logging.getLogger("tickd.handler.alert_scanner")
# Error messages kept in a scan's result (all of them are on their rules).
ERROR_SAMPLES = 5
# When an alert whose rules cannot be read at all is read again: as a rule with an unreadable
# cooldown, after the default one, so that it neither stops the scan nor heads every due query.
RETRY_UNREADABLE = timedelta(minutes=normalize.DEFAULT_COOLDOWN_MINUTES)
# The due time past the last one a datetime holds (a last check in the year 9999, a cooldown of
# 1e300 minutes): never, as far as a datetime can say.
NEVER = datetime.max.replace(tzinfo=UTC)
PART_NAME_FIELDS = ("name", "partNumber", "mpn")


@dataclass(frozen=True, kw_only=True)
class ScanLimits:
    """How much one scan may take on; the defaults are the seed's numbers."""

    alerts_per_scan: int = 200
    max_rules: int = 5000
    # Part lookups in flight at once, and parts per lookup.
    lookup_concurrency: int = 50
    parts_per_lookup: int = 100
    # Scans one run makes back to back while more is due (scan_until_done).
    scans_per_run: int = 100
    email: EmailPolicy = field(default_factory=EmailPolicy)


@dataclass(kw_only=True)
class ScanResult:
    """The counts a scan leaves in its execution record."""

    alerts_read: int = 0
    rules_due: int = 0
    # Rules checked (with a verdict or an error); due rules beyond max_rules are `deferred`.
    evaluated: int = 0
    deferred: int = 0
    triggered: int = 0
    # Checks that failed (each error is on its rule as `lastError`), and of those the ones that
    # failed for a reason their rule did not already carry: only these are reported (logged).
    errors: int = 0
    new_errors: int = 0
    # Checked rules whose write lost to another writer (a concurrent scan, the product).
    conflicts: int = 0
    notifications: int = 0
    emails_sent: int = 0
    emails_failed: int = 0
    # Notifications given up this scan: never emailed, their error kept on them.
    emails_given_up: int = 0
    error_samples: list[str] = field(default_factory=list)
    # Scans made (one, or more in a run that worked off a backlog), and whether the last one
    # still stopped at a bound: the next run carries on.
    scans: int = 1
    more_due: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def changed_anything(self) -> bool:
        """Whether the scan did more than check rules that stayed as they were: a scan that
        did not is logged at DEBUG only, so an idle scanner keeps INFO quiet."""
        return any(getattr(self, name) for name in NEWS) or self.more_due

    def stopped_at_bound(self, limits: ScanLimits) -> bool:
        """Whether this scan left due work behind: it read as many alerts as it may, or
        deferred rules beyond `max_rules`."""
        return self.alerts_read >= limits.alerts_per_scan or self.deferred > 0

    def plus(self, other: ScanResult) -> ScanResult:
        """The counts of two scans together; `more_due` is the later one's."""
        counts = {name: getattr(self, name) + getattr(other, name) for name in COUNTS}
        samples = (self.error_samples + other.error_samples)[:ERROR_SAMPLES]
        return ScanResult(**counts, error_samples=samples, more_due=other.more_due)


COUNTS = [f.name for f in fields(ScanResult) if f.type in ("int", int)]
# The counts of what a scan changed or found anew.
NEWS = (
    "triggered",
    "new_errors",
    "conflicts",
    "notifications",
    "emails_sent",
    "emails_failed",
    "emails_given_up",
)


@dataclass(frozen=True, kw_only=True)
class DueRule:
    """One rule to check: its alert, its position in the alert's rules, and the rule as read."""

    alert: Alert
    index: int
    rule: Doc

    @property
    def key(self) -> RuleKey:
        return self.alert.id, self.index

    @property
    def rule_id(self) -> str:
        value = self.rule.get("id")
        return f"#{self.index}" if value is None else str(value)

    def part_id(self) -> str:
        return normalize.identifier(self.alert.doc.get("partId"), "alert partId")


@dataclass(frozen=True, kw_only=True)
class Check:
    """What checking one rule produced: the fields to write on it, and maybe a notification."""

    due: DueRule
    changes: Doc
    notification: Notification | None = None
    error: str | None = None

    @property
    def new_error(self) -> bool:
        """Whether the check failed for a reason other than the one already on its rule."""
        return self.error is not None and self.error != self.due.rule.get("lastError")


Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


async def scan(
    products: ProductStore,
    mailer: Mailer,
    clock: Clock,
    limits: ScanLimits | None = None,
    *,
    logger: Logger = log,
) -> ScanResult:
    """Run one scan; see the module's docstring."""
    limits = limits or ScanLimits()
    scan_id = uuid.uuid4().hex
    result = await check_due(products, clock, limits, scan_id)
    result.more_due = result.stopped_at_bound(limits)
    return await _delivered(result, products, mailer, clock, limits, scan_id, logger)


async def scan_until_done(
    products: ProductStore,
    mailer: Mailer,
    clock: Clock,
    limits: ScanLimits | None = None,
    *,
    until: datetime,
    logger: Logger = log,
) -> ScanResult:
    """One run: scans while the last one stopped at its bound with more due, at most
    `scans_per_run`, none started unless it can end by `until` (judged by the longest scan so
    far); then the emails, once. The result sums the scans'."""
    limits = limits or ScanLimits()
    total: ScanResult | None = None
    longest = timedelta(0)
    while total is None or (
        total.more_due and total.scans < limits.scans_per_run and clock.now() + longest <= until
    ):
        started = clock.now()
        one = await check_due(products, clock, limits, uuid.uuid4().hex)
        longest = max(longest, clock.now() - started)
        one.more_due = one.stopped_at_bound(limits)
        total = one if total is None else total.plus(one)
    return await _delivered(total, products, mailer, clock, limits, uuid.uuid4().hex, logger)


async def check_due(
    products: ProductStore, clock: Clock, limits: ScanLimits, scan_id: str
) -> ScanResult:
    """Steps 1 to 5 of one scan: read, check and write back the due alerts' rules."""
    now = clock.now()
    alerts = await products.due_alerts(now, limits.alerts_per_scan)
    due, unreadable = due_rules_of(alerts, now)
    checks = await check_rules(products, due[: limits.max_rules], now, limits)
    written = await write_back(products, alerts, due, checks, now, scan_id, unreadable)
    return tally(alerts, due, checks, written, unreadable)


async def _delivered(
    result: ScanResult,
    products: ProductStore,
    mailer: Mailer,
    clock: Clock,
    limits: ScanLimits,
    token: str,
    logger: Logger,
) -> ScanResult:
    """Step 6, with its counts added to the result, and the result logged."""
    delivered = await deliver_pending(products, mailer, clock, limits.email, token=token)
    result.emails_sent, result.emails_failed = delivered.sent, delivered.failed
    result.emails_given_up = delivered.given_up
    level = logging.INFO if result.changed_anything() else logging.DEBUG
    log_event(logger, "alert_scan.finished", level=level, **result.as_dict())
    return result


@dataclass(frozen=True)
class Written:
    notifications: int
    updates: int
    applied: set[RuleKey]


async def write_back(
    products: ProductStore,
    alerts: Sequence[Alert],
    due: Sequence[DueRule],
    checks: Sequence[Check],
    now: datetime,
    scan_id: str,
    unreadable: Mapping[str, str] | None = None,
) -> Written:
    """The notifications, then the rules' new states: in that order, so that a crash between
    the two loses no notification (the rerun reads the same states and makes the same ones)."""
    notifications = [c.notification for c in checks if c.notification is not None]
    inserted = await products.insert_notifications(notifications)
    updates = rule_updates(checks, now, scan_id)
    later = reschedules(alerts, due, now, set(unreadable or ()))
    applied = await products.update_rules(updates, later)
    return Written(notifications=inserted, updates=len(updates), applied=applied)


def tally(
    alerts: Sequence[Alert],
    due: Sequence[DueRule],
    checks: Sequence[Check],
    written: Written,
    unreadable: Mapping[str, str] | None = None,
) -> ScanResult:
    errors = [*(unreadable or {}).values(), *(c.error for c in checks if c.error)]
    new_errors = [c for c in checks if c.new_error]
    return ScanResult(
        alerts_read=len(alerts),
        rules_due=len(due),
        evaluated=len(checks),
        deferred=len(due) - len(checks),
        triggered=sum(1 for c in checks if c.notification and c.due.key in written.applied),
        errors=len(errors),
        new_errors=len(unreadable or {}) + len(new_errors),
        conflicts=written.updates - len(written.applied),
        notifications=written.notifications,
        error_samples=errors[:ERROR_SAMPLES],
    )


# -- which rules are due ------------------------------------------------------------------------


def due_rules_of(alerts: Sequence[Alert], now: datetime) -> tuple[list[DueRule], dict[str, str]]:
    """The due rules of every alert, and, by alert id, the error of each alert whose rules
    could not be read at all: one alert nobody foresaw is that alert's error, never the scan's
    (logged with its traceback, counted, and read again after RETRY_UNREADABLE)."""
    due: list[DueRule] = []
    unreadable: dict[str, str] = {}
    for alert in alerts:
        if alert.unreadable is not None:
            log.warning("alert %s: %s", alert.id, alert.unreadable)
            unreadable[alert.id] = f"alert {alert.id}: {alert.unreadable}"
            continue
        try:
            due += due_rules(alert, now)
        except Exception as exc:
            log.warning("alert %s: its rules cannot be read", alert.id, exc_info=True)
            unreadable[alert.id] = f"alert {alert.id}: {unforeseen(exc)}"
    return due, unreadable


def due_rules(alert: Alert, now: datetime) -> list[DueRule]:
    """The alert's rules to check now: active and past their cooldown."""
    rules = alert.doc.get("rules")
    if not isinstance(rules, list):
        return []
    return [
        DueRule(alert=alert, index=i, rule=rule)
        for i, rule in enumerate(rules)
        if is_active(rule) and due_at(rule, now) <= now
    ]


def is_active(rule: Any) -> bool:
    """`active` in any form the product writes it (`true`, `1`, `"yes"`...), exactly as the due
    query reads it (handlers.product_store.is_true)."""
    return isinstance(rule, Mapping) and is_true(rule.get("active"))


def due_at(rule: Mapping[str, Any], now: datetime) -> datetime:
    """When the rule may be checked again: its cooldown after its last check (or trigger);
    `now` if it was never checked, or its times cannot be read (the check then rewrites them);
    NEVER when that is past the last time a datetime holds."""
    last = _last_checked(rule)
    if last is None:
        return now
    try:
        return last + cooldown(rule)
    except OverflowError:
        return NEVER


def _last_checked(rule: Mapping[str, Any]) -> datetime | None:
    try:
        checked = normalize.timestamp(rule.get("lastCheckedAt"), "lastCheckedAt")
        triggered = normalize.timestamp(rule.get("lastTriggeredAt"), "lastTriggeredAt")
    except NormalizationError:
        return None
    return max((t for t in (checked, triggered) if t is not None), default=None)


def cooldown(rule: Mapping[str, Any]) -> timedelta:
    """The rule's cooldown; the default one if it cannot be read (its check records the error,
    and the rule is not checked again every scan)."""
    try:
        minutes = normalize.cooldown_minutes(rule.get("cooldownMinutes"))
    except NormalizationError:
        minutes = normalize.DEFAULT_COOLDOWN_MINUTES
    return timedelta(minutes=minutes)


def next_check_at(alert: Alert, checked: set[int], now: datetime) -> datetime | None:
    """The alert's nextCheckAt once the rules at `checked` have been checked `now`: when its
    first active rule falls due (now, if one is still due)."""
    rules = alert.doc.get("rules")
    times = [
        _due_after_scan(rule, i in checked, now)
        for i, rule in enumerate(rules if isinstance(rules, list) else [])
        if is_active(rule)
    ]
    return min(times, default=None)


def _due_after_scan(rule: Mapping[str, Any], was_checked: bool, now: datetime) -> datetime:
    if not was_checked:
        return due_at(rule, now)
    return due_at({**rule, "lastCheckedAt": now, "lastTriggeredAt": None}, now)


# -- checking -----------------------------------------------------------------------------------


async def check_rules(
    products: ProductStore, due: Sequence[DueRule], now: datetime, limits: ScanLimits
) -> list[Check]:
    """Look the parts up in batches, `lookup_concurrency` batches at most in flight, and check
    each batch's rules as soon as its parts arrive. A rule whose alert names no part is an
    error at once."""
    by_part: dict[str, list[DueRule]] = {}
    checks: list[Check] = []
    for rule in due:
        try:
            by_part.setdefault(rule.part_id(), []).append(rule)
        except NormalizationError as exc:
            checks.append(failed(rule, now, str(exc)))
        except Exception as exc:
            checks.append(failed(rule, now, unforeseen(exc), traceback=True))
    permits = asyncio.Semaphore(limits.lookup_concurrency)
    batches = _batches(list(by_part), limits.parts_per_lookup)
    checked = await run_all(_check_batch(products, ids, by_part, now, permits) for ids in batches)
    return checks + [check for batch in checked for check in batch]


async def _check_batch(
    products: ProductStore,
    part_ids: list[str],
    by_part: Mapping[str, list[DueRule]],
    now: datetime,
    permits: asyncio.Semaphore,
) -> list[Check]:
    async with permits:
        parts = await products.parts(part_ids)
    return [
        check(rule, parts.get(part_id), now) for part_id in part_ids for rule in by_part[part_id]
    ]


def _batches(items: list[str], size: int) -> list[list[str]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def check(due: DueRule, part: Mapping[str, Any] | None, now: datetime) -> Check:
    """Check one rule against its part. Any error is the rule's, never the scan's: a bad value
    or rule is recorded as is; anything else (a document nobody foresaw) with its type, and
    reported with its traceback."""
    try:
        if part is None:
            raise NormalizationError(f"part {due.part_id()!r} not found")
        normalize.cooldown_minutes(due.rule.get("cooldownMinutes"))
        verdict = evaluate(due.rule, part)
        notification = notify(due, part, verdict, now) if verdict.fired else None
    except (NormalizationError, InvalidRule) as exc:
        return failed(due, now, str(exc))
    except Exception as exc:
        return failed(due, now, unforeseen(exc), traceback=True)
    return Check(due=due, changes=_state_after(verdict, now), notification=notification)


def failed(due: DueRule, now: datetime, error: str, *, traceback: bool = False) -> Check:
    """A check that failed: the error goes on the rule (`lastError`, until a check succeeds),
    and is logged only when the rule did not already carry it, so a rule that stays broken is
    reported once, not at every scan."""
    result = Check(due=due, changes={"lastCheckedAt": now, "lastError": error}, error=error)
    if result.new_error:
        fields = {"alert": due.alert.id, "rule": due.rule_id, "error": error}
        log.warning("alert_scan.rule_error", exc_info=traceback, extra={FIELDS: fields})
    return result


def _state_after(verdict: Verdict, now: datetime) -> Doc:
    changes: Doc = {"lastCheckedAt": now, "cursor": verdict.cursor, "lastError": None}
    if verdict.baseline is not Keep.BASELINE:
        changes["baseline"] = verdict.baseline
    if verdict.fired:
        changes["lastTriggeredAt"] = now
    return changes


def notify(due: DueRule, part: Mapping[str, Any], verdict: Verdict, now: datetime) -> Notification:
    """The notification of a rule that fired (NormalizationError if the alert names no user).
    Its text is safe_text, as the app shows it too."""
    doc, rule = due.alert.doc, due.rule
    name = safe_text(part_name(part, due.part_id()))
    return Notification(
        id=notification_id(due),
        user_id=normalize.identifier(doc.get("userId"), "alert userId"),
        email=_address_or_none(doc.get("email")),
        alert_id=due.alert.id,
        rule_id=due.rule_id,
        part_id=due.part_id(),
        part_name=name,
        type=parse_type(rule.get("type"))[0].value,
        operator=parse_operator(rule.get("operator")).value,
        threshold=rule.get("threshold"),
        previous_value=verdict.previous,
        current_value=verdict.cursor,
        message=safe_text(
            f"{name}: {verdict.field} {display(verdict.previous)} -> {display(verdict.cursor)}"
        ),
        reason=safe_text(verdict.reason),
        created_at=now,
        notify_email=normalize.truth(rule.get("notifyEmail"), default=False, what="notifyEmail"),
        currency=part_currency(part) if verdict.field == "price" else None,
        time_zone=_text_or_none(doc.get("timeZone")),
    )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def notification_id(due: DueRule) -> str:
    """The same for every scan that read the rule in the same state: one notification per
    state the rule moves out of, however many scans act on it."""
    state = json.dumps([due.alert.id, due.rule_id, due.rule], sort_keys=True, default=str)
    return hashlib.sha256(state.encode()).hexdigest()[:32]


def part_name(part: Mapping[str, Any], part_id: str) -> str:
    found = next((part[f] for f in PART_NAME_FIELDS if isinstance(part.get(f), str)), None)
    return found.strip() if found and found.strip() else part_id


def _address_or_none(value: Any) -> str | None:
    """The alert's address, or None when it has none that can be used (then the email is
    recorded as failed, and the notification is still there for the app)."""
    try:
        return normalize.email_address(value)
    except NormalizationError:
        return None


# -- writing ------------------------------------------------------------------------------------


def rule_updates(checks: Iterable[Check], now: datetime, scan_id: str) -> list[RuleUpdate]:
    checks = list(checks)
    checked: dict[str, set[int]] = {}
    for c in checks:
        checked.setdefault(c.due.alert.id, set()).add(c.due.index)
    return [
        RuleUpdate(
            alert_id=c.due.alert.id,
            index=c.due.index,
            rule_as_read=c.due.rule,
            changes=c.changes,
            scan_id=scan_id,
            next_check_at=next_check_at(c.due.alert, checked[c.due.alert.id], now),
        )
        for c in checks
    ]


def reschedules(
    alerts: Sequence[Alert],
    due: Sequence[DueRule],
    now: datetime,
    unreadable: Collection[str] = (),
) -> list[Reschedule]:
    """Alerts read with no rule due (their nextCheckAt was early: a rule's cooldown grew, say)
    get a nextCheckAt in the future, so the next scans do not read them again and again; those
    whose rules could not be read at all (`unreadable`), RETRY_UNREADABLE from now."""
    with_due_rules = {rule.alert.id for rule in due}
    return [
        Reschedule(
            alert_id=alert.id,
            next_check_at_as_read=alert.doc.get("nextCheckAt"),
            next_check_at=(
                now + RETRY_UNREADABLE
                if alert.id in unreadable
                else next_check_at(alert, set(), now)
            ),
        )
        for alert in alerts
        if alert.id not in with_due_rules
    ]
