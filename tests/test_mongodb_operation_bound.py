"""A MongoDB store's operation gives its place at the gate back within OPERATION_SECONDS, answered
or not: one stuck where the driver has no timeout of its own must not hold a place, and so every
store caller queued behind the places, for ever."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import tickd.scheduler.store.kit.mongodb as kit
from tickd.scheduler.ports.backends import StoreError

BOUND_SECONDS = 0.2
# Bounds the test's own waits: far above the bound, far below a hang.
WITHIN_SECONDS = 5.0


class OnePlaceStore:
    """A store with FerretDB's gate cut to one place, and an operation that can be held."""

    def __init__(self) -> None:
        self.gate: contextlib.AbstractAsyncContextManager[Any] = asyncio.Semaphore(1)
        self.answer = asyncio.Event()

    @kit.translating_errors
    async def stuck_until_answered(self) -> str:
        await self.answer.wait()
        return "answered"

    @kit.translating_errors
    async def quick(self) -> str:
        return "quick"


@pytest.fixture(autouse=True)
def short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kit, "OPERATION_SECONDS", BOUND_SECONDS)


async def test_an_operation_without_an_answer_fails_transient_and_gives_its_place_back() -> None:
    store = OnePlaceStore()
    stuck = asyncio.create_task(store.stuck_until_answered())
    queued = asyncio.create_task(store.quick())  # behind the only place

    async with asyncio.timeout(WITHIN_SECONDS):
        with pytest.raises(StoreError) as caught:
            await stuck
        assert await queued == "quick"
    assert caught.value.transient
    assert str(caught.value) == f"mongodb stuck_until_answered: no answer within {BOUND_SECONDS} s"


async def test_an_operation_answered_within_the_bound_returns_its_answer() -> None:
    store = OnePlaceStore()
    store.answer.set()
    async with asyncio.timeout(WITHIN_SECONDS):
        assert await store.stuck_until_answered() == "answered"


async def test_a_timeout_of_the_operations_own_is_not_taken_for_the_bound() -> None:
    class TimingOut(OnePlaceStore):
        @kit.translating_errors
        async def times_out(self) -> None:
            raise TimeoutError("the operation's own")

    with pytest.raises(TimeoutError, match="the operation's own"):
        await TimingOut().times_out()
