"""Fixtures of the alert scanner's tests: a real SMTP server (aiosmtpd) on loopback, and an outbox
to read emails back from. The product store (`products`, `product_db`) is in
tests/fixtures/products.py.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.fixtures.products import ProductDatabase as ProductDatabase  # the tests' import
from tests.fixtures.times import T0
from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.ports.clock import FakeClock

SMTP_USER = "alerts"
SMTP_PASSWORD = "s3cr3t-Pa55w0rd"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


class Outbox:
    """The outbox backend (real files) and a way to read back what it holds."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.mailer = OutboxMailer(folder)

    def messages(self) -> list[EmailMessage]:
        files = sorted(self.folder.glob("*.eml")) if self.folder.exists() else []
        return [parse(path.read_bytes()) for path in files]

    def recipients(self) -> list[str]:
        return sorted(str(message["To"]) for message in self.messages())


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox")


def parse(data: bytes) -> EmailMessage:
    return message_from_bytes(data, policy=policy.default)


# -- a real SMTP server -------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    login: str | None


@dataclass
class SmtpServer:
    """aiosmtpd in the test's event loop on 127.0.0.1. It records what it accepts and answers
    DATA as scripted: `data_replies` in turn (the last one repeats; empty means 250), and RCPT
    with `rcpt_reply` when set (e.g. a 550)."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    data_replies: list[str] = field(default_factory=list)
    rcpt_reply: str | None = None
    data_commands: int = 0
    logins: list[str] = field(default_factory=list)

    def url(self, scheme: str = "smtp", query: str = "starttls=false", login: str = "") -> str:
        return f"{scheme}://{login}127.0.0.1:{self.port}" + (f"?{query}" if query else "")

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self.rcpt_reply:
            return self.rcpt_reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.data_commands += 1
        replies = self.data_replies or ["250 OK"]
        reply = replies[min(self.data_commands, len(replies)) - 1]
        if reply.startswith("250"):
            content = envelope.original_content or b""
            login = session.auth_data.login.decode() if session.auth_data else None
            self.received.append(
                Received(str(envelope.mail_from), list(envelope.rcpt_tos), parse(content), login)
            )
        return reply

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
            SMTP_USER.encode(),
            SMTP_PASSWORD.encode(),
        )
        return AuthResult(success=ok, handled=False, auth_data=data if ok else None)


StartSmtp = Callable[..., Awaitable[SmtpServer]]


@pytest.fixture
async def start_smtp() -> AsyncIterator[StartSmtp]:
    """Starts SMTP servers: `await start_smtp()` plain; `tls=ctx` offers STARTTLS (and requires
    it, with a login); `implicit_tls=ctx` speaks TLS from the first byte."""
    servers: list[asyncio.Server] = []

    async def start(
        *, tls: ssl.SSLContext | None = None, implicit_tls: ssl.SSLContext | None = None
    ) -> SmtpServer:
        recorder = SmtpServer()
        options: dict[str, Any] = {"hostname": "tickd-test", "tls_context": tls}
        if tls is not None:
            options |= {"authenticator": recorder.authenticate, "auth_required": True}
            options["require_starttls"] = True
        if implicit_tls is not None:
            # aiosmtpd only counts STARTTLS as TLS: on a TLS socket, AUTH is offered this way.
            options |= {"authenticator": recorder.authenticate, "auth_require_tls": False}
        server = await asyncio.get_running_loop().create_server(
            lambda: SMTP(recorder, **options), host="127.0.0.1", port=0, ssl=implicit_tls
        )
        servers.append(server)
        recorder.port = server.sockets[0].getsockname()[1]
        return recorder

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def dropping_server() -> AsyncIterator[int]:
    """A port whose server accepts each connection and closes it at once, before any greeting:
    an SMTP server dropping connections. Yields the port."""

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(drop, host="127.0.0.1", port=0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for 127.0.0.1, made with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return Certificate(cert, key)
