"""The scan's permits bound what is in flight at once, measured under a load bigger than them: at
most `lookup_concurrency` part lookups (50) and `smtp_concurrency` SMTP sessions (10, against a
real SMTP server, aiosmtpd), and exactly that many when there is more work than permits.

Each lookup or session waits, boundedly, until the permit count is in flight at once: a bound
too high shows as a count above it, one too low as the wait running out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.alerts.builders import alert, part, price_rule
from tests.alerts.conftest import Outbox, SmtpServer
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits, scan
from tickd.handlers.product_store import Doc, ProductStore
from tickd.scheduler.mail.smtp import SmtpMailer
from tickd.scheduler.ports.clock import FakeClock

# How long one in-flight call may wait for the others: far more than they need to arrive.
WAIT_SECONDS = 10


@dataclass
class InFlight:
    """Counts calls in flight and holds each until `permits` are in flight at once."""

    permits: int
    now: int = 0
    most: int = 0
    full: asyncio.Event = field(default_factory=asyncio.Event)

    def started(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        if self.now >= self.permits:
            self.full.set()

    def ended(self) -> None:
        self.now -= 1

    async def until_full(self) -> None:
        async with asyncio.timeout(WAIT_SECONDS):
            await self.full.wait()


class CountedLookups:
    """The product store, its part lookups counted."""

    def __init__(self, inner: ProductStore, in_flight: InFlight) -> None:
        self.inner, self.in_flight = inner, in_flight

    async def parts(self, part_ids: Collection[str]) -> dict[str, Doc]:
        self.in_flight.started()
        try:
            await self.in_flight.until_full()
            return await self.inner.parts(part_ids)
        finally:
            self.in_flight.ended()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def watched_parts(products: ProductStore, count: int) -> None:
    """`count` users, each watching a part of their own with a rule that fires and emails."""
    await products.upsert_parts([part(f"p{i}", price=12.5) for i in range(count)])
    await products.upsert_alerts(
        [
            alert(f"a{i}", price_rule(notifyEmail=True), part_id=f"p{i}", user=f"user-{i}")
            for i in range(count)
        ]
    )


async def test_at_most_50_part_lookups_are_in_flight(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await watched_parts(products, 120)
    in_flight = InFlight(permits=50)
    counted: Any = CountedLookups(products, in_flight)

    # One part a lookup: 120 lookups for 50 permits.
    result = await scan(counted, outbox.mailer, clock, ScanLimits(parts_per_lookup=1))

    assert result.evaluated == 120 and result.errors == 0
    assert in_flight.most == ScanLimits().lookup_concurrency == 50


class CountedSessions(SMTP):
    """aiosmtpd's protocol, one per connection, counting a session from the connection to QUIT
    (the client holds its permit throughout that)."""

    def __init__(self, handler: Any, in_flight: InFlight) -> None:
        super().__init__(handler, hostname="tickd-test")
        self.in_flight = in_flight

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.in_flight.started()
        super().connection_made(transport)

    async def smtp_QUIT(self, arg: str) -> None:
        self.in_flight.ended()
        await super().smtp_QUIT(arg)


@dataclass
class HoldingServer(SmtpServer):
    """Accepts each message once `permits` sessions are open at once."""

    in_flight: InFlight = field(default_factory=lambda: InFlight(permits=10))

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        await self.in_flight.until_full()
        return await super().handle_DATA(server, session, envelope)


@pytest.fixture
async def holding_smtp() -> AsyncIterator[HoldingServer]:
    recorder = HoldingServer()
    server = await asyncio.get_running_loop().create_server(
        lambda: CountedSessions(recorder, recorder.in_flight), host="127.0.0.1", port=0
    )
    recorder.port = server.sockets[0].getsockname()[1]
    try:
        yield recorder
    finally:
        server.close()
        await server.wait_closed()


async def test_at_most_10_smtp_sessions_are_in_flight(
    products: ProductStore, holding_smtp: HoldingServer, clock: FakeClock
) -> None:
    await watched_parts(products, 25)
    mailer = SmtpMailer(holding_smtp.url())

    # 25 recipients, one email each, for 10 permits.
    limits = ScanLimits(email=EmailPolicy(from_address="alerts@tickd.example"))
    result = await scan(products, mailer, clock, limits)

    assert (result.emails_sent, result.emails_failed) == (25, 0)
    assert len(holding_smtp.received) == 25
    assert holding_smtp.in_flight.most == EmailPolicy().concurrency == 10
