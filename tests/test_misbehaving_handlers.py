"""Handlers that misbehave: exit, interrupt, return too much, leave tasks behind. The daemon
keeps its workers and its pace, and each run gets a record saying what happened."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.conftest import T0, EngineFactory, Harness, make_job
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.plugin.outcomes import MAX_RESULT_CHARS
from tickd.scheduler.ports.backends import ExecutionQuery, Store
from tickd.scheduler.run.states import RunState

# Bounds every wait on a real event in these tests.
WAIT = 5.0


async def noop(ctx: HandlerContext) -> Result:
    return None


async def runs_by_name(store: Store) -> dict[str, Execution]:
    return {e.job_name: e for e in await store.list_executions(ExecutionQuery(limit=100))}


async def run_then_the_next(h: Harness, handler: str) -> dict[str, Execution]:
    """The misbehaving run, then with the one worker a run due a second later: the pace kept."""
    await h.add(make_job("misbehaves", handler, timeout_seconds=5))
    await h.add(make_job("next", "noop", next_run_at=T0 + timedelta(seconds=1)))
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.advance(1)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    runs = await runs_by_name(h.store)
    assert runs["next"].status is Status.SUCCESS, "the next run still ran, on the one worker"
    assert h.engine.ledger.count(RunState.QUEUED, RunState.RUNNING) == 0
    return runs


def raising(exc: BaseException, *, sync: bool) -> Callable[[HandlerContext], object]:
    async def async_handler(ctx: HandlerContext) -> Result:
        raise exc

    def sync_handler(ctx: HandlerContext) -> Result:
        raise exc

    return sync_handler if sync else async_handler


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize(
    "exc",
    [SystemExit(3), KeyboardInterrupt(), GeneratorExit()],
    ids=["SystemExit", "KeyboardInterrupt", "GeneratorExit"],
)
async def test_a_handler_that_raises_systemexit_or_keyboardinterrupt_fails_its_run_only(
    make_engine: EngineFactory, exc: BaseException, sync: bool
) -> None:
    h = make_engine({"exits": raising(exc, sync=sync), "noop": noop}, workers=1)
    runs = await run_then_the_next(h, "exits")
    failed = runs["misbehaves"]
    assert (failed.status, failed.attempts) == (Status.FAILED, 1)
    assert failed.error is not None and failed.error.type == type(exc).__name__
    assert "tickd does not stop for a handler" in failed.error.message


async def test_a_handler_returning_100_mb_fails_its_run_saying_the_limit(
    make_engine: EngineFactory,
) -> None:
    async def huge(ctx: HandlerContext) -> Result:
        return {"blob": "x" * 100_000_000}

    async def big(ctx: HandlerContext) -> Result:
        return {"blob": "x" * 100_000}

    h = make_engine({"huge": huge, "big": big, "noop": noop}, workers=1)
    await h.add(make_job("big", "big"))
    runs = await run_then_the_next(h, "huge")
    failed = runs["misbehaves"]
    assert failed.status is Status.FAILED and failed.error is not None
    assert failed.error.type == "ResultTooLarge"
    assert f"{MAX_RESULT_CHARS:,}" in failed.error.message
    assert failed.result is None
    under_the_limit = runs["big"]
    assert under_the_limit.status is Status.SUCCESS, "past the stored size only: truncated"
    assert under_the_limit.result == {"truncated": True, "size_bytes": 100_012}


async def test_a_result_of_millions_of_empty_items_is_too_large_too(
    make_engine: EngineFactory,
) -> None:
    """Each item costs its characters in JSON (quotes and comma), so the count stops at the
    limit instead of walking ten million items on the event loop."""

    async def many(ctx: HandlerContext) -> Result:
        return {"items": [""] * 10_000_000, "nested": [[]] * 10}

    h = make_engine({"many": many, "noop": noop}, workers=1)
    failed = (await run_then_the_next(h, "many"))["misbehaves"]
    assert failed.status is Status.FAILED and failed.error is not None
    assert failed.error.type == "ResultTooLarge"


async def test_tasks_a_handler_leaves_behind_are_cancelled_and_logged(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    cancelled: list[str] = []
    spawned: list[asyncio.Task[None]] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    async def nested() -> None:
        spawned.append(asyncio.create_task(forever("grandchild")))
        await forever("child-2")

    async def leaky(ctx: HandlerContext) -> Result:
        spawned.append(asyncio.create_task(forever("child-1")))
        spawned.append(asyncio.create_task(nested()))
        awaited = asyncio.create_task(asyncio.sleep(0, result=2))  # seen to its end: no leftover
        return {"started": await awaited}

    h = make_engine({"leaky": leaky, "noop": noop}, workers=1)
    with caplog.at_level(logging.WARNING, logger="tickd.runner"):
        runs = await run_then_the_next(h, "leaky")
    assert runs["misbehaves"].result == {"started": 2}
    await asyncio.wait_for(asyncio.gather(*spawned, return_exceptions=True), WAIT)
    assert len(spawned) == 3 and all(task.cancelled() for task in spawned)
    assert {"child-1", "child-2"} <= set(cancelled)
    [line] = [r for r in caplog.records if r.getMessage() == "run.tasks_left_behind"]
    fields = line.tickd_fields  # type: ignore[attr-defined]
    assert (fields["job"], fields["tasks"]) == ("misbehaves", 3)


async def test_tasks_left_behind_by_a_handler_cancelled_at_its_deadline_are_cancelled_too(
    make_engine: EngineFactory,
) -> None:
    spawned: list[asyncio.Task[None]] = []

    async def slow_and_leaky(ctx: HandlerContext) -> Result:
        spawned.append(asyncio.create_task(asyncio.Event().wait()))  # type: ignore[arg-type]
        await asyncio.Event().wait()
        return None

    h = make_engine({"slow": slow_and_leaky, "noop": noop}, workers=1)
    await h.add(make_job("slow", "slow", timeout_seconds=0.05))
    await asyncio.wait_for(h.engine.drain(), WAIT)
    [run] = (await runs_by_name(h.store)).values()
    assert run.status is Status.TIMEOUT
    await asyncio.wait_for(asyncio.gather(*spawned, return_exceptions=True), WAIT)
    assert all(task.cancelled() for task in spawned)
