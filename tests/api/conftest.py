"""An API on a real store (every backend), with a fake clock and an engine to drain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.conftest import EngineFactory, Harness
from tickd.app import build_api
from tickd.handlers.sleep import sleep
from tickd.scheduler.config.api_tokens import ApiToken
from tickd.scheduler.plugin.api import Handler, HandlerContext, HandlerFunc, Result, handler
from tickd.scheduler.ports.backends import Store
from tickd.scheduler.ports.clock import FakeClock

# Random, as configured tokens must be (scheduler/config/api_tokens.py refuses placeholders).
READ = "read-wtNTScKPlO_QXKa38qNlRhsJKMOc"
WRITE = "write-q92mXuWVxt2ZvXJbq8kMk5GuszSY"
ADMIN = "admin-1qkJCPC7Om2NHQwdJ9s454rHnghM"
TOKENS = (
    ApiToken(name="viewer", scope="read", token=READ),
    ApiToken(name="deployer", scope="write", token=WRITE),
    ApiToken(name="root", scope="admin", token=ADMIN),
)


@handler(
    params_schema={
        "type": "object",
        "properties": {
            "url": {"type": "string", "pattern": "^https://"},
            "api_key": {"type": "string"},
            "attempts_to_fail": {"type": "integer", "minimum": 0},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    secret_params={"api_key"},
)
async def ping(ctx: HandlerContext) -> Result:
    if ctx.attempt <= int(ctx.params.get("attempts_to_fail", 0)) or ctx.params.get("fail"):
        raise RuntimeError("upstream said no")
    return {"ok": True}


async def boom(ctx: HandlerContext) -> Result:
    raise RuntimeError("always fails")


@dataclass
class Api:
    client: TestClient[Any, Any]
    harness: Harness
    clock: FakeClock
    store: Store

    def auth(self, token: str = ADMIN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def call(
        self, method: str, path: str, *, token: str | None = ADMIN, **kwargs: Any
    ) -> tuple[int, Any, dict[str, str]]:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.client.request(method, path, headers=headers, **kwargs) as response:
            body = await response.json() if response.content_type.endswith("json") else None
            return response.status, body, {k.lower(): v for k, v in response.headers.items()}


def api_app(
    make_engine: EngineFactory,
    handlers: dict[str, Handler | HandlerFunc] | None = None,
    tokens: tuple[ApiToken, ...] = TOKENS,
    **settings: Any,
) -> tuple[Harness, web.Application]:
    """The API over an engine in drain mode, with the test handlers (or `handlers`), `tokens`
    and any other `settings`."""
    harness = make_engine(
        handlers or {"ping": ping, "sleep": sleep, "boom": boom},
        api_tokens=tokens,
        max_timeout_seconds=600,
        **settings,
    )
    engine = harness.engine
    app = build_api(
        harness.settings, harness.registry, engine.ports, engine.metrics, engine, dispatch=False
    )
    return harness, app


@asynccontextmanager
async def serving(
    make_engine: EngineFactory,
    handlers: dict[str, Handler | HandlerFunc] | None = None,
    **settings: Any,
) -> AsyncIterator[Api]:
    """The API of `api_app` served on loopback, with a client; closed on the way out."""
    harness, app = api_app(make_engine, handlers, **settings)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield Api(client, harness, harness.clock, harness.store)
    finally:
        await client.close()


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine) as served:
        yield served


@pytest.fixture
async def open_api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    """The API without tokens, as `make run` serves it on 127.0.0.1."""
    async with serving(make_engine, tokens=()) as served:
        yield served
