"""Helpers for testing a handler without a daemon: a real context on throwaway backends.

    async with handler_context(params={"name": "Ada"}) as ctx:
        result = await my_handler(ctx)

The store is a SQLite database in memory, mail goes to an outbox folder, the clock is a FakeClock
you can move, and `ctx.http` is the same SSRF-safe session the daemon gives handlers (pass
`http_allow=["127.0.0.1"]` to reach a test server on loopback).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.clock import FakeClock
from scheduler.handler_api import HandlerContext
from scheduler.http import safe_client_session
from scheduler.mail.outbox import OutboxMailer
from scheduler.product import ProductStore
from scheduler.product.sqlite import SQLiteProductStore
from scheduler.store.sqlite import SQLiteStore


@asynccontextmanager
async def handler_context(
    *,
    params: Mapping[str, Any] | None = None,
    job_name: str = "test-job",
    scheduled_at: datetime | None = None,
    attempt: int = 1,
    timeout_seconds: float = 60.0,
    http_allow: Collection[str] = (),
    outbox: str | None = None,
    config: Mapping[str, Any] | None = None,
    products: ProductStore | None = None,
) -> AsyncIterator[HandlerContext]:
    """`config` is the handler's own settings (`ctx.config`); `products` a product store to use
    instead of a fresh one in memory (left open: it is the caller's)."""
    clock = FakeClock(scheduled_at or datetime(2026, 1, 1, tzinfo=UTC))
    store = SQLiteStore("sqlite:///:memory:")
    await store.open()
    own_products = products is None
    if products is None:
        products = SQLiteProductStore("sqlite:///:memory:")
        await products.open()
    http = safe_client_session(allow=tuple(http_allow))
    try:
        yield HandlerContext(
            job_id=f"{job_name}-id",
            job_name=job_name,
            params=dict(params or {}),
            scheduled_at=clock.now(),
            attempt=attempt,
            deadline=clock.now() + timedelta(seconds=timeout_seconds),
            idempotency_key=f"{job_name}-id:{clock.now().isoformat()}",
            logger=logging.getLogger(f"tickd.handler.{job_name}"),
            clock=clock,
            store=store,
            mailer=OutboxMailer(outbox or tempfile.mkdtemp(prefix="tickd-outbox-")),
            products=products,
            http=http,
            config=dict(config or {}),
        )
    finally:
        await http.close()
        if own_products:
            await products.close()
        await store.close()
