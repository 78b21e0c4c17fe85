"""Mail over SMTP through aiosmtplib.

    smtp://user:password@host:587?starttls=true&from=alerts@example.com
    smtps://user:password@host:465?from=alerts@example.com          (implicit TLS)

Query options: `starttls` (smtp:// only): `true` requires STARTTLS, `false` never uses it, and
left out it is used when the server offers it, except that with a login it is required: a
password never crosses the network in clear. `from`: the envelope sender, and the From header of
a message that has none. `timeout`: seconds per SMTP operation (default 30). `cafile`: a PEM file
of certificates to trust instead of the system's (a private CA).

One connection per message: the port is called once per email, ten at a time at most by the
alert scanner, and a fresh connection has no state to go stale between scans.

Errors are MailError: transient (4xx replies, refused or dropped connections, timeouts) or
permanent (5xx replies, a refused login, a server without a feature we require). The password
is kept out of repr, errors and logs: messages are built from the server's reply and scrubbed.
"""

from __future__ import annotations

import copy
import ssl
from dataclasses import dataclass, field
from email.message import EmailMessage
from urllib.parse import parse_qsl, unquote, urlsplit

import aiosmtplib

from tickd.scheduler.ports.backends import MailError
from tickd.scheduler.secrets.masking import MASK, scrub_text

DEFAULT_TIMEOUT_SECONDS = 30.0
OPTIONS = ("starttls", "from", "timeout", "cafile")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True, kw_only=True)
class SmtpSettings:
    host: str
    port: int
    # smtps://: TLS from the first byte.
    implicit_tls: bool = False
    # True: STARTTLS required; False: never; None: when the server offers it.
    start_tls: bool | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    from_address: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    cafile: str | None = None

    @classmethod
    def from_url(cls, url: str) -> SmtpSettings:
        """Settings from a URL; ValueError (without the password) when it is not one."""
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise ValueError(f"mail_url: expected smtp:// or smtps://, not {parts.scheme}://")
        if not parts.hostname:
            raise ValueError(f"mail_url: {scrub_text(url)} names no host")
        options = _options(parts.query)
        implicit_tls = parts.scheme == "smtps"
        username = unquote(parts.username) if parts.username else None
        return cls(
            host=parts.hostname,
            port=_port(parts.port, implicit_tls, options),
            implicit_tls=implicit_tls,
            start_tls=_start_tls(options, implicit_tls, with_login=username is not None),
            username=username,
            password=unquote(parts.password) if parts.password is not None else None,
            from_address=options.get("from") or None,
            timeout_seconds=_timeout(options),
            cafile=options.get("cafile") or None,
        )

    def safe_url(self) -> str:
        """The URL with the password masked, for logs and repr."""
        scheme = "smtps" if self.implicit_tls else "smtp"
        login = f"{self.username}:{MASK}@" if self.username else ""
        query = "" if self.start_tls is None else f"?starttls={str(self.start_tls).lower()}"
        return f"{scheme}://{login}{self.host}:{self.port}{query}"


def _options(query: str) -> dict[str, str]:
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"mail_url: unknown option {', '.join(unknown)} (known: {OPTIONS})")
    return options


def _port(port: int | None, implicit_tls: bool, options: dict[str, str]) -> int:
    if port is not None:
        return port
    if implicit_tls:
        return 465
    return 587 if options.get("starttls", "").lower() in _TRUE else 25


def _start_tls(options: dict[str, str], implicit_tls: bool, *, with_login: bool) -> bool | None:
    value = options.get("starttls")
    if value is None:
        return None if implicit_tls or not with_login else True
    if implicit_tls:
        raise ValueError("mail_url: starttls does not apply to smtps:// (TLS from the start)")
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"mail_url: starttls={value!r}, expected true or false")


def _timeout(options: dict[str, str]) -> float:
    try:
        seconds = float(options.get("timeout", DEFAULT_TIMEOUT_SECONDS))
    except ValueError:
        raise ValueError(f"mail_url: timeout={options['timeout']!r} is not a number") from None
    if not seconds > 0:
        raise ValueError("mail_url: timeout must be more than 0")
    return seconds


class SmtpMailer:
    """Sends each message over its own SMTP connection."""

    def __init__(self, settings: SmtpSettings | str) -> None:
        self.settings = SmtpSettings.from_url(settings) if isinstance(settings, str) else settings

    def __repr__(self) -> str:
        return f"SmtpMailer({self.settings.safe_url()})"

    async def send(self, message: EmailMessage) -> None:
        s = self.settings
        try:
            await aiosmtplib.send(
                self._with_from(message),
                sender=s.from_address,
                hostname=s.host,
                port=s.port,
                username=s.username,
                password=s.password,
                use_tls=s.implicit_tls,
                start_tls=s.start_tls,
                timeout=s.timeout_seconds,
                cert_bundle=s.cafile,
            )
        except (aiosmtplib.SMTPException, OSError, ValueError) as exc:
            # `from None`: the cause is described in the message, scrubbed; nothing else of it
            # (its arguments, its traceback's locals) travels on.
            raise self.mail_error(exc) from None

    def _with_from(self, message: EmailMessage) -> EmailMessage:
        """The message with a From header: the URL's `from` when it has none (on a copy)."""
        if message["From"] is not None or not self.settings.from_address:
            return message
        completed = copy.deepcopy(message)
        completed["From"] = self.settings.from_address
        return completed

    def mail_error(self, exc: Exception) -> MailError:
        transient, reason = classify(exc)
        where = f"smtp {self.settings.host}:{self.settings.port}"
        return MailError(
            self._scrubbed(f"{where}: {reason}"),
            transient=transient,
            recipient_refused=recipient_refused(exc),
        )

    def _scrubbed(self, text: str) -> str:
        if self.settings.password:
            text = text.replace(self.settings.password, MASK)
        return scrub_text(text)

    async def close(self) -> None:
        return None


def classify(exc: Exception) -> tuple[bool, str]:
    """(transient, reason): 4xx replies and connection trouble are worth retrying; 5xx replies,
    refusals of what we asked for and a certificate we do not trust are not."""
    name = type(exc).__name__
    if _untrusted_certificate(exc):
        return False, f"{name}: {exc}"
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [r.code for r in exc.recipients]
        refused = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in exc.recipients)
        return all(400 <= code < 500 for code in codes), f"{name}: {refused}"
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return 400 <= exc.code < 500, f"{name}: {exc.code} {exc.message}"
    if isinstance(exc, ConnectionError | TimeoutError | OSError):
        return True, f"{name}: {exc}"
    return False, f"{name}: {exc}"


def recipient_refused(exc: Exception) -> bool:
    """A hard bounce: every recipient refused with a 5xx at RCPT, or a 5xx reply whose enhanced
    status (RFC 3463) is about the mailbox (5.1.x address, 5.2.x mailbox), as some servers
    refuse an unknown user only after DATA."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return bool(exc.recipients) and all(500 <= r.code < 600 for r in exc.recipients)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return 500 <= exc.code < 600 and exc.message.lstrip().startswith(("5.1.", "5.2."))
    return False


def _untrusted_certificate(exc: BaseException | None) -> bool:
    """aiosmtplib wraps the TLS error in SMTPConnectError: look down the chain."""
    while exc is not None:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
