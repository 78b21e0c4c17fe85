"""The engine end to end on the embedded store, with a fake clock and drain mode."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import T0, EngineFactory, make_job
from tests.fixtures.due_reads import spy_on_due_reads
from tickd.scheduler.lock import lock_key
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.model import (
    CronSchedule,
    Execution,
    IntervalSchedule,
    Job,
    Misfire,
    MisfirePolicy,
    OnceSchedule,
    Priority,
    Schedule,
    Status,
    new_id,
)
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.api import HandlerContext, Result, handler
from tickd.scheduler.ports.backends import ExecutionQuery, JobChange, JobQuery, RunRequest, Store
from tickd.scheduler.ports.clock import FakeClock
from tickd.scheduler.ports.store_operations import STORE_OPERATIONS
from tickd.scheduler.run.claim import CLAIM_LOCK_SECONDS
from tickd.scheduler.run.ledger import RECORDED_AHEAD_SECONDS
from tickd.scheduler.run.states import RunState
from tickd.scheduler.store.postgresql import PostgresStore
from tickd.scheduler.store.sqlite import SQLiteStore

# Bounds every wait on a real event in these tests.
WAIT = 5.0


async def executions(store: Store, job_id: str | None = None) -> list[Execution]:
    return list(reversed(await store.list_executions(ExecutionQuery(job_id=job_id, limit=1000))))


async def noop(ctx: HandlerContext) -> Result:
    return {"attempt": ctx.attempt}


async def test_a_due_job_runs_once_and_advances(make_engine: EngineFactory) -> None:
    h = make_engine({"noop": noop})
    job = await h.add(make_job(schedule=CronSchedule(expr="0 * * * * *"), next_run_at=T0))

    await h.engine.drain()

    [run] = await executions(h.store)
    assert (run.status, run.attempts, run.result) == (Status.SUCCESS, 1, {"attempt": 1})
    assert run.scheduled_at == T0 and run.owner == "test-instance" and run.token == 1
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == T0 + timedelta(minutes=1)
    await h.engine.relay.flush_once()  # the outbox, to the publisher
    assert h.events.types(job.id) == ["job.execution.started", "job.execution.success"]

    await h.engine.drain()  # nothing is due until the clock moves
    assert len(await executions(h.store)) == 1
    h.clock.advance(60)
    await h.engine.drain()
    assert [e.scheduled_at for e in await executions(h.store)] == [T0, T0 + timedelta(minutes=1)]


@pytest.mark.parametrize(
    "schedule",
    [CronSchedule(expr="0 * * * * *"), IntervalSchedule(every_seconds=3600), OnceSchedule(at=T0)],
    ids=["cron", "interval", "once"],
)
async def test_a_job_edited_while_it_runs_runs_that_occurrence_once(
    make_engine: EngineFactory, schedule: Schedule
) -> None:
    """Ops raise a running job's retries: the run still moves the job on when it ends, or the
    occurrence that ran is due again at once and runs a second time (a second webhook)."""
    started, gate = asyncio.Event(), asyncio.Event()

    async def gated(ctx: HandlerContext) -> Result:
        started.set()
        await gate.wait()
        return None

    h = make_engine({"gated": gated})
    job = await h.add(make_job(handler="gated", schedule=schedule, next_run_at=T0))
    h.engine.start()
    await h.engine.tick()
    await asyncio.wait_for(started.wait(), WAIT)
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is not None
    change = JobChange(
        id=new_id(),
        job_id=job.id,
        job_name=job.name,
        at=T0,
        actor="ops",
        action="update",
        changes={"max_retries": {"from": 0, "to": 5}},
    )
    edited = dataclasses.replace(stored, max_retries=5, params={"edited": True})
    assert await h.store.replace_job(edited, stored.revision, change)
    gate.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.advance(1)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    assert [(e.scheduled_at, e.status) for e in await executions(h.store)] == [(T0, Status.SUCCESS)]
    after = await h.store.get_job(job.id)
    assert after is not None and after.max_retries == 5
    assert after.next_run_at != T0


async def test_the_handler_gets_its_context(make_engine: EngineFactory) -> None:
    seen: list[HandlerContext] = []

    async def capture(ctx: HandlerContext) -> Result:
        seen.append(ctx)
        return None

    h = make_engine({"capture": capture})
    job = await h.add(make_job("ctx", "capture", params={"k": "v"}, timeout_seconds=30))
    await h.engine.drain()
    [ctx] = seen
    assert (ctx.job_id, ctx.job_name, ctx.params, ctx.attempt) == (job.id, "ctx", {"k": "v"}, 1)
    assert ctx.scheduled_at == T0
    assert ctx.deadline == T0 + timedelta(seconds=30)
    assert ctx.idempotency_key == f"{job.id}:{T0.isoformat()}"
    # Every field of the context is set.
    assert set(vars(ctx)) == {field.name for field in dataclasses.fields(HandlerContext)}


async def test_errors_are_retried_with_backoff_inside_the_deadline(
    make_engine: EngineFactory,
) -> None:
    attempts: list[tuple[int, float, str]] = []

    async def flaky(ctx: HandlerContext) -> Result:
        attempts.append((ctx.attempt, (ctx.clock.now() - T0).total_seconds(), ctx.idempotency_key))
        if ctx.attempt < 4:
            raise ConnectionError("upstream down")
        return {"ok": True}

    h = make_engine({"flaky": flaky})
    job = await h.add(make_job("flaky", "flaky", max_retries=5, timeout_seconds=60))
    await h.engine.drain()

    [run] = await executions(h.store)
    assert (run.status, run.attempts) == (Status.SUCCESS, 4)
    # Waits of 1, 2 and 4 seconds between the attempts, on the (fake) clock.
    assert [a[1] for a in attempts] == [0, 1, 3, 7]
    assert len({a[2] for a in attempts}) == 1, "one idempotency key for every attempt"
    assert h.engine.metrics.retries.labels("flaky")._value.get() == 3
    assert h.observed.of(job.name) == [
        ("recorded", "running"),
        ("started", "lag=0"),
        ("retrying", "attempt=1"),
        ("retrying", "attempt=2"),
        ("retrying", "attempt=3"),
        ("finished", "success"),
    ], "each step of the run is announced once, in order"


async def test_retries_stop_at_max_retries_with_the_last_error(make_engine: EngineFactory) -> None:
    async def broken(ctx: HandlerContext) -> Result:
        raise ValueError(f"bad input on attempt {ctx.attempt}")

    h = make_engine({"broken": broken})
    await h.add(make_job("broken", "broken", max_retries=2))
    await h.engine.drain()
    [run] = await executions(h.store)
    assert (run.status, run.attempts) == (Status.FAILED, 3)
    assert run.error is not None
    assert (run.error.type, run.error.message) == ("ValueError", "bad input on attempt 3")


async def test_retries_never_outlast_the_deadline(make_engine: EngineFactory) -> None:
    async def broken(ctx: HandlerContext) -> Result:
        raise ValueError("nope")

    h = make_engine({"broken": broken})
    await h.add(make_job("broken", "broken", max_retries=10, timeout_seconds=10))
    await h.engine.drain()
    [run] = await executions(h.store)
    # 0 s, +1, +2, +4 = 7 s; the next wait (8 s) would end past the 10 s deadline.
    assert (run.status, run.attempts) == (Status.FAILED, 4)


async def test_a_handler_past_its_deadline_is_cancelled_and_times_out(
    make_engine: EngineFactory,
) -> None:
    cancelled = asyncio.Event()

    async def hang(ctx: HandlerContext) -> Result:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return None

    h = make_engine({"hang": hang, "noop": noop})
    await h.add(make_job("hang", "hang", timeout_seconds=0.05, max_retries=3))
    await h.engine.drain()
    [run] = await executions(h.store)
    assert (run.status, run.attempts) == (Status.TIMEOUT, 1), "a timeout is not retried"
    assert run.error is not None and run.error.type == "Timeout"
    assert cancelled.is_set()


async def test_a_blocking_sync_handler_runs_in_a_thread_and_cannot_stall_the_loop(
    make_engine: EngineFactory,
) -> None:
    release = threading.Event()
    threads: list[str] = []

    def blocking(ctx: HandlerContext) -> Result:
        threads.append(threading.current_thread().name)
        release.wait(WAIT)  # blocks its thread, never the event loop
        return None

    h = make_engine({"blocking": blocking, "noop": noop}, workers=2)
    await h.add(make_job("blocking", "blocking", timeout_seconds=0.1))
    quick = await h.add(make_job("quick", "noop"))
    started = time.monotonic()
    await h.engine.drain()
    release.set()
    assert time.monotonic() - started < WAIT, "the loop went on while the thread blocked"
    by_name = {e.job_name: e.status for e in await executions(h.store)}
    assert by_name == {"blocking": Status.TIMEOUT, "quick": Status.SUCCESS}
    assert threads and threads[0].startswith("tickd-handler")
    assert quick.id


async def test_a_handler_that_ignores_cancellation_does_not_keep_its_worker(
    make_engine: EngineFactory,
) -> None:
    finish = asyncio.Event()

    async def stubborn(ctx: HandlerContext) -> Result:
        while not finish.is_set():
            try:
                await asyncio.wait_for(finish.wait(), WAIT)
            except asyncio.CancelledError:
                continue  # swallows the cancellation: a badly written handler
        return None

    h = make_engine({"stubborn": stubborn, "noop": noop}, workers=1)
    await h.add(make_job("a-stubborn-job", "stubborn", timeout_seconds=0.05))
    await h.add(make_job("after", "noop", next_run_at=T0 + timedelta(seconds=1)))
    await h.engine.drain()
    h.clock.advance(1)
    await h.engine.drain()  # the single worker is free again
    finish.set()
    by_name = {e.job_name: e.status for e in await executions(h.store)}
    assert by_name == {"a-stubborn-job": Status.TIMEOUT, "after": Status.SUCCESS}
    # Counted by handler, never by job name (which would make a series per job).
    stuck = h.engine.metrics.registry.get_sample_value
    assert stuck("tickd_stuck_handlers_total", {"handler": "stubborn"}) == 1
    assert stuck("tickd_stuck_handlers_total", {"handler": "a-stubborn-job"}) is None
    assert ("stuck", "stubborn") in h.observed.of("a-stubborn-job")


async def test_a_result_that_is_not_a_dict_fails_the_run(make_engine: EngineFactory) -> None:
    async def wrong(ctx: HandlerContext) -> Result:
        return "done"  # type: ignore[return-value]

    h = make_engine({"wrong": wrong})
    await h.add(make_job("wrong", "wrong"))
    await h.engine.drain()
    [run] = await executions(h.store)
    assert run.status is Status.FAILED
    assert run.error is not None and run.error.type == "BadResult"


async def test_secrets_in_results_and_errors_are_masked(make_engine: EngineFactory) -> None:
    async def leaky(ctx: HandlerContext) -> Result:
        if ctx.params.get("fail"):
            raise RuntimeError("cannot reach redis://tickd:hunter2@cache:6379/0")
        return {"api_key": "sk-live-123", "status": 200}

    h = make_engine({"leaky": leaky})
    await h.add(make_job("ok", "leaky"))
    await h.add(make_job("fails", "leaky", params={"fail": True}))
    await h.engine.drain()
    runs = {e.job_name: e for e in await executions(h.store)}
    assert runs["ok"].result == {"api_key": "***", "status": 200}
    assert runs["fails"].error is not None
    assert "hunter2" not in runs["fails"].error.message
    assert "redis://tickd:***@cache" in runs["fails"].error.message
    await h.engine.relay.flush_once()  # the outbox, to the publisher
    assert "hunter2" not in repr(h.events.events) and "sk-live" not in repr(h.events.events)


async def test_secrets_of_the_params_echoed_back_are_masked(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A far end that quotes the job's own credentials back: in the result, in the error of
    each attempt (logged on retry), on the job, in events."""
    secrets = ("s3cret-pw", "tok-123", "vendor-key-9", "sk-declared-1")

    @handler(secret_params={"vendor"})
    async def echo(ctx: HandlerContext) -> Result:
        said = f"hello alice, your password is s3cret-pw, token tok-123, keys {ctx.params}"
        if ctx.params["fail"]:
            raise RuntimeError(said + " " + "x" * 3000)  # past the cut of an error message
        return {"body": said, "tok-123": True}

    params = {
        "url": "https://alice:s3cret-pw@example.com/hook?token=tok-123",
        "headers": {"X-Api-Key": "vendor-key-9"},
        "vendor": "sk-declared-1",
    }
    h = make_engine({"echo": echo})
    ok = await h.add(make_job("ok", "echo", params={**params, "fail": False}))
    await h.add(make_job("fails", "echo", params={**params, "fail": True}, max_retries=1))
    with caplog.at_level(logging.INFO):
        await h.engine.drain()

    runs = {e.job_name: e for e in await executions(h.store)}
    assert runs["ok"].result is not None and runs["fails"].error is not None
    assert "hello alice, your password is ***, token ***" in runs["ok"].result["body"]
    assert runs["ok"].result["***"] is True
    assert runs["fails"].error.message.startswith("hello alice, your password is ***")
    job = await h.store.get_job(ok.id)
    last = [j.last_execution for j in await h.store.list_jobs(JobQuery())]
    await h.engine.relay.flush_once()  # the outbox, to the publisher
    seen = [runs, h.events.events, caplog.text, last]
    for secret in secrets:
        assert secret not in repr(seen), secret
    assert job is not None and job.params["url"] == params["url"], "the job itself keeps them"


