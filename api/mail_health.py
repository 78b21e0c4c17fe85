"""The mail server as the last sends found it, for /readyz: informative only, never a reason to
be unready (mail is not on a run's path: the alert scans keep the emails a failed send leaves
and try again). The daemon wraps its mailer in a WatchedMailer (tickd/app.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage

from tickd.scheduler.ports.backends import Mailer, MailError
from tickd.scheduler.ports.clock import Clock


@dataclass(frozen=True, slots=True)
class MailHealth:
    # unknown (nothing sent yet), ok (the last send went through), failing (it did not)
    state: str
    last_error: str | None = None
    failing_since: datetime | None = None


class WatchedMailer:
    """A mailer that remembers how its last send went. An address refused by the receiving
    side (a hard bounce) says nothing about the server, and changes nothing."""

    def __init__(self, inner: Mailer, clock: Clock) -> None:
        self._inner = inner
        self._clock = clock
        self._health = MailHealth(state="unknown")

    def health(self) -> MailHealth:
        return self._health

    async def send(self, message: EmailMessage) -> None:
        try:
            await self._inner.send(message)
        except MailError as exc:
            if not exc.recipient_refused:
                self._failed(exc)
            raise
        except Exception as exc:  # the outbox's folder unwritable, say: mail is failing too
            self._failed(exc)
            raise
        self._health = MailHealth(state="ok")

    def _failed(self, exc: Exception) -> None:
        # MailError messages are built from the server's reply and scrubbed of the password.
        error = f"{type(exc).__name__}: {exc}"
        since = self._health.failing_since or self._clock.now()
        self._health = MailHealth(state="failing", last_error=error, failing_since=since)

    async def close(self) -> None:
        await self._inner.close()
