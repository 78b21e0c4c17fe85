"""The mail port. Backends: `outbox:///path` (embedded), `smtp://` and `smtps://`."""

from __future__ import annotations

from urllib.parse import urlsplit

from tickd.scheduler.ports.backends import Mailer
from tickd.scheduler.urls import local_path


def open_mailer(url: str) -> Mailer:
    parts = urlsplit(url)
    if parts.scheme == "outbox":
        from tickd.scheduler.mail.outbox import OutboxMailer

        return OutboxMailer(local_path(url) or "var/outbox")
    if parts.scheme in ("smtp", "smtps"):
        from tickd.scheduler.mail.smtp import SmtpMailer

        return SmtpMailer(url)
    raise ValueError(
        f"mail_url: unsupported scheme {parts.scheme!r} (expected outbox://, smtp:// or smtps://)"
    )
