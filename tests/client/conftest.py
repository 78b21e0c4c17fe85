"""The client over the real API application, served on loopback: an engine in drain mode on
SQLite (the client does not care which store the daemon runs on), a fake clock, tokens, and the
product store (for the bounces).

`tickd` is either client, Client or AsyncClient, behind one awaitable face, so each test runs
against both: `await tickd.get_job(id)`, `await tickd.all("iter_jobs", limit=2)`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.api.conftest import ADMIN, TOKENS, Api, boom, ping
from tests.conftest import EngineFactory
from tests.fixtures.stores import opened
from tickd.app import build_api
from tickd.client import AsyncClient, Client, Retry
from tickd.handlers.noop import noop
from tickd.handlers.sleep import sleep
from tickd.scheduler.ports.backends import Store

# Tests fail at once rather than wait out a backoff.
NO_WAIT = Retry(attempts=3, backoff_seconds=0.0)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with opened(f"sqlite:///{tmp_path}/tickd.db") as sqlite:
        yield sqlite


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    harness = make_engine(
        {"ping": ping, "sleep": sleep, "boom": boom, "noop": noop},
        api_tokens=TOKENS,
        max_timeout_seconds=600,
    )
    engine = harness.engine
    app = build_api(
        harness.settings,
        harness.registry,
        engine.ports,
        engine.metrics,
        engine,
        dispatch=False,
        resources={"products": harness.products},
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield Api(client, harness, harness.clock, harness.store)
    finally:
        await client.close()


def base_url(api: Api) -> str:
    return str(api.client.make_url("")).rstrip("/")


class Calls:
    """Either client's methods, each awaitable: the blocking Client's run in a thread, since
    the API they talk to serves on this test's event loop."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.client, name)
        if isinstance(self.client, AsyncClient):
            return method  # type: ignore[no-any-return]
        return lambda *args, **kwargs: asyncio.to_thread(method, *args, **kwargs)

    async def all(self, iterator: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Every item of an `iter_` method, across its pages."""
        items = getattr(self.client, iterator)(*args, **kwargs)
        if isinstance(self.client, AsyncClient):
            return [item async for item in items]
        return await asyncio.to_thread(list, items)


@pytest.fixture(params=["sync", "async"])
async def tickd(request: pytest.FixtureRequest, api: Api) -> AsyncIterator[Calls]:
    async with connected(api, ADMIN, blocking=request.param == "sync") as calls:
        yield calls


@asynccontextmanager
async def connected(api: Api, token: str | None, *, blocking: bool) -> AsyncIterator[Calls]:
    """A client of `api` with `token`, closed on the way out."""
    url = base_url(api)
    if not blocking:
        async with AsyncClient(url, token=token, retry=NO_WAIT) as client:
            yield Calls(client)
        return
    blocking_client = Client(url, token=token, retry=NO_WAIT)
    try:
        yield Calls(blocking_client)
    finally:
        await asyncio.to_thread(blocking_client.close)
