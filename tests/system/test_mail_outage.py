"""The SMTP server going away in the middle of an alert scan, under a real daemon on FerretDB,
Redis and Kafka: the daemon stays up, the emails the server did not take wait on their
notifications and go with a later scan once it is back, and no one gets an email twice.

The SMTP server is aiosmtpd in the test's event loop, on a port of its own; it stops listening
after it has taken a few emails of the first scan, and listens again on the same port later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.alerts.builders import alert, part, price_rule
from tests.alerts.conftest import SmtpServer
from tests.system.stack import (
    Report,
    Sandbox,
    daemons,
    eventually,
    executions,
    free_port,
    runs_in,
)
from tickd.handlers.product_store import open_product_store
from tickd.scheduler.model import IntervalSchedule, Job

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

USERS = 30
# The server stops listening once it has taken this many emails (the scan sends ten at once, so
# a few more in flight are still taken); the rest of the scan finds it gone.
TAKEN_BEFORE_THE_OUTAGE = 8
SCAN_EVERY_SECONDS = 3
# Failed scans seen before the server comes back (a scan retries a failed email once, 1 s later).
FAILED_SCANS_WHILE_DOWN = 3


class GoingAway(SmtpServer):
    """The recorder of the alert tests, on a fixed port, that stops listening after a number of
    emails and can listen again."""

    def __init__(self, port: int, stop_after: int) -> None:
        super().__init__(port=port)
        self.stop_after = stop_after
        self.server: asyncio.Server | None = None
        self.stopped_at: datetime | None = None
        # Every connection it took that is not gone yet: closing a server does not close them
        # (Python 3.11). Kept as transports, not as the SMTP sessions' own: a session drops
        # its transport in some ends.
        self.open: set[asyncio.Transport] = set()
        self.all_gone = asyncio.Event()

    async def listen(self) -> None:
        self.server = await asyncio.get_running_loop().create_server(
            lambda: _Session(self), host="127.0.0.1", port=self.port
        )

    def stop_listening(self) -> None:
        """New connections are refused from now on; those open finish their email."""
        if self.server is not None:
            self.server.close()
            self.server = None
            self.stopped_at = datetime.now(UTC)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        reply = await super().handle_DATA(server, session, envelope)
        if len(self.received) == self.stop_after:
            self.stop_listening()
        return reply

    async def close(self) -> None:
        """Every connection closed and its socket released, not left to the collector (whose
        ResourceWarning then failed whichever test ran next)."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for transport in list(self.open):
            transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_gone.wait(), 1)
        for transport in list(self.open):  # still flushing to a client that went away
            transport.abort()
        if self.open:
            await asyncio.wait_for(self.all_gone.wait(), 5)


class _Session(SMTP):
    """An SMTP session that tells its server of its connection and of its end."""

    def __init__(self, recorder: GoingAway) -> None:
        super().__init__(recorder, hostname="tickd-test")
        self.recorder = recorder

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.connection = transport
        self.recorder.open.add(transport)
        self.recorder.all_gone.clear()
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        self.recorder.open.discard(self.connection)
        if not self.recorder.open:
            self.recorder.all_gone.set()
        super().connection_lost(error)


async def seed_alerts(sandbox: Sandbox) -> None:
    """One part whose price rose 100 %, and a user per alert watching it: every alert fires, one
    email per user."""
    products = open_product_store(sandbox.store_url)
    await products.open()
    try:
        await products.upsert_parts([part("part-1", price=20.0)])
        alerts = [alert(f"alert-{i}", price_rule(), user=f"user-{i:02}") for i in range(USERS)]
        assert await products.insert_missing_alerts(alerts) == USERS
    finally:
        await products.close()


def scan_job() -> Job:
    return Job(
        name="alert-scan",
        handler="alert_scanner",
        schedule=IntervalSchedule(every_seconds=SCAN_EVERY_SECONDS),
        # One retry of a failed email (1 s later) per scan, and never given up within the test.
        params={"send_attempts": 2, "email_scans": 100, "from_address": "alerts@tickd.test"},
        next_run_at=datetime.now(UTC),
        timeout_seconds=60,
    )


