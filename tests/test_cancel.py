"""Cancelling a run: the instance running it finds the request within a tick, the handler sees
it, and the record says `cancelled` and who asked; nothing retries it and no dead letter is
opened, the job moves on as after any run."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from tests.conftest import T0, EngineFactory, Harness, make_job
from tests.test_engine import WAIT
from tickd.scheduler.model import CancelRequest, Execution, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import ExecutionQuery


async def executions_of(h: Harness, job_id: str) -> list[Execution]:
    return await h.store.list_executions(ExecutionQuery(job_id=job_id, limit=100))


async def running_execution(h: Harness, job_id: str) -> Execution:
    [run] = await executions_of(h, job_id)
    assert run.status is Status.RUNNING
    return run


def asked_by_ops(execution_id: str, reason: str = "stuck on a dead upstream") -> CancelRequest:
    return CancelRequest(
        execution_id=execution_id, requested_by="ops", requested_at=T0, reason=reason
    )


async def test_a_cancelled_async_handler_sees_cancelled_error_and_the_record_says_who_asked(
    make_engine: EngineFactory,
) -> None:
    started, saw_cancel = asyncio.Event(), asyncio.Event()

    async def stuck(ctx: HandlerContext) -> Result:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            saw_cancel.set()
            raise
        return None

    h = make_engine({"stuck": stuck})
    job = await h.add(make_job("stuck", "stuck", timeout_seconds=3600, max_retries=3))
    h.engine.start()
    await h.engine.tick()
    await asyncio.wait_for(started.wait(), WAIT)
    run = await running_execution(h, job.id)

    await h.store.request_cancel(asked_by_ops(run.id))
    await h.engine.tick()  # the tick finds the request and cancels the handler
    await asyncio.wait_for(h.engine.settled(), WAIT)

    assert saw_cancel.is_set()
    [ended] = await executions_of(h, job.id)
    assert ended.status is Status.CANCELLED
    assert ended.error is not None
    assert (ended.error.type, ended.error.message) == (
        "Cancelled",
        "cancelled by ops: stuck on a dead upstream",
    )
    assert ended.attempts == 1, "not retried, though the job allows 3 retries"
    assert ended.dead_letter is None
    assert await h.store.count_dead_letters() == {}
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == T0 + timedelta(seconds=60), "the schedule moves on"


async def test_a_run_cancelled_while_queued_never_starts(make_engine: EngineFactory) -> None:
    first_started, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def gated(ctx: HandlerContext) -> Result:
        calls.append(ctx.job_name)
        first_started.set()
        await release.wait()
        return None

    h = make_engine({"gated": gated}, workers=1)
    busy = await h.add(make_job("busy", "gated", timeout_seconds=3600))
    waiting = await h.add(make_job("waiting", "gated", timeout_seconds=3600))
    h.engine.start()
    await h.engine.tick()  # both recorded; one worker takes the first, the second waits
    await asyncio.wait_for(first_started.wait(), WAIT)
    [queued] = [job for job in (busy, waiting) if job.name not in calls]

    await h.store.request_cancel(asked_by_ops((await running_execution(h, queued.id)).id, ""))
    await h.engine.tick()
    release.set()
    await asyncio.wait_for(h.engine.settled(), WAIT)

    assert calls == [next(j.name for j in (busy, waiting) if j is not queued)]
    [ended] = await executions_of(h, queued.id)
    assert ended.status is Status.CANCELLED
    assert ended.error is not None and ended.error.message == "cancelled by ops"
    assert ended.attempts == 0, "its handler never ran"


async def test_a_cancelled_sync_handler_is_recorded_cancelled_once_it_returns(
    make_engine: EngineFactory,
) -> None:
    started, release = threading.Event(), threading.Event()

    def blocking(ctx: HandlerContext) -> Result:
        started.set()
        release.wait(WAIT)  # a thread cannot be interrupted: it ends when it returns
        return {"done": True}

    h = make_engine({"blocking": blocking})
    job = await h.add(make_job("blocking", "blocking", timeout_seconds=3600))
    h.engine.start()
    await h.engine.tick()
    assert await asyncio.to_thread(started.wait, WAIT)
    run = await running_execution(h, job.id)

    await h.store.request_cancel(asked_by_ops(run.id, "wrong params"))
    await h.engine.tick()
    assert (await running_execution(h, job.id)).status is Status.RUNNING, "still on its thread"
    release.set()
    await asyncio.wait_for(h.engine.settled(), WAIT)

    [ended] = await executions_of(h, job.id)
    assert ended.status is Status.CANCELLED
    assert ended.error is not None and ended.error.message == "cancelled by ops: wrong params"


async def test_a_cancel_request_for_another_run_changes_nothing(
    make_engine: EngineFactory,
) -> None:
    async def quick(ctx: HandlerContext) -> Result:
        return None

    h = make_engine({"quick": quick})
    job = await h.add(make_job("quick", "quick"))
    await h.store.request_cancel(asked_by_ops("someone-elses-run"))
    await h.engine.drain()
    [ended] = await executions_of(h, job.id)
    assert ended.status is Status.SUCCESS


async def test_a_cancelled_sync_handler_that_then_fails_is_not_retried(
    make_engine: EngineFactory,
) -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def fails_when_released(ctx: HandlerContext) -> Result:
        calls.append(ctx.attempt)
        started.set()
        release.wait(WAIT)
        raise RuntimeError("upstream refused the half-done export")

    h = make_engine({"fails": fails_when_released})
    job = await h.add(make_job("export", "fails", timeout_seconds=3600, max_retries=3))
    h.engine.start()
    await h.engine.tick()
    assert await asyncio.to_thread(started.wait, WAIT)
    await h.store.request_cancel(asked_by_ops((await running_execution(h, job.id)).id))
    await h.engine.tick()
    release.set()
    await asyncio.wait_for(h.engine.settled(), WAIT)

    assert calls == [1], "no second attempt after the cancel"
    [ended] = await executions_of(h, job.id)
    assert (ended.status, ended.attempts, ended.dead_letter) == (Status.CANCELLED, 1, None)
