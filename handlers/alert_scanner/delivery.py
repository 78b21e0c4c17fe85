"""Sending the alert emails: claimed, grouped by recipient, sent with bounded concurrency,
retried with backoff, and recorded on the notifications.

Never twice for one notification. A scan first claims the notifications it will send (a claim
with an expiry, so two scans at once send disjoint sets and a scan that died gives its claims
back when they expire); `emailedAt` is written right after each successful send, and only
unemailed notifications are ever claimed. When one delivery fails unexpectedly (the store gone,
a bug), no new send starts, but the sends in flight finish and are recorded rather than being
cancelled half-way. The one gap left is a crash between the SMTP server's acceptance and that
write: the email then goes again after the claim expires, with the same Message-ID, so the
receiving side can tell.

Failures. A transient one (4xx, a dropped connection) is retried within the scan, waiting 1 s,
2 s, 4 s... up to 30 s; if every attempt fails it is recorded (`emailError`, `emailAttempts`) and
the next scan tries again, until `scans_before_giving_up` scans have failed. A permanent one
(5xx, a refused or invalid address) is recorded at once with `emailFailedAt`: never retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from email.message import EmailMessage
from enum import Enum

from handlers.alert_scanner.emails import compose
from handlers.alert_scanner.normalize import NormalizationError
from handlers.product_store import Notification, ProductStore
from scheduler.handler_api import Clock, Mailer, MailError

RETRY_BASE_SECONDS = 1.0
RETRY_CAP_SECONDS = 30.0


@dataclass(frozen=True, kw_only=True)
class EmailPolicy:
    # Emails sent at once (SMTP connections open at once).
    concurrency: int = 10
    # Notifications claimed by one scan: bounds the scan's memory and time.
    notifications_per_scan: int = 1000
    # Attempts within one scan for a transient failure.
    send_attempts: int = 3
    # Scans with a failed delivery after which a notification is given up.
    scans_before_giving_up: int = 3
    # How long a claim holds if its scan dies (then another scan may send them); longer than
    # the system job's ten-minute timeout, so a scan still sending never loses its claims.
    claim_seconds: float = 900.0
    # The From address; None leaves it to the mailer (smtp://...?from=...).
    from_address: str | None = None


@dataclass(frozen=True)
class Recipient:
    """One email's worth: a user's triggered rules that go to one address."""

    user_id: str
    address: str | None
    notifications: list[Notification] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [n.id for n in self.notifications]


@dataclass(frozen=True, kw_only=True)
class Delivered:
    sent: int = 0
    failed: int = 0


async def deliver_pending(
    products: ProductStore, mailer: Mailer, clock: Clock, policy: EmailPolicy, *, token: str
) -> Delivered:
    """Claim the notifications waiting for an email and send them, one email per recipient."""
    now = clock.now()
    claimed = await products.claim_unemailed(
        now=now,
        until=now + timedelta(seconds=policy.claim_seconds),
        token=token,
        limit=policy.notifications_per_scan,
    )
    if not claimed:
        return Delivered()
    try:
        return await _deliver_all(products, mailer, clock, policy, by_recipient(claimed))
    finally:
        # Whatever was not sent (a crash, a cancellation) is free for the next scan at once.
        await products.release_email_claims(token)


def by_recipient(notifications: Sequence[Notification]) -> list[Recipient]:
    """One Recipient per (user, address), each listing its rules in reading order: by time,
    then part, then alert and rule."""
    groups: dict[tuple[str, str | None], Recipient] = {}
    for n in sorted(notifications, key=_reading_order):
        groups.setdefault((n.user_id, n.email), Recipient(n.user_id, n.email)).notifications.append(
            n
        )
    return list(groups.values())


def _reading_order(n: Notification) -> tuple[object, ...]:
    return n.created_at, n.part_name, n.alert_id, n.rule_id


async def _deliver_all(
    products: ProductStore,
    mailer: Mailer,
    clock: Clock,
    policy: EmailPolicy,
    recipients: list[Recipient],
) -> Delivered:
    """Every recipient's email, `policy.concurrency` at once. An unexpected failure (the store
    gone, a bug) stops new sends, but the sends in flight finish and are recorded: cancelling
    them could leave an email delivered and not marked, to be sent again by the next scan."""
    sender = _Sender(products, mailer, clock, policy, asyncio.Semaphore(policy.concurrency))
    outcomes = await asyncio.gather(
        *(sender.deliver(r) for r in recipients), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return Delivered(sent=outcomes.count(Outcome.SENT), failed=outcomes.count(Outcome.FAILED))


class Outcome(Enum):
    SENT = "sent"
    FAILED = "failed"
    # Not attempted: another delivery failed unexpectedly and the scan is stopping.
    SKIPPED = "skipped"


class _Stopping(Exception):
    """Raised instead of starting a send once the scan is stopping."""


@dataclass
class _Sender:
    products: ProductStore
    mailer: Mailer
    clock: Clock
    policy: EmailPolicy
    permits: asyncio.Semaphore
    stopping: bool = False

    async def deliver(self, recipient: Recipient) -> Outcome:
        """Send one recipient's email and record the outcome."""
        try:
            return await self._deliver(recipient)
        except _Stopping:
            return Outcome.SKIPPED
        except Exception:
            self.stopping = True
            raise

    async def _deliver(self, recipient: Recipient) -> Outcome:
        try:
            message = compose(
                recipient.address or "",
                recipient.notifications,
                now=self.clock.now(),
                from_address=self.policy.from_address,
            )
        except NormalizationError as exc:
            await self._failed(recipient, str(exc), give_up=True)
            return Outcome.FAILED
        error = await self._send_with_retries(message)
        if error is None:
            await self.products.mark_emailed(recipient.ids, self.clock.now())
            return Outcome.SENT
        await self._failed(recipient, str(error), give_up=self._gives_up(recipient, error))
        return Outcome.FAILED

    async def _send_with_retries(self, message: EmailMessage) -> MailError | None:
        """None once sent; the last error when it is permanent or no attempt is left."""
        for attempt in range(1, self.policy.send_attempts + 1):
            error = await self._send(message)
            if error is None or not error.transient or attempt == self.policy.send_attempts:
                return error
            await self.clock.sleep(retry_delay(attempt))
        raise AssertionError("unreachable: the last attempt returns")

    async def _send(self, message: EmailMessage) -> MailError | None:
        async with self.permits:  # held for the send only, not while waiting to retry
            if self.stopping:
                raise _Stopping
            try:
                await self.mailer.send(message)
            except MailError as exc:
                return exc
        return None

    def _gives_up(self, recipient: Recipient, error: MailError) -> bool:
        scans_failed = max(n.email_attempts for n in recipient.notifications) + 1
        return not error.transient or scans_failed >= self.policy.scans_before_giving_up

    async def _failed(self, recipient: Recipient, error: str, *, give_up: bool) -> None:
        await self.products.record_email_failure(
            recipient.ids, error=error, at=self.clock.now(), give_up=give_up
        )


def retry_delay(attempt: int) -> float:
    """The wait after failed attempt number `attempt` (1 for the first): 1 s doubling to 30 s."""
    return min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2.0 ** (attempt - 1))
