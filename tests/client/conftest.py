"""The client over the real API application, served on loopback: an engine in drain mode on
SQLite (the client does not care which store the daemon runs on), a fake clock, tokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.api.conftest import ADMIN, Api, serving
from tests.conftest import EngineFactory
from tests.fixtures.stores import opened
from tickd.client import AsyncClient, Client, Retry
from tickd.scheduler.ports import Store

T = TypeVar("T")
# Tests fail at once rather than wait out a backoff.
NO_WAIT = Retry(attempts=3, backoff_seconds=0.0)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with opened(f"sqlite:///{tmp_path}/tickd.db") as sqlite:
        yield sqlite


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine) as served:
        yield served


def base_url(api: Api) -> str:
    return str(api.client.make_url("")).rstrip("/")


@pytest.fixture
async def aclient(api: Api) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(base_url(api), token=ADMIN, retry=NO_WAIT) as client:
        yield client


class Blocking:
    """The blocking Client, called from a thread: the API it talks to serves on this loop."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def __call__(self, call: Callable[[Client], T]) -> T:
        return await asyncio.to_thread(call, self.client)


@pytest.fixture
async def sync(api: Api) -> AsyncIterator[Blocking]:
    client = Client(base_url(api), token=ADMIN, retry=NO_WAIT)
    try:
        yield Blocking(client)
    finally:
        await asyncio.to_thread(client.close)
