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

Rendering. An email is rendered, down to its bytes, before a connection is made. A notification
whose email cannot be rendered (a value nobody foresaw) is that notification's failure, never the
scan's: it is logged with its id, recorded (`emailError`, `emailAttempts`) and, like a transient
failure, given up once `scans_before_giving_up` scans have failed; the recipient's other
notifications go in one email without it.

Hard bounces. When the receiving server refuses the address itself for good (a 5xx to RCPT, or a
5.1.x / 5.2.x mailbox status: MailError.recipient_refused), the address's bounce is counted in
the product store. From `bounces_before_blocking` (3) on, the address gets no more mail: its
emails are recorded as given up without a connection being made, until ops clear it
(DELETE /v1/bounces/{address}) or the user's alerts name another address. A send that succeeds
clears the address's count (a mailbox that was full, or briefly gone).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from email.message import EmailMessage

from tickd.handlers.alert_scanner.emails import compose
from tickd.handlers.alert_scanner.errors import unforeseen
from tickd.handlers.alert_scanner.normalize import NormalizationError
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.product_store import Bounce, Notification, ProductStore, Unreadable, bounce_key
from tickd.scheduler.plugin.api import Clock, Mailer, MailError

log = logging.getLogger("tickd.handler.alert_scanner")
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
    # The From: `Name <address>`, or a bare address, shown as `tickd alerts <address>`
    # (emails.named_sender); None leaves it to the mailer (smtp://...?from=...).
    from_address: str | None = None
    # Hard bounces of an address after which it gets no more mail.
    bounces_before_blocking: int = 3
    # Links, unsubscribing and the number of items shown ([handler_settings.alert_scanner]).
    settings: EmailSettings = field(default_factory=EmailSettings)


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
    """Emails sent and failed, and notifications given up (`emailFailedAt` written)."""

    sent: int = 0
    failed: int = 0
    given_up: int = 0

    def __add__(self, other: Delivered) -> Delivered:
        return Delivered(
            sent=self.sent + other.sent,
            failed=self.failed + other.failed,
            given_up=self.given_up + other.given_up,
        )


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
    unreadable = _given_up_unreadable(claimed.unreadable)
    if not claimed.notifications:
        return unreadable
    try:
        recipients = by_recipient(claimed.notifications)
        return unreadable + await _deliver_all(products, mailer, clock, policy, recipients)
    finally:
        # Whatever was not sent (a crash, a cancellation) is free for the next scan at once.
        await products.release_email_claims(token)


def _given_up_unreadable(unreadable: Sequence[Unreadable]) -> Delivered:
    """Notifications whose stored document cannot be read: the store gave them up with their
    error; each is logged here, once, and counted."""
    for n in unreadable:
        log.warning("notification %s: given up: %s", n.id, n.error)
    return Delivered(given_up=len(unreadable))


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
    addresses = {r.address for r in recipients if r.address}
    bounces = {b.address: b for b in await products.bounces(addresses)} if addresses else {}
    sender = _Sender(
        products, mailer, clock, policy, asyncio.Semaphore(policy.concurrency), bounces
    )
    outcomes = await asyncio.gather(
        *(sender.deliver(r) for r in recipients), return_exceptions=True
    )
    total = Delivered()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        total += outcome
    return total


SENT = Delivered(sent=1)
# Not attempted: another delivery failed unexpectedly and the scan is stopping.
SKIPPED = Delivered()


class _Stopping(Exception):
    """Raised instead of starting a send once the scan is stopping."""


