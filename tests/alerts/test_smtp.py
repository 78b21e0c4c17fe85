"""The SMTP mail backend against a real SMTP server (aiosmtpd) on loopback: plain, STARTTLS and
implicit TLS, with a login; how each refusal and failure is classified; and the password kept out
of repr, errors and logs."""

from __future__ import annotations

import logging
from email.message import EmailMessage

import pytest

from tests.alerts.conftest import SMTP_PASSWORD, SMTP_USER, Certificate, StartSmtp
from tickd.scheduler.mail import open_mailer
from tickd.scheduler.mail.smtp import SmtpMailer, SmtpSettings
from tickd.scheduler.ports.backends import MailError

LOGIN = f"{SMTP_USER}:{SMTP_PASSWORD}@"


def message(**headers: str) -> EmailMessage:
    built = EmailMessage()
    for name, value in ({"To": "ada@example.com", "Subject": "hello"} | headers).items():
        built[name] = value
    built.set_content("body")
    return built


# -- the URL ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://mail.example", {"port": 25, "start_tls": None, "implicit_tls": False}),
        ("smtp://mail.example?starttls=true", {"port": 587, "start_tls": True}),
        ("smtp://mail.example:2525?starttls=false", {"port": 2525, "start_tls": False}),
        ("smtp://u:p@mail.example", {"start_tls": True, "username": "u", "password": "p"}),
        ("smtp://u:p@mail.example?starttls=false", {"start_tls": False}),
        ("smtps://mail.example", {"port": 465, "implicit_tls": True, "start_tls": None}),
        ("smtp://a%40b:p%2Fw%3Ad@mail.example", {"username": "a@b", "password": "p/w:d"}),
        (
            "smtp://mail.example?from=alerts@example.com&timeout=5&cafile=/etc/ca.pem",
            {"from_address": "alerts@example.com", "timeout_seconds": 5.0, "cafile": "/etc/ca.pem"},
        ),
    ],
)
def test_settings_from_the_url(url: str, expected: dict[str, object]) -> None:
    settings = SmtpSettings.from_url(url)
    assert {name: getattr(settings, name) for name in expected} == expected
    assert settings.host == "mail.example"


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("smtp://mail.example?starttls=maybe", "starttls='maybe'"),
        ("smtps://mail.example?starttls=true", "does not apply to smtps"),
        ("smtp://mail.example?tls=yes", "unknown option tls"),
        ("smtp://mail.example?timeout=0", "timeout must be more than 0"),
        ("smtp://mail.example?timeout=soon", "timeout='soon'"),
        ("smtp://u:hunter2@?from=a@b.example", "names no host"),
    ],
)
def test_bad_urls_name_the_problem_without_the_password(url: str, error: str) -> None:
    with pytest.raises(ValueError, match="mail_url") as raised:
        SmtpSettings.from_url(url)
    assert error in str(raised.value) and "hunter2" not in str(raised.value)


def test_open_mailer_picks_smtp_for_both_schemes() -> None:
    assert isinstance(open_mailer("smtp://mail.example"), SmtpMailer)
    assert isinstance(open_mailer("smtps://mail.example"), SmtpMailer)
    with pytest.raises(ValueError, match="outbox://, smtp:// or smtps://"):
        open_mailer("sendmail://x")


def test_the_password_is_not_in_repr() -> None:
    mailer = SmtpMailer(f"smtp://{LOGIN}mail.example:587")
    assert SMTP_PASSWORD not in repr(mailer) and SMTP_PASSWORD not in repr(mailer.settings)
    assert repr(mailer) == "SmtpMailer(smtp://alerts:***@mail.example:587?starttls=true)"


# -- delivery -----------------------------------------------------------------------------------


async def test_a_message_reaches_the_server(start_smtp: StartSmtp) -> None:
    server = await start_smtp()
    mailer = SmtpMailer(server.url(query="starttls=false&from=alerts@tickd.example"))
    await mailer.send(message())
    (received,) = server.received
    assert (received.mail_from, received.rcpt_tos) == ("alerts@tickd.example", ["ada@example.com"])
    assert received.message["From"] == "alerts@tickd.example"  # filled in from the URL
    assert received.message["Subject"] == "hello"


async def test_the_messages_own_from_is_kept(start_smtp: StartSmtp) -> None:
    server = await start_smtp()
    mailer = SmtpMailer(server.url(query="from=bounces@tickd.example"))
    original = message(From="alerts@tickd.example")
    await mailer.send(original)
    (received,) = server.received
    assert received.mail_from == "bounces@tickd.example"
    assert received.message["From"] == "alerts@tickd.example"


