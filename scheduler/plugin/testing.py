"""A handler's context without a daemon, on throwaway backends; plug-ins import it from
`tickd.testing`, beside `run_handler`, which runs a handler as the daemon does.

    async with handler_context(params={"name": "Ada"}) as ctx:
        result = await my_handler(ctx)

Mail goes to an outbox folder, the clock is a FakeClock you can move, and `ctx.http` is the same
SSRF-safe session the daemon gives handlers (pass `http_allow=["127.0.0.1"]` to reach a test
server on loopback). A handler that declares resources gets them from `resources`, opened by the
test: `handler_context(resources={PRODUCTS: store})`.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.plugin.api import HandlerContext, Resource
from tickd.scheduler.plugin.http import DEFAULT_PORTS, safe_client_session
from tickd.scheduler.ports.clock import FakeClock


@asynccontextmanager
async def handler_context(
    *,
    params: Mapping[str, Any] | None = None,
    job_name: str = "test-job",
    scheduled_at: datetime | None = None,
    attempt: int = 1,
    timeout_seconds: float = 60.0,
    http_allow: Collection[str] = (),
    http_ports: Collection[int] = DEFAULT_PORTS,
    outbox: str | None = None,
    config: Mapping[str, Any] | None = None,
    resources: Mapping[Resource[Any], object] | None = None,
    shard: int = 0,
    shards: int = 1,
) -> AsyncIterator[HandlerContext]:
    """`http_ports` are the public ports `ctx.http` reaches; `config` is the handler's own
    settings (`ctx.config`); `resources` the opened resources it may ask for (left open: they
    are the caller's); `shard` of `shards`, a sharded job's run."""
    clock = FakeClock(scheduled_at or datetime(2026, 1, 1, tzinfo=UTC))
    http = safe_client_session(allow=tuple(http_allow), ports=http_ports)
    try:
        yield HandlerContext(
            job_id=f"{job_name}-id",
            job_name=job_name,
            params=dict(params or {}),
            scheduled_at=clock.now(),
            attempt=attempt,
            deadline=clock.now() + timedelta(seconds=timeout_seconds),
            idempotency_key=f"{job_name}-id:{clock.now().isoformat()}"
            + (f":shard-{shard}" if shards > 1 else ""),
            logger=logging.getLogger(f"tickd.handler.{job_name}"),
            clock=clock,
            mailer=OutboxMailer(outbox or tempfile.mkdtemp(prefix="tickd-outbox-")),
            http=http,
            config=dict(config or {}),
            resources={resource.name: opened for resource, opened in (resources or {}).items()},
            shard=shard,
            shards=shards,
        )
    finally:
        await http.close()