async def scans(sandbox: Sandbox) -> list[dict[str, Any]]:
    """The counts of every finished scan, oldest first."""
    found = await executions(sandbox, handler="alert_scanner")
    finished = sorted((e for e in found if e.status != "running"), key=lambda e: e.scheduled_at)
    return [{"status": str(e.status), **(e.result or {})} for e in finished]


async def test_an_smtp_outage_mid_scan_delays_the_emails_and_sends_none_twice(
    sandbox: Sandbox, tmp_path: Path, report: Report
) -> None:
    smtp = GoingAway(port=free_port(), stop_after=TAKEN_BEFORE_THE_OUTAGE)
    await smtp.listen()
    await seed_alerts(sandbox)
    mail_url = f"smtp://127.0.0.1:{smtp.port}?starttls=false&timeout=5"
    try:
        async with daemons(sandbox, tmp_path, ["a"], mail_url=mail_url) as (daemon,):
            await sandbox.add_jobs([scan_job()])

            async def scans_failed_while_down() -> bool:
                assert daemon.alive, daemon.log_tail()
                failed = [s for s in await scans(sandbox) if s.get("emails_failed")]
                return len(failed) >= FAILED_SCANS_WHILE_DOWN

            await eventually("scans found the SMTP server down", scans_failed_while_down, within=90)
            readiness = await daemon.ready()
            # Ready all along (mail is off the runs' path), saying the mail server is failing.
            assert readiness[0] == 200 and readiness[1]["mail"]["state"] == "failing", readiness
            taken_before = len(smtp.received)
            await smtp.listen()
            back_at = datetime.now(UTC)

            async def everyone_mailed() -> bool:
                assert daemon.alive, daemon.log_tail()
                return len({r.rcpt_tos[0] for r in smtp.received}) >= USERS

            recovered = await eventually("every user got the email", everyone_mailed, within=60)
            # Two more scans: nothing is sent again.
            settled = len(await scans(sandbox)) + 2

            async def two_more_scans() -> bool:
                return len(await scans(sandbox)) >= settled

            await eventually("two more scans", two_more_scans, within=30)
            readiness_after = await daemon.ready()
            assert daemon.alive, daemon.log_tail()
            assert await daemon.stop() == 0, daemon.log_tail()
    finally:
        await smtp.close()

    per_user = Counter(r.rcpt_tos[0] for r in smtp.received)
    message_ids = Counter(str(r.message["Message-ID"]) for r in smtp.received)
    results = await scans(sandbox)
    statuses = Counter(str(s["status"]) for s in results)
    failed = sum(int(s.get("emails_failed", 0)) for s in results)
    runs = [run for run in await runs_in(sandbox) if run.status != "running"]
    assert smtp.stopped_at is not None
    report(
        f"alert scan of {USERS} users: the SMTP server stopped listening after "
        f"{TAKEN_BEFORE_THE_OUTAGE} emails, {taken_before} taken by then; down "
        f"{(back_at - smtp.stopped_at).total_seconds():.1f} s; {failed} sends failed in "
        f"{sum(1 for s in results if s.get('emails_failed'))} scans; /readyz while down: "
        f"{readiness[0]}, mail {readiness[1]['mail']}"
    )
    report(
        f"after it was back: every user mailed within {recovered:.1f} s; {len(smtp.received)} "
        f"emails for {len(per_user)} users, {sum(n - 1 for n in per_user.values())} twice; "
        f"scans {dict(statuses)}; {len(runs)} executions"
    )

    assert set(per_user) == {f"user-{i:02}@example.com" for i in range(USERS)}
    assert set(per_user.values()) == {1}, f"emails sent twice: {per_user.most_common(3)}"
    assert set(message_ids.values()) == {1}
    assert failed > 0
    assert readiness_after[1]["mail"]["state"] == "ok", readiness_after