async def test_starttls_with_a_login(
    start_smtp: StartSmtp, certificate: Certificate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = await start_smtp(tls=certificate.server_context())
    url = server.url(login=LOGIN, query=f"starttls=true&cafile={certificate.cert}")
    await SmtpMailer(url).send(message(From="alerts@tickd.example"))
    (received,) = server.received
    assert received.login == SMTP_USER
    assert SMTP_PASSWORD not in caplog.text


async def test_a_login_requires_tls_unless_told_otherwise(
    start_smtp: StartSmtp, certificate: Certificate
) -> None:
    """Left out, starttls is required with a login; the server offers it, so it is used."""
    server = await start_smtp(tls=certificate.server_context())
    url = server.url(login=LOGIN, query=f"cafile={certificate.cert}")
    await SmtpMailer(url).send(message(From="alerts@tickd.example"))
    assert [r.login for r in server.received] == [SMTP_USER]


async def test_implicit_tls_with_a_login(start_smtp: StartSmtp, certificate: Certificate) -> None:
    server = await start_smtp(implicit_tls=certificate.server_context())
    url = server.url("smtps", login=LOGIN, query=f"cafile={certificate.cert}")
    await SmtpMailer(url).send(message(From="alerts@tickd.example"))
    assert [r.login for r in server.received] == [SMTP_USER]


# -- failures -----------------------------------------------------------------------------------


async def send_failing(url: str) -> MailError:
    with pytest.raises(MailError) as raised:
        await SmtpMailer(url).send(message(From="alerts@tickd.example"))
    return raised.value


async def test_a_wrong_password_is_permanent_and_not_repeated(
    start_smtp: StartSmtp, certificate: Certificate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = await start_smtp(tls=certificate.server_context())
    wrong = "Wr0ng-" + SMTP_PASSWORD
    error = await send_failing(
        server.url(login=f"{SMTP_USER}:{wrong}@", query=f"cafile={certificate.cert}")
    )
    assert not error.transient and "535" in str(error)
    assert not error.recipient_refused  # tickd's fault, not the address's
    assert wrong not in str(error) and SMTP_PASSWORD not in str(error)
    assert error.__cause__ is None and error.__suppress_context__
    assert wrong not in caplog.text


async def test_an_untrusted_certificate_is_permanent(
    start_smtp: StartSmtp, certificate: Certificate
) -> None:
    server = await start_smtp(implicit_tls=certificate.server_context())
    error = await send_failing(server.url("smtps", login=LOGIN, query=""))
    assert not error.transient and "CERTIFICATE_VERIFY_FAILED" in str(error)


async def test_starttls_required_but_not_offered_is_permanent(start_smtp: StartSmtp) -> None:
    server = await start_smtp()
    error = await send_failing(server.url(query="starttls=true"))
    assert not error.transient and "SMTPException" in str(error)


@pytest.mark.parametrize(
    ("rcpt_reply", "data_reply", "transient", "bounce"),
    [
        ("550 5.1.1 no such user", None, False, True),
        ("450 4.2.1 mailbox busy", None, True, False),
        (None, "554 5.7.1 rejected as spam", False, False),
        (None, "550 5.1.1 no such user (after DATA)", False, True),
        (None, "451 4.3.0 try again later", True, False),
        (None, "421 4.3.2 shutting down", True, False),
    ],
)
async def test_replies_are_transient_or_permanent_by_their_code(
    start_smtp: StartSmtp,
    rcpt_reply: str | None,
    data_reply: str | None,
    transient: bool,
    bounce: bool,
) -> None:
    """A hard bounce (the address refused for good) is told apart from other refusals."""
    server = await start_smtp()
    server.rcpt_reply = rcpt_reply
    server.data_replies = [data_reply] if data_reply else []
    error = await send_failing(server.url())
    assert error.transient is transient
    assert error.recipient_refused is bounce
    assert (rcpt_reply or data_reply or "").split(" ", 1)[0] in str(error)
    assert server.received == []


async def test_a_dropped_connection_is_transient(dropping_server: int) -> None:
    error = await send_failing(f"smtp://127.0.0.1:{dropping_server}?starttls=false&timeout=5")
    assert error.transient and f"127.0.0.1:{dropping_server}" in str(error)


async def test_a_refused_connection_is_transient(unused_port: int) -> None:
    error = await send_failing(f"smtp://127.0.0.1:{unused_port}?starttls=false&timeout=5")
    assert error.transient


async def test_a_message_without_any_sender_is_permanent(start_smtp: StartSmtp) -> None:
    server = await start_smtp()
    with pytest.raises(MailError) as raised:
        await SmtpMailer(server.url()).send(message())
    assert not raised.value.transient