async def test_an_unknown_handler_is_skipped_and_the_schedule_moves_on(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({})
    job = await h.add(make_job("orphan", "gone-handler"))
    await h.engine.drain()
    [run] = await executions(h.store)
    assert run.status is Status.SKIPPED
    assert run.error is not None and run.error.type == "UnknownHandler"
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.next_run_at == T0 + timedelta(seconds=60)
    assert stored.enabled


async def test_a_once_job_runs_once_then_is_disabled(make_engine: EngineFactory) -> None:
    h = make_engine({"noop": noop})
    job = await h.add(make_job("once", schedule=OnceSchedule(at=T0), next_run_at=T0))
    await h.engine.drain()
    h.clock.advance(3600)
    await h.engine.drain()
    assert [e.status for e in await executions(h.store)] == [Status.SUCCESS]
    stored = await h.store.get_job(job.id)
    assert stored is not None and (stored.enabled, stored.next_run_at) == (False, None)


async def test_most_urgent_first_when_the_batch_is_smaller_than_the_backlog(
    make_engine: EngineFactory,
) -> None:
    order: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        order.append(ctx.job_name)
        return None

    h = make_engine({"record": record}, batch_size=1, workers=1, queue_size=1)
    # All due for less than the starvation bound (60 s), past which age would come first.
    await h.add(
        make_job("low", "record", priority=Priority.LOW, next_run_at=T0 - timedelta(seconds=50))
    )
    await h.add(make_job("normal", "record", next_run_at=T0 - timedelta(seconds=40)))
    await h.add(make_job("critical", "record", priority=Priority.CRITICAL, next_run_at=T0))
    await h.engine.drain()
    assert order == ["critical", "normal", "low"]


async def test_running_jobs_are_not_fetched_again_so_they_cannot_starve_others(
    make_engine: EngineFactory,
) -> None:
    release = asyncio.Event()
    ran: list[str] = []

    async def long(ctx: HandlerContext) -> Result:
        await release.wait()
        return None

    async def short(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    h = make_engine({"long": long, "short": short}, workers=101, batch_size=100)
    for i in range(100):
        await h.add(
            make_job(
                f"long-{i:03}", "long", timeout_seconds=3600, next_run_at=T0 - timedelta(seconds=10)
            )
        )
    await h.add(make_job("the-101st", "short", next_run_at=T0))
    h.engine.start()

    assert (await h.engine.tick()).claimed == 100  # a full batch of the long ones, all running
    next_tick = await h.engine.tick()
    assert (next_tick.fetched, next_tick.claimed) == (1, 1)  # it sees only the 101st
    await asyncio.wait_for(_until(lambda: ran == ["the-101st"]), WAIT)
    assert (await h.engine.tick()).fetched == 0
    await asyncio.wait_for(
        _until(lambda: h.engine.ledger.count(RunState.RUNNING) == 100), WAIT
    )  # its end written
    release.set()
    await asyncio.wait_for(h.engine.settled(), WAIT)
    statuses = [e.status for e in await executions(h.store)]
    assert statuses.count(Status.SUCCESS) == 101


async def crashed_mid_run(make_engine: EngineFactory) -> Job:
    """An instance ("crashed") that claimed job "work" (timeout 60 s, lease margin 30 s) and
    from then on writes nothing: its handler hangs as a dead process would, until the end of
    the test."""

    async def hang(ctx: HandlerContext) -> Result:
        await asyncio.Event().wait()
        return None

    crashed = make_engine({"work": hang}, instance_id="crashed", lease_margin_seconds=30)
    # A retry left: the run its instance's death abandons runs again.
    job = await crashed.add(make_job("work", "work", timeout_seconds=60, max_retries=1))
    crashed.engine.start()
    assert (await crashed.engine.tick()).claimed == 1
    return job


async def died_after_beating(make_engine: EngineFactory, **overrides: Any) -> Job:
    """An instance ("crashed") that beat at T0, claimed and started job "work" (timeout an
    hour) and then beats no more, as a dead process: only its heartbeat's lapse frees the job."""

    async def hang(ctx: HandlerContext) -> Result:
        await asyncio.Event().wait()
        return None

    crashed = make_engine({"work": hang}, instance_id="crashed", **overrides)
    # A retry left: the run its instance's death abandons runs again.
    job = await crashed.add(make_job("work", "work", timeout_seconds=3600, max_retries=1))
    await crashed.engine.heartbeat.beat(T0)
    crashed.engine.start()
    assert (await crashed.engine.tick()).claimed == 1
    return job


async def test_a_crashed_instance_leaves_an_abandoned_execution_and_the_job_runs_again(
    make_engine: EngineFactory,
) -> None:
    job = await crashed_mid_run(make_engine)

    survivor = make_engine({"work": noop}, instance_id="survivor")
    await survivor.engine.drain()
    assert [e.status for e in await executions(survivor.store)] == [Status.RUNNING]

    survivor.clock.advance(60 + 30 + 1)  # past timeout + lease margin
    await survivor.engine.drain()

    first, second = await executions(survivor.store, job.id)
    assert (first.status, first.owner) == (Status.ABANDONED, "crashed")
    assert first.error is not None and first.error.type == "LeaseExpired"
    assert (second.status, second.owner, second.scheduled_at) == (Status.SUCCESS, "survivor", T0)
    assert second.token == 2, "the new run holds a newer fencing token"
    assert survivor.engine.metrics.leases_reaped._value.get() == 1
    await survivor.engine.relay.flush_once()  # the outbox, to the publisher
    assert "job.execution.abandoned" in survivor.events.types(job.id)


async def test_a_triggered_run_whose_instance_crashed_runs_again_on_another(
    make_engine: EngineFactory,
) -> None:
    """A trigger (as a retry, a re-drive, a backfill) stays queued while it runs: when the
    instance running it dies, the reaper frees the job and the survivor runs it. Before, it
    was taken off the queue at its claim, and the crash lost it for good: one `abandoned`
    execution, and a re-drive's dead letter stuck in `redriving`."""

    async def hang(ctx: HandlerContext) -> Result:
        await asyncio.Event().wait()
        return None

    crashed = make_engine({"work": hang}, instance_id="crashed", lease_margin_seconds=30)
    later = T0 + timedelta(days=1)  # not due by its schedule: only the trigger runs it
    job = await crashed.add(
        make_job("work", "work", timeout_seconds=60, next_run_at=later, max_retries=1)
    )
    trigger = RunRequest(
        id=new_id(), job_id=job.id, scheduled_at=T0, reason="trigger", not_before=T0, created_at=T0
    )
    await crashed.store.insert_run_requests([trigger])
    crashed.engine.start()
    assert (await crashed.engine.tick()).claimed == 1
    assert await crashed.store.count_pending_requests(job.id, reason="trigger") == 0

    survivor = make_engine({"work": noop}, instance_id="survivor")
    survivor.clock.advance(60 + 30 + 1)  # past timeout + lease margin
    await asyncio.wait_for(survivor.engine.drain(), WAIT)
    await asyncio.wait_for(survivor.engine.drain(), WAIT)

    ran = [(e.owner, e.status, e.scheduled_at) for e in await executions(survivor.store, job.id)]
    assert ran == [("crashed", Status.ABANDONED, T0), ("survivor", Status.SUCCESS, T0)]
    assert await survivor.store.due_run_requests(later, 10) == [], "and once only"


async def test_a_crashed_instance_whose_heartbeat_lapsed_is_taken_over_in_seconds(
    make_engine: EngineFactory,
) -> None:
    job = await died_after_beating(make_engine)

    survivor = make_engine({"work": noop}, instance_id="survivor")
    await survivor.engine.heartbeat.beat(T0)
    survivor.clock.advance(5)
    assert await survivor.engine.heartbeat.beat(survivor.clock.now()) == 0, "within its timeout"
    survivor.clock.advance(6)  # 11 s without a beat: past heartbeat_timeout_seconds (10)
    assert await survivor.engine.heartbeat.beat(survivor.clock.now()) == 1
    await survivor.engine.drain()  # an hour before the lease would have expired

    first, second = await executions(survivor.store, job.id)
    assert (first.status, first.owner) == (Status.ABANDONED, "crashed")
    assert (second.status, second.owner, second.scheduled_at) == (Status.SUCCESS, "survivor", T0)


async def test_a_dispatcher_waiting_on_a_slow_store_keeps_beating(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its runs go on while its tick waits (on a slow store, for room in the pool): the other
    instances must not take it for dead, so its heartbeat does not wait for the tick."""
    h = make_engine({"noop": noop}, tick_seconds=0.01)
    await h.add(make_job("due", "noop"))
    stuck, release = asyncio.Event(), asyncio.Event()

    async def slow_due_jobs(limit: int, read: Awaitable[list[Job]]) -> list[Job]:
        stuck.set()
        await release.wait()
        return await read

    spy_on_due_reads(monkeypatch, h.store, slow_due_jobs)
    stop = asyncio.Event()
    running = asyncio.create_task(h.engine.run(stop))
    try:
        await asyncio.wait_for(stuck.wait(), WAIT)
        instance = h.engine.settings.instance_id

        async def beat_after(before: datetime | None) -> datetime:
            while (beat := (await h.store.instances()).get(instance)) in (None, before):  # noqa: ASYNC110 - polled under a bound
                await asyncio.sleep(0.005)
            assert beat is not None
            return beat

        beat = await asyncio.wait_for(beat_after(None), WAIT)
        for _ in range(5):  # 15 s of the tick's wait, past the heartbeat's timeout
            h.clock.advance(h.engine.settings.heartbeat_seconds)
            beat = await asyncio.wait_for(beat_after(beat), WAIT)
    finally:
        release.set()
        stop.set()
        await asyncio.wait_for(running, WAIT)


async def test_runs_stranded_by_a_crash_run_before_the_rest_of_the_backlog(
    make_engine: EngineFactory,
) -> None:
    """The runs a dead instance had in flight have waited longest of all: once given back they
    go first, not after a backlog that is more urgent and older by the due order."""

    async def hang(ctx: HandlerContext) -> Result:
        await asyncio.Event().wait()
        return None

    crashed = make_engine({"work": hang}, instance_id="crashed", batch_size=3)
    stranded = [
        await crashed.add(make_job(f"stranded-{i}", "work", max_retries=1)) for i in range(3)
    ]
    await crashed.engine.heartbeat.beat(T0)
    crashed.engine.start()
    assert (await crashed.engine.tick()).claimed == 3  # then it beats no more, as a dead process

    ran: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    survivor = make_engine({"work": record}, instance_id="survivor", workers=2, batch_size=2)
    for i in range(10):  # due before the stranded ones, and critical: first by the due order
        early = T0 - timedelta(seconds=5)
        await survivor.add(
            make_job(f"backlog-{i}", "work", priority=Priority.CRITICAL, next_run_at=early)
        )
    await survivor.engine.heartbeat.beat(T0)
    for seconds in (5, 6):  # 11 s in all: past heartbeat_timeout_seconds (10)
        survivor.clock.advance(seconds)
        taken_over = await survivor.engine.heartbeat.beat(survivor.clock.now())
    assert taken_over == 3
    await survivor.engine.drain()

    assert sorted(ran[:3]) == [job.name for job in stranded]
    assert sorted(ran[3:]) == [f"backlog-{i}" for i in range(10)]


async def test_a_lapse_the_heartbeat_saw_makes_the_next_tick_reap_at_once(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """The reaper looks once a heartbeat; another instance found dead is not left to it,
    or the dead one's runs would wait up to a tick more to be given back."""

    job = await died_after_beating(make_engine)

    survivor = make_engine({"work": noop}, instance_id="survivor", tick_seconds=60)
    await survivor.engine.heartbeat.beat(T0)
    survivor.engine.start()
    await survivor.engine.tick()  # reaped once: the next look is a minute away
    for seconds in (5, 6):  # 11 s in all: past heartbeat_timeout_seconds (10)
        clock.advance(seconds)
        taken_over = await survivor.engine.heartbeat.beat(clock.now())
    assert taken_over == 1
    survivor.engine.heartbeat.lapsed.set()  # as its beating task does (tests/test_heartbeat.py)
    await survivor.engine.tick()
    first = (await executions(survivor.store, job.id))[0]
    assert first.status is Status.ABANDONED, "reaped at the tick after the lapse"


async def test_the_lock_a_dead_instance_held_does_not_keep_its_job_from_the_survivor(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """Instances share the lock service (Redis): the dead one's lock on the job lives through
    the run's whole timeout, an hour here. Taking the job over must not wait for it."""

    shared = MemoryLock(monotonic=lambda: clock.now().timestamp())
    job = await died_after_beating(make_engine, lock=shared)

    survivor = make_engine({"work": noop}, instance_id="survivor", lock=shared)
    await survivor.engine.heartbeat.beat(T0)
    for seconds in (5, 6):  # 11 s in all: past heartbeat_timeout_seconds (10)
        clock.advance(seconds)
        taken_over = await survivor.engine.heartbeat.beat(clock.now())
    assert taken_over == 1
    await survivor.engine.drain()

    first, second = await executions(survivor.store, job.id)
    assert (first.status, second.status, second.owner) == (
        Status.ABANDONED,
        Status.SUCCESS,
        "survivor",
    )
    assert survivor.engine.metrics.lock_contention._value.get() == 0


async def test_a_run_fenced_off_by_a_newer_claim_does_not_advance_the_job(
    make_engine: EngineFactory,
) -> None:
    gate, started = asyncio.Event(), asyncio.Event()

    async def slow(ctx: HandlerContext) -> Result:
        started.set()
        await gate.wait()
        return None

    old = make_engine({"work": slow}, instance_id="old", lease_margin_seconds=1)
    job = await old.add(make_job("work", "work", timeout_seconds=3600, max_retries=1))
    old.engine.start()
    await old.engine.tick()
    await asyncio.wait_for(started.wait(), WAIT)
    old.clock.advance(3600 + 2)  # the old lease is past its expiry (a long GC pause, say)
    new = make_engine({"work": noop}, instance_id="new")
    await new.engine.drain()  # reaps the expired lease and runs the occurrence
    gate.set()
    await asyncio.wait_for(old.engine.settled(), WAIT)

    runs = await executions(old.store, job.id)
    assert [(e.owner, e.status) for e in runs] == [("old", Status.SUCCESS), ("new", Status.SUCCESS)]
    assert old.engine.metrics.fenced._value.get() == 1
    stored = await old.store.get_job(job.id)
    assert stored is not None and stored.last_execution is not None
    assert stored.last_execution.execution_id == runs[1].id


def skip_where_the_claim_is_the_lock(store: Store) -> None:
    """Runs on such a store take no lock from the lock service (tests/test_lease_lock.py)."""
    if store.claim_is_the_lock:
        pytest.skip("the store's claim is the lock: runs take none from the lock service")


async def test_a_job_locked_by_another_runner_is_skipped(make_engine: EngineFactory) -> None:
    h = make_engine({"noop": noop})
    skip_where_the_claim_is_the_lock(h.store)
    job = await h.add(make_job())
    lock = h.engine.ports.lock
    assert await lock.acquire_many({lock_key(job.id): 3600}, "someone-else") == {lock_key(job.id)}
    await h.engine.drain()
    assert await executions(h.store) == []
    assert h.engine.metrics.lock_contention._value.get() == 1
    await lock.release_many([lock_key(job.id)], "someone-else")
    await h.engine.drain()
    assert [e.status for e in await executions(h.store)] == [Status.SUCCESS]


async def test_locks_of_an_instance_killed_before_its_claim_expire_in_seconds_not_a_timeout(
    make_engine: EngineFactory, store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between its locks and its claim, an instance leaves no lease for a takeover to
    end: the locks it took must not keep the job from everyone for the run's whole timeout."""
    skip_where_the_claim_is_the_lock(store)
    lock = MemoryLock(monotonic=lambda: clock.now().timestamp())  # one lock service for both
    killed = make_engine({"noop": noop}, lock=lock, instance_id="killed")
    claim_jobs = store.claim_jobs
    claiming, never = asyncio.Event(), asyncio.Event()

    async def killed_mid_claim(*args: Any, **kwargs: Any) -> list[Job]:
        claiming.set()
        await never.wait()  # as if the process died here: nothing written, the locks held
        raise AssertionError("unreachable")

    job = await killed.add(make_job("hourly", timeout_seconds=3600))
    monkeypatch.setattr(store, "claim_jobs", killed_mid_claim)
    killed.engine.start()
    dead = asyncio.create_task(killed.engine.tick())
    try:
        await asyncio.wait_for(claiming.wait(), WAIT)
        monkeypatch.setattr(store, "claim_jobs", claim_jobs)
        survivor = make_engine({"noop": noop}, lock=lock, instance_id="survivor")
        await survivor.engine.drain()
        assert await executions(store) == [], "locked, for the claim"
        clock.advance(CLAIM_LOCK_SECONDS)
        await survivor.engine.drain()
        [run] = await executions(store, job.id)
        assert (run.status, run.owner) == (Status.SUCCESS, "survivor")
    finally:
        dead.cancel()


async def test_a_claimed_runs_lock_lives_through_its_timeout(make_engine: EngineFactory) -> None:
    gate = asyncio.Event()

    async def held(ctx: HandlerContext) -> Result:
        await gate.wait()
        return None

    h = make_engine({"held": held})
    skip_where_the_claim_is_the_lock(h.store)
    job = await h.add(make_job("long", "held", timeout_seconds=3600))
    h.engine.start()
    try:
        assert (await h.engine.tick()).claimed == 1
        h.clock.advance(CLAIM_LOCK_SECONDS + 1)
        key = lock_key(job.id)
        assert await h.engine.ports.lock.acquire_many({key: 1.0}, "another") == set()
        h.clock.advance(3600)
        assert await h.engine.ports.lock.acquire_many({key: 1.0}, "another") == {key}
    finally:
        gate.set()


async def test_a_handler_concurrency_limit_leaves_workers_for_others(
    make_engine: EngineFactory,
) -> None:
    release = asyncio.Event()
    running: set[str] = set()
    most = 0

    @handler(max_concurrency=2)
    async def limited(ctx: HandlerContext) -> Result:
        nonlocal most
        running.add(ctx.job_name)
        most = max(most, len(running))
        await release.wait()
        running.discard(ctx.job_name)
        return None

    h = make_engine({"limited": limited, "noop": noop}, workers=10)
    for i in range(6):
        await h.add(make_job(f"burst-{i}", "limited"))
    await h.add(make_job("other", "noop", next_run_at=T0 + timedelta(microseconds=1)))
    h.engine.start()
    h.clock.advance(1)
    assert (await h.engine.tick()).claimed == 3  # two of the burst, and the other job
    assert (await h.engine.tick()).fetched == 0  # the burst's handler is at its limit
    await asyncio.wait_for(_until(lambda: len(running) == 2), 5)  # both at once, no third
    release.set()
    await h.engine.drain()
    assert most == 2
    assert len([e for e in await executions(h.store) if e.status is Status.SUCCESS]) == 7


async def test_a_triggered_run_over_its_handlers_limit_waits_unlocked_then_runs(
    make_engine: EngineFactory,
) -> None:
    """Scheduled and requested runs take one path: a trigger whose handler is at its limit is
    neither locked nor run; it runs as soon as the handler has room, not when a lock expires."""
    release = asyncio.Event()

    @handler(max_concurrency=1)
    async def limited(ctx: HandlerContext) -> Result:
        if ctx.job_name == "busy":
            await release.wait()
        return None

    h = make_engine({"limited": limited})
    await h.add(make_job("busy", "limited"))
    triggered = await h.add(make_job("triggered", "limited", next_run_at=T0 + timedelta(days=1)))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1  # "busy" runs, and holds the handler's one slot
    await h.store.insert_run_requests([trigger(triggered.id)])

    assert (await h.engine.tick()).claimed == 0
    assert lock_key(triggered.id) in await h.engine.ports.lock.acquire_many(
        {lock_key(triggered.id): 1.0}, "probe"
    ), "the job was locked although it could not run"
    await h.engine.ports.lock.release_many([lock_key(triggered.id)], "probe")

    release.set()
    await h.engine.drain()  # the fake clock stands still: no lock or lease has expired
    assert [e.status for e in await executions(h.store, triggered.id)] == [Status.SUCCESS]


def trigger(job_id: str) -> RunRequest:
    return RunRequest(
        id=new_id(),
        job_id=job_id,
        scheduled_at=T0,
        reason="trigger",
        not_before=T0,
        created_at=T0,
    )


async def test_the_configured_limit_overrides_the_handlers_own(make_engine: EngineFactory) -> None:
    @handler(max_concurrency=5)
    async def limited(ctx: HandlerContext) -> Result:
        return None

    h = make_engine({"limited": limited}, handler_concurrency={"limited": 1})
    for i in range(3):
        await h.add(make_job(f"j{i}", "limited"))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1


async def test_the_circuit_breaker_pauses_a_failing_job_and_says_why(
    make_engine: EngineFactory,
) -> None:
    async def broken(ctx: HandlerContext) -> Result:
        raise RuntimeError("database is on fire")

    h = make_engine({"broken": broken}, circuit_breaker_failures=3)
    job = await h.add(make_job("broken", "broken"))
    for _ in range(5):
        await h.engine.drain()
        h.clock.advance(60)
    assert len(await executions(h.store)) == 3
    stored = await h.store.get_job(job.id)
    assert stored is not None and not stored.enabled
    assert stored.paused_reason is not None
    assert "3 consecutive failed executions" in stored.paused_reason
    assert "database is on fire" in stored.paused_reason
    assert h.engine.metrics.breaker_trips.labels("broken")._value.get() == 1


async def test_misfire_skip_leaves_a_skipped_execution_per_missed_occurrence(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"noop": noop})
    job = await h.add(
        make_job(
            "hourly",
            schedule=CronSchedule(expr="0 0 * * * *"),
            next_run_at=T0 - timedelta(hours=3),
            misfire=Misfire(policy=MisfirePolicy.SKIP, grace_seconds=60),
        )
    )
    h.clock.advance(30 * 60)  # 09:30: 06:00, 07:00, 08:00 and 09:00 were all missed
    await h.engine.drain()
    runs = await executions(h.store, job.id)
    assert [(e.scheduled_at.hour, e.status) for e in runs] == [
        (h_, Status.SKIPPED) for h_ in (6, 7, 8, 9)
    ]
    assert all(e.error is not None and e.error.type == "Misfire" for e in runs)
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == T0 + timedelta(hours=1)
    await h.engine.relay.flush_once()  # the outbox, to the publisher
    assert h.events.types(job.id) == ["job.execution.skipped"] * 4


async def test_misfire_coalesce_runs_once_for_a_long_outage(make_engine: EngineFactory) -> None:
    h = make_engine({"noop": noop})
    job = await h.add(
        make_job(
            "every-minute",
            schedule=CronSchedule(expr="0 * * * * *"),
            next_run_at=T0 - timedelta(hours=2),
        )
    )
    await h.engine.drain()
    assert [e.status for e in await executions(h.store)] == [Status.SUCCESS]
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.next_run_at == T0 + timedelta(minutes=1)


async def test_misfire_run_all_runs_every_missed_occurrence(make_engine: EngineFactory) -> None:
    h = make_engine({"noop": noop})
    await h.add(
        make_job(
            "catch-up",
            schedule=CronSchedule(expr="0 */10 * * * *"),
            next_run_at=T0 - timedelta(minutes=30),
            misfire=Misfire(policy=MisfirePolicy.RUN_ALL),
        )
    )
    await h.engine.drain()
    minutes = [e.scheduled_at.minute for e in await executions(h.store)]
    assert minutes == [30, 40, 50, 0]


async def test_shutdown_lets_running_work_finish_then_cancels_and_records_the_rest(
    make_engine: EngineFactory,
) -> None:
    quick_started = asyncio.Event()
    allow_quick = asyncio.Event()

    async def quick(ctx: HandlerContext) -> Result:
        quick_started.set()
        await allow_quick.wait()
        return None

    async def endless(ctx: HandlerContext) -> Result:
        await asyncio.Event().wait()
        return None

    h = make_engine({"quick": quick, "endless": endless}, shutdown_grace_seconds=0.2)
    quick_job = await h.add(make_job("quick", "quick"))
    endless_job = await h.add(make_job("endless", "endless", timeout_seconds=3600))
    stop = asyncio.Event()
    running = asyncio.create_task(h.engine.run(stop))
    await asyncio.wait_for(quick_started.wait(), WAIT)
    stop.set()
    allow_quick.set()  # finishes within the grace period
    await asyncio.wait_for(running, WAIT)

    runs = {e.job_name: e for e in await executions(h.store)}
    assert runs["quick"].status is Status.SUCCESS
    assert runs["endless"].status is Status.ABANDONED
    assert runs["endless"].error is not None and runs["endless"].error.type == "Shutdown"
    endless_now = await h.store.get_job(endless_job.id)
    assert endless_now is not None and endless_now.lease is None
    assert endless_now.next_run_at == T0, "the occurrence is given back, to run after a restart"
    quick_now = await h.store.get_job(quick_job.id)
    assert quick_now is not None and quick_now.next_run_at == T0 + timedelta(seconds=60)


async def test_queued_work_is_given_back_on_shutdown(make_engine: EngineFactory) -> None:
    async def endless(ctx: HandlerContext) -> Result:
        await asyncio.Event().wait()
        return None

    h = make_engine({"endless": endless}, workers=1, queue_size=5, shutdown_grace_seconds=0)
    for i in range(3):
        await h.add(make_job(f"j{i}", "endless", timeout_seconds=3600))
    h.engine.start()
    await h.engine.tick()
    await asyncio.sleep(0)  # let the single worker take the first task
    await h.engine.shutdown()
    statuses = [e.status for e in await executions(h.store)]
    assert statuses == [Status.ABANDONED] * 3
    assert (await h.store.due_backlog(T0)).due == 3
    assert h.observed.heard[-1] == ("stopped", "", ""), "told last, after every end"


async def test_a_run_due_soon_is_claimed_ahead_and_fires_at_its_time_not_a_tick_later(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"noop": noop}, tick_seconds=30, lookahead_seconds=10)
    job = await h.add(make_job(next_run_at=T0 + timedelta(seconds=5)))
    tick = await h.engine.tick()
    assert (tick.claimed, tick.fired) == (1, 0), "claimed within the lookahead, armed"
    assert h.engine._until_next_timer() == 5 - RECORDED_AHEAD_SECONDS, "it wakes to record it"
    claimed = await h.store.get_job(job.id)
    assert claimed is not None and claimed.lease is not None
    assert claimed.lease.until == T0 + timedelta(seconds=5 + 60 + 30), "covers wait and run"
    assert await executions(h.store) == [], "nothing is recorded until just before its time"
    h.clock.advance(4.999)
    assert (await h.engine.tick()).fired == 0
    [staged] = await executions(h.store)
    assert (staged.status, staged.started_at) == (Status.RUNNING, T0 + timedelta(seconds=5))
    assert h.observed.of(job.name) == [("recorded", "running")], "recorded, not started"
    assert h.engine._until_next_timer() == pytest.approx(0.001), "it wakes at its time"
    h.clock.advance(0.001)
    await h.engine.drain()
    [run] = await executions(h.store)
    assert (run.status, run.scheduled_at, run.started_at) == (
        Status.SUCCESS,
        *(2 * [T0 + timedelta(seconds=5)]),
    )
    assert h.observed.of(job.name)[:2] == [("recorded", "running"), ("started", "lag=0")]


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 - a condition on plain state, polled by the caller's bound
        await asyncio.sleep(0.001)


async def test_a_full_batch_fetches_again_at_once_not_a_tick_later(
    make_engine: EngineFactory,
) -> None:
    done = asyncio.Event()
    ran: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        # Nobody finishes before all three have started, so no freed worker wakes the loop.
        ran.append(ctx.job_name)
        if len(ran) == 3:
            done.set()
        await done.wait()
        return None

    # One job per batch and a tick of a minute: only "fetch again at once" runs three in time.
    h = make_engine({"record": record}, batch_size=1, tick_seconds=60)
    for i in range(3):
        await h.add(make_job(f"j{i}", "record"))
    stop = asyncio.Event()
    running = asyncio.create_task(h.engine.run(stop))
    try:
        await asyncio.wait_for(done.wait(), WAIT)
    finally:
        stop.set()
        await asyncio.wait_for(running, WAIT)
    assert sorted(ran) == ["j0", "j1", "j2"]


async def test_an_observer_that_raises_fails_no_run_and_the_others_still_hear(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(RunObserver):
        def finished(self, job: Job, execution: Execution) -> None:
            raise RuntimeError("dashboard down")

    h = make_engine({"noop": noop})
    h.engine.observer.observers.insert(0, Broken())
    await h.add(make_job("observed", "noop"))
    await h.engine.drain()
    [run] = await executions(h.store)
    assert run.status is Status.SUCCESS
    assert ("finished", "success") in h.observed.of("observed")
    await h.engine.relay.flush_once()  # the outbox, to the publisher
    assert h.events.types() == ["job.execution.started", "job.execution.success"]
    assert "observer.failed" in caplog.text


@pytest.mark.parametrize(
    "schedule",
    [
        *(CronSchedule(expr=expr) for expr in ("0 0 12 ? * *", "0 */99 * * * *", "0 0 12 15W * *")),
        # Stored when it still fired: Havana's clocks skip 00:30 that Sunday since 2013.
        CronSchedule(expr="0 30 */24 * 3 0#2", timezone="America/Havana"),
    ],
    ids=["question-mark", "long-step", "nearest-weekday", "time-the-clocks-skip"],
)
async def test_a_stored_schedule_refused_since_runs_its_due_occurrence_then_pauses_saying_why(
    make_engine: EngineFactory, schedule: CronSchedule
) -> None:
    h = make_engine({"noop": noop})
    job = await h.add(make_job("old-cron", "noop", schedule=schedule))
    await h.engine.drain()
    h.clock.advance(86_400)
    await h.engine.drain()
    assert [e.status for e in await executions(h.store)] == [Status.SUCCESS]
    paused = await h.store.get_job(job.id)
    assert paused is not None and not paused.enabled and paused.lease is None
    assert paused.paused_reason is not None
    assert paused.paused_reason.startswith("schedule refused: schedule.expr")


async def test_a_burst_costs_a_few_store_round_trips_per_hundred_runs(
    make_engine: EngineFactory, store: Store
) -> None:
    """Claims, records, ends and lock releases go in batches: round trips per run stay far below
    one, and /metrics says how many there were. (FerretDB takes its updates ten to a command.)"""
    h = make_engine({"noop": noop})
    due = [
        make_job(f"burst-{i:04}", next_run_at=T0 + timedelta(microseconds=i)) for i in range(600)
    ]
    await h.store.insert_missing_jobs(due)
    before = STORE_OPERATIONS.snapshot()
    h.clock.advance(1)
    await h.engine.drain()
    spent = Counter(STORE_OPERATIONS.snapshot()) - Counter(before)
    assert len(await executions(h.store)) == 600
    if isinstance(store, SQLiteStore):
        counted = ("sqlite", "transaction")  # a call on the store's thread: one per batch
        assert 0 < spent[counted] / 600 < 0.1, spent
    elif isinstance(store, PostgresStore):
        counted = ("postgresql", "statement")  # a batch's due read, claim, record, end: one each
        round_trips = spent[counted] + 2 * spent[("postgresql", "transaction")]
        assert 0 < round_trips / 600 < 0.1, spent
    else:
        counted = ("mongodb", "update")
        commands = sum(n for (backend, _), n in spent.items() if backend == "mongodb")
        assert 0 < commands / 600 < 0.5, spent
    exported = h.engine.metrics.registry.get_sample_value
    labels = dict(zip(("backend", "operation"), counted, strict=True))
    assert exported("tickd_store_operations_total", labels) == STORE_OPERATIONS.snapshot()[counted]


async def test_shutdown_gives_back_runs_claimed_ahead_without_recording_anything(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"noop": noop}, lookahead_seconds=10)
    job = await h.add(make_job("soon", next_run_at=T0 + timedelta(seconds=3)))
    assert (await h.engine.tick()).claimed == 1
    await h.engine.shutdown()
    after = await h.store.get_job(job.id)
    assert after is not None and after.lease is None, "its lease is given back"
    assert after.next_run_at == T0 + timedelta(seconds=3), "its occurrence is still to run"
    assert await executions(h.store) == [], "nothing ran, so nothing is recorded"
    key = lock_key(job.id)
    assert await h.engine.ports.lock.acquire_many({key: 1.0}, "probe") == {key}


async def test_under_a_sustained_backlog_a_low_job_still_runs_within_the_starvation_bound(
    make_engine: EngineFactory,
) -> None:
    """Critical first, but not critical only: three critical jobs due every second keep a batch
    of two full for good; the low job, due all along, is taken once it has waited the bound."""
    h = make_engine(
        {"noop": noop}, batch_size=2, workers=2, lookahead_seconds=0, starvation_bound_seconds=30
    )
    every_second = IntervalSchedule(every_seconds=1)
    for i in range(3):
        await h.add(make_job(f"critical-{i}", priority=Priority.CRITICAL, schedule=every_second))
    low = await h.add(make_job("low", priority=Priority.LOW, schedule=every_second))
    h.engine.start()
    for _ in range(45):
        await h.engine.tick()
        await h.engine.settled()
        h.clock.advance(1)
    [run] = await executions(h.store, low.id)
    assert run.started_at is not None
    waited = (run.started_at - T0).total_seconds()
    assert 30 <= waited <= 32, f"taken after {waited} s, the bound is 30"
    assert (
        h.engine.metrics.registry.get_sample_value(
            "tickd_fire_lag_seconds_count",
            {"handler": "noop", "priority": "low", "domain": "default"},
        )
        == 1
    )


@pytest.mark.parametrize(
    "returned",
    [{(1, 2): 3}, "cycle"],
    ids=["keys-not-strings", "holds-itself"],
)
async def test_a_result_that_is_not_json_fails_the_run_and_ends_it(
    make_engine: EngineFactory, returned: object
) -> None:
    """A result no JSON holds (a tuple key, a list inside itself) is the run's failure, recorded
    at once: not a crashed worker, nor an event loop counting a cycle forever."""

    async def odd(ctx: HandlerContext) -> Result:
        if returned == "cycle":
            loop: list[object] = []
            loop.append(loop)
            return {"loop": loop}
        return returned  # type: ignore[return-value]

    h = make_engine({"odd": odd})
    job = await h.add(make_job("odd", "odd"))
    await asyncio.wait_for(h.engine.drain(), WAIT)
    [run] = await executions(h.store)
    assert run.status is Status.FAILED and run.error is not None
    assert run.error.type == "BadResult"
    after = await h.store.get_job(job.id)
    assert after is not None and after.lease is None, "the run ended: its lease is free"


async def test_a_requested_run_given_back_at_shutdown_is_asked_for_again(
    make_engine: EngineFactory,
) -> None:
    async def endless(ctx: HandlerContext) -> Result:
        await asyncio.Event().wait()
        return None

    h = make_engine({"endless": endless}, workers=1, queue_size=5, shutdown_grace_seconds=0)
    busy = await h.add(make_job("busy", "endless", timeout_seconds=3600))
    asked = await h.add(make_job("asked", "endless", next_run_at=T0 + timedelta(days=1)))
    h.engine.start()
    await h.engine.tick()  # "busy" takes the only worker
    await h.store.insert_run_requests([trigger(asked.id)])
    await h.engine.tick()  # the trigger is claimed and queued behind it
    await asyncio.sleep(0)
    await h.engine.shutdown()
    assert [r.job_id for r, _ in await h.store.due_run_requests(T0, 10)] == [asked.id]
    assert busy.id


async def test_triggers_of_a_handler_at_its_limit_do_not_hold_back_other_jobs(
    make_engine: EngineFactory,
) -> None:
    release = asyncio.Event()

    @handler(max_concurrency=1)
    async def capped(ctx: HandlerContext) -> Result:
        await release.wait()
        return None

    h = make_engine({"capped": capped, "noop": noop}, batch_size=2)
    await h.add(make_job("running", "capped"))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1  # the capped handler is now at its limit
    later = T0 + timedelta(days=1)
    for i in range(3):
        asked = await h.add(make_job(f"asked-{i}", "capped", next_run_at=later))
        await h.store.insert_run_requests([trigger(asked.id)])
    other = await h.add(make_job("other", "noop", next_run_at=T0 + timedelta(microseconds=1)))
    h.clock.advance(1)
    tick = await h.engine.tick()
    assert tick.claimed == 1, "the other job is taken although triggers of the capped wait"
    release.set()
    await h.engine.drain()
    assert [e.status for e in await executions(h.store, other.id)] == [Status.SUCCESS]


async def test_a_run_that_waited_for_a_worker_renews_its_lease_or_does_not_run(
    make_engine: EngineFactory,
) -> None:
    """A run queued for longer than FRESH_FOR renews its lease before it starts, so its whole
    timeout is covered from its start; one whose job went meanwhile (its lease with it) does
    not run."""
    release = {"first": asyncio.Event(), "kept": asyncio.Event(), "gone": asyncio.Event()}
    ran: list[str] = []

    async def blocking(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        await release[ctx.job_name].wait()
        return None

    h = make_engine({"blocking": blocking}, workers=1)
    await h.add(make_job("first", "blocking", priority=Priority.CRITICAL))
    kept = await h.add(make_job("kept", "blocking", timeout_seconds=30))
    gone = await h.add(make_job("gone", "blocking"))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 3
    await asyncio.wait_for(_until(lambda: ran == ["first"]), 5)  # the others wait in the queue
    h.clock.advance(5)  # past FRESH_FOR
    assert await h.store.delete_job(gone.id)
    release["first"].set()
    await asyncio.wait_for(_until(lambda: "kept" in ran), 5)

    stored = await h.store.get_job(kept.id)  # running: its lease renewed as it started
    assert stored is not None and stored.lease is not None
    margin = h.settings.lease_margin_seconds
    assert stored.lease.until >= T0 + timedelta(seconds=5 + 30 + margin)
    release["kept"].set()
    await asyncio.wait_for(h.engine.settled(), 5)
    assert "gone" not in ran
    assert ("fenced", "before start") in h.observed.of("gone")