@dataclass
class _Sender:
    products: ProductStore
    mailer: Mailer
    clock: Clock
    policy: EmailPolicy
    permits: asyncio.Semaphore
    # The bounce records of this scan's addresses, by bounce_key.
    bounces: dict[str, Bounce] = field(default_factory=dict)
    stopping: bool = False

    async def deliver(self, recipient: Recipient) -> Delivered:
        """Send one recipient's email and record the outcome."""
        try:
            return await self._deliver(recipient)
        except _Stopping:
            return SKIPPED
        except Exception:
            self.stopping = True
            raise

    async def _deliver(self, recipient: Recipient) -> Delivered:
        blocked = self._blocked(recipient.address)
        if blocked is not None:
            return await self._failed(recipient, blocked, give_up=True)
        try:
            message = self._render(recipient)
        except NormalizationError as exc:  # the address: no email to it can be sent
            return await self._failed(recipient, str(exc), give_up=True)
        except Exception:
            return await self._deliver_renderable(recipient)
        return await self._send(recipient, message)

    def _render(self, recipient: Recipient) -> EmailMessage:
        """The recipient's email, made into bytes once here, so that no value in it can fail
        the mailer's send: what cannot be rendered fails here, as its notifications' error."""
        message = compose(
            recipient.address or "",
            recipient.notifications,
            now=self.clock.now(),
            from_address=self.policy.from_address,
            settings=self.policy.settings,
        )
        message.as_bytes()
        return message

    async def _deliver_renderable(self, recipient: Recipient) -> Delivered:
        """Some notification of the recipient's cannot be rendered: each that cannot on its own
        is recorded as failed, and the others go in one email."""
        outcome, renderable = Delivered(), []
        for n in recipient.notifications:
            try:
                self._render(replace(recipient, notifications=[n]))
            except Exception as exc:
                outcome += await self._unrenderable(replace(recipient, notifications=[n]), exc)
            else:
                renderable.append(n)
        if not renderable:
            return outcome
        rest = replace(recipient, notifications=renderable)
        try:
            message = self._render(rest)
        except Exception as exc:  # each renders alone but not together
            return outcome + await self._unrenderable(rest, exc)
        return outcome + await self._send(rest, message)

    async def _unrenderable(self, recipient: Recipient, exc: Exception) -> Delivered:
        """Logged with the notifications' ids, recorded on them, and counted towards giving
        them up, as a transient failure is."""
        give_up = self._failed_scans(recipient) >= self.policy.scans_before_giving_up
        log.warning(
            "notifications %s (alerts %s): the email cannot be rendered%s",
            ", ".join(recipient.ids),
            ", ".join(sorted({n.alert_id for n in recipient.notifications})),
            "; given up" if give_up else "",
            exc_info=True,
        )
        error = f"not sent: the email cannot be rendered: {unforeseen(exc)}"
        return await self._failed(recipient, error, give_up=give_up)

    async def _send(self, recipient: Recipient, message: EmailMessage) -> Delivered:
        """Send the rendered email, with retries, and record the outcome."""
        error = await self._send_with_retries(message)
        if error is None:
            await self.products.mark_emailed(recipient.ids, self.clock.now())
            await self._bounces_forgotten(recipient.address)
            return SENT
        if error.recipient_refused and not error.transient and recipient.address:
            await self.products.record_bounce(
                recipient.address, error=str(error), at=self.clock.now()
            )
        return await self._failed(recipient, str(error), give_up=self._gives_up(recipient, error))

    def _blocked(self, address: str | None) -> str | None:
        """Why the address gets no more mail, or None."""
        bounce = self.bounces.get(bounce_key(address)) if address else None
        if bounce is None or bounce.count < self.policy.bounces_before_blocking:
            return None
        return (
            f"not sent: {address} was refused permanently {bounce.count} times (last: "
            f"{bounce.last_error}); no more mail until ops clear it or the address changes"
        )

    async def _bounces_forgotten(self, address: str | None) -> None:
        """A delivery to an address with bounces: it works again, so its count starts over."""
        if address and bounce_key(address) in self.bounces:
            await self.products.clear_bounce(address)

    async def _send_with_retries(self, message: EmailMessage) -> MailError | None:
        """None once sent; the last error when it is permanent or no attempt is left."""
        for attempt in range(1, self.policy.send_attempts + 1):
            error = await self._send_once(message)
            if error is None or not error.transient or attempt == self.policy.send_attempts:
                return error
            await self.clock.sleep(retry_delay(attempt))
        raise AssertionError("unreachable: the last attempt returns")

    async def _send_once(self, message: EmailMessage) -> MailError | None:
        async with self.permits:  # held for the send only, not while waiting to retry
            if self.stopping:
                raise _Stopping
            try:
                await self.mailer.send(message)
            except MailError as exc:
                return exc
        return None

    def _gives_up(self, recipient: Recipient, error: MailError) -> bool:
        return (
            not error.transient
            or self._failed_scans(recipient) >= self.policy.scans_before_giving_up
        )

    @staticmethod
    def _failed_scans(recipient: Recipient) -> int:
        """Scans whose delivery failed, this one included."""
        return max(n.email_attempts for n in recipient.notifications) + 1

    async def _failed(self, recipient: Recipient, error: str, *, give_up: bool) -> Delivered:
        await self.products.record_email_failure(
            recipient.ids, error=error, at=self.clock.now(), give_up=give_up
        )
        return Delivered(failed=1, given_up=len(recipient.ids) if give_up else 0)


def retry_delay(attempt: int) -> float:
    """The wait after failed attempt number `attempt` (1 for the first): 1 s doubling to 30 s."""
    return min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2.0 ** (attempt - 1))
