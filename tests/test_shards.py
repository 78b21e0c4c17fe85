"""Sharded jobs end to end on every store, with a fake clock and drain mode: an occurrence runs
as N shard executions, claimed once, each shard taken by any instance under its own lock and
fencing token, ended once by its last shard (scheduler/schedule/shards.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta

from tests.conftest import T0, EngineFactory, make_job
from tests.test_engine import WAIT, _until, executions, noop
from tickd.scheduler.lock import lock_key, shard_lock_key
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.model import (
    CronSchedule,
    DeadLetter,
    IntervalSchedule,
    RedrivePolicy,
    Status,
    new_id,
)
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.plugin.testing import handler_context
from tickd.scheduler.ports.backends import JobChange, RunRequest
from tickd.scheduler.run.ledger import RECORDED_AHEAD_SECONDS
from tickd.scheduler.run.states import RunState

EVERY_MINUTE = CronSchedule(expr="0 * * * * *")


async def test_an_occurrence_of_n_shards_runs_as_n_executions_and_advances_once(
    make_engine: EngineFactory,
) -> None:
    seen: list[tuple[int, int, str]] = []

    async def part(ctx: HandlerContext) -> Result:
        seen.append((ctx.shard, ctx.shards, ctx.idempotency_key))
        return {"shard": ctx.shard}

    h = make_engine({"part": part}, workers=4)
    job = await h.add(make_job("sharded", "part", schedule=EVERY_MINUTE, shards=4))
    await h.engine.drain()

    runs = await executions(h.store, job.id)
    assert sorted((e.shard, e.shards, e.status) for e in runs) == [
        (i, 4, Status.SUCCESS) for i in range(4)
    ]
    assert {(e.scheduled_at, e.occurrence) for e in runs} == {(T0, f"{job.id}:{T0.isoformat()}")}
    assert len({e.token for e in runs}) == 4, "each shard fenced by a token of its own"
    assert sorted(seen) == [(i, 4, f"{job.id}:{T0.isoformat()}:shard-{i}") for i in range(4)]
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == T0 + timedelta(minutes=1)
    assert stored.last_execution is not None and stored.last_execution.status is Status.SUCCESS
    lock = h.engine.ports.lock
    assert await lock.acquire_many({lock_key(job.id): 1}, "other"), "the lock was released"
    await lock.release_many([lock_key(job.id)], "other")

    h.clock.advance(60)
    await h.engine.drain()
    later = [e for e in await executions(h.store, job.id) if e.scheduled_at > T0]
    assert sorted(e.shard for e in later) == [0, 1, 2, 3], "the next occurrence, once"


async def test_an_occurrence_armed_ahead_hands_out_its_shards_at_its_time_not_before(
    make_engine: EngineFactory,
) -> None:
    """Runs armed ahead are recorded just before their time (RECORDED_AHEAD_SECONDS); an
    occurrence's shards, due from when it is handed to them, are handed out at its time."""
    seen: list[datetime] = []

    async def part(ctx: HandlerContext) -> Result:
        seen.append(ctx.clock.now())
        return None

    h = make_engine({"part": part}, workers=4, lookahead_seconds=10)
    due = T0 + timedelta(seconds=5)
    job = await h.add(make_job("sharded", "part", schedule=EVERY_MINUTE, shards=2, next_run_at=due))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1, "armed"
    h.clock.set(due - timedelta(seconds=RECORDED_AHEAD_SECONDS / 2))
    await h.engine.drain()
    assert (seen, await executions(h.store, job.id)) == ([], []), "nothing before its time"

    h.clock.set(due)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert seen == [due, due]
    runs = await executions(h.store, job.id)
    assert sorted((e.shard, e.scheduled_at, e.status) for e in runs) == [
        (i, due, Status.SUCCESS) for i in range(2)
    ]


async def test_the_job_stays_leased_until_its_last_shard_ends(make_engine: EngineFactory) -> None:
    """The job never overlaps itself: a shard that ended early does not free it."""
    gate = asyncio.Event()

    async def part(ctx: HandlerContext) -> Result:
        if ctx.shard > 0:
            await gate.wait()
        return None

    h = make_engine({"part": part}, workers=3)
    job = await h.add(make_job("sharded", "part", schedule=EVERY_MINUTE, shards=3))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1, "the occurrence, handed to its shards"
    assert (await h.engine.tick()).claimed == 3, "its shards, each claimed on its own"

    def shard_0_ended() -> bool:
        return ("finished", "success") in h.observed.of("sharded")

    await asyncio.wait_for(_until(shard_0_ended), WAIT)  # its end is written

    h.clock.advance(60)  # the next occurrence is due, but this one still runs
    assert (await h.engine.tick()).claimed == 0
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is not None and stored.next_run_at == T0

    gate.set()
    await asyncio.wait_for(h.engine.settled(), WAIT)
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == T0 + timedelta(minutes=1)


async def test_a_failed_shard_is_retried_alone_and_the_occurrence_succeeds_once(
    make_engine: EngineFactory,
) -> None:
    attempts: list[tuple[int, int]] = []

    async def flaky(ctx: HandlerContext) -> Result:
        attempts.append((ctx.shard, ctx.attempt))
        if ctx.shard == 1 and ctx.attempt == 1:
            raise ConnectionError("upstream down")
        return None

    h = make_engine({"flaky": flaky}, workers=3)
    job = await h.add(make_job("sharded", "flaky", schedule=EVERY_MINUTE, shards=3, max_retries=2))
    await h.engine.drain()

    assert sorted(attempts) == [(0, 1), (1, 1), (1, 2), (2, 1)], "only shard 1 ran again"
    runs = await executions(h.store, job.id)
    assert sorted((e.shard, e.status, e.attempts) for e in runs) == [
        (0, Status.SUCCESS, 1),
        (1, Status.SUCCESS, 2),
        (2, Status.SUCCESS, 1),
    ]
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.last_execution is not None
    assert stored.last_execution.status is Status.SUCCESS
    assert (stored.consecutive_failures, stored.next_run_at) == (0, T0 + timedelta(minutes=1))
    finished = [detail for hook, detail in h.observed.of("sharded") if hook == "finished"]
    assert finished == ["success"] * 3


async def test_failed_shards_fail_their_occurrence_once(make_engine: EngineFactory) -> None:
    """However many shards fail, the occurrence is one failed run of the job: one step towards
    its circuit breaker, its last error naming the first failed shard."""

    async def broken(ctx: HandlerContext) -> Result:
        if ctx.shard > 0:
            raise ValueError(f"bad part {ctx.shard}")
        return None

    h = make_engine({"broken": broken}, workers=3, circuit_breaker_failures=2)
    job = await h.add(make_job("sharded", "broken", schedule=EVERY_MINUTE, shards=3))
    await h.engine.drain()

    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.enabled and stored.consecutive_failures == 1
    assert stored.last_execution is not None and stored.last_execution.status is Status.FAILED
    assert stored.last_execution.error == "shard 1 of 3 (and 1 other shards): bad part 1"
    h.clock.advance(60)
    await h.engine.drain()
    paused = await h.store.get_job(job.id)
    assert paused is not None and not paused.enabled and paused.consecutive_failures == 2


async def test_an_interval_jobs_next_run_counts_from_its_last_shards_end(
    make_engine: EngineFactory,
) -> None:
    async def part(ctx: HandlerContext) -> Result:
        if ctx.shard == 0:
            raise ConnectionError("upstream down")  # ends at T0
        await asyncio.wait_for(
            _until(lambda: ("finished", "failed") in h.observed.of("sharded")), WAIT
        )
        await ctx.clock.sleep(5)  # the fake clock moves on: shard 1 ends at T0 + 5
        return None

    h = make_engine({"part": part}, workers=2)
    job = await h.add(make_job("sharded", "part", shards=2))
    await h.engine.drain()

    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.last_execution is not None
    assert stored.last_execution.status is Status.FAILED
    assert stored.next_run_at == T0 + timedelta(seconds=5 + 60)


async def test_a_shard_failed_for_good_is_a_dead_letter_whose_redrive_runs_it_alone(
    make_engine: EngineFactory,
) -> None:
    fixed = False

    async def part(ctx: HandlerContext) -> Result:
        if ctx.shard == 2 and not fixed:
            raise ValueError("bad part")
        return {"shard": ctx.shard, "shards": ctx.shards}

    h = make_engine({"part": part}, workers=3)
    redrive = RedrivePolicy(max_attempts=1, backoff_seconds=10)
    job = await h.add(make_job("sharded", "part", schedule=EVERY_MINUTE, shards=3, redrive=redrive))
    await h.engine.drain()
    dead = [e for e in await executions(h.store, job.id) if e.dead_letter is not None]
    assert [(e.shard, e.dead_letter) for e in dead] == [(2, DeadLetter.REDRIVING)]

    fixed = True
    h.clock.advance(10)
    await h.engine.drain()
    runs = await executions(h.store, job.id)
    assert len(runs) == 4, "the re-drive ran shard 2 alone"
    rerun = runs[-1]
    assert (rerun.shard, rerun.shards, rerun.status) == (2, 3, Status.SUCCESS)
    assert rerun.result == {"shard": 2, "shards": 3}
    assert rerun.idempotency_key == dead[0].idempotency_key, "the same shard of the occurrence"
    settled = await h.store.get_execution(dead[0].id)
    assert settled is not None and settled.dead_letter is DeadLetter.REDRIVEN
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.next_run_at == T0 + timedelta(minutes=1)


async def test_a_shard_fenced_off_does_not_end_the_occurrence(make_engine: EngineFactory) -> None:
    """The old instance's shards end after another instance took the occurrence over: neither
    the shard that ends first nor the last one touches the job."""
    gate = asyncio.Event()
    started: list[int] = []

    async def slow(ctx: HandlerContext) -> Result:
        started.append(ctx.shard)
        await gate.wait()
        return None

    old = make_engine({"work": slow}, instance_id="old", lease_margin_seconds=1, workers=2)
    job = await old.add(make_job("work", "work", schedule=EVERY_MINUTE, shards=2))
    old.engine.start()
    await old.engine.tick()  # the occurrence
    await old.engine.tick()  # its shards
    await asyncio.wait_for(_until(lambda: len(started) == 2), WAIT)  # both shards run
    old.clock.advance(60 + 2)  # the old lease is past its expiry (a long GC pause, say)
    new = make_engine({"work": noop}, instance_id="new", workers=2)
    await new.engine.drain()  # reaps the expired lease and runs the occurrence's shards
    taken_over = await new.store.get_job(job.id)
    assert taken_over is not None and taken_over.last_execution is not None

    gate.set()
    await asyncio.wait_for(old.engine.settled(), WAIT)

    assert old.engine.metrics.fenced._value.get() == 2, "both of the old shards were fenced off"
    stored = await old.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert stored.last_execution == taken_over.last_execution
    assert stored.next_run_at == taken_over.next_run_at
    runs = [e for e in await executions(old.store, job.id) if e.scheduled_at == T0]
    assert sorted((e.owner, e.shard) for e in runs) == [
        ("new", 0),
        ("new", 1),
        ("old", 0),
        ("old", 1),
    ]


async def test_a_job_of_one_shard_runs_as_before(make_engine: EngineFactory) -> None:
    h = make_engine({"noop": noop})
    job = await h.add(make_job())
    await h.engine.drain()
    [run] = await executions(h.store, job.id)
    assert (run.shard, run.shards) == (0, 1)
    assert run.idempotency_key == f"{job.id}:{T0.isoformat()}"


async def test_a_sharded_run_counts_each_shard_against_its_handlers_limit(
    make_engine: EngineFactory,
) -> None:
    gate = asyncio.Event()

    async def part(ctx: HandlerContext) -> Result:
        await gate.wait()
        return None

    h = make_engine({"part": part}, workers=10, handler_concurrency={"part": 3})
    await h.add(make_job("wide", "part", shards=3))
    await h.add(make_job("plain", "part"))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 2, "the sharded occurrence and the plain run"
    assert h.engine.ledger.busy()["part"] == 1
    assert (await h.engine.tick()).claimed == 2, "two shards: the third is over the limit"
    assert h.engine.ledger.busy()["part"] == 3
    assert (await h.engine.tick()).claimed == 0
    gate.set()
    await asyncio.wait_for(h.engine.settled(), WAIT)
    await h.engine.drain()
    assert len(await executions(h.store)) == 4


async def test_a_handlers_test_context_can_be_a_shard() -> None:
    async with handler_context(shard=2, shards=4) as ctx:
        assert (ctx.shard, ctx.shards) == (2, 4)
        assert ctx.idempotency_key.endswith(":shard-2")
    async with handler_context() as ctx:
        assert (ctx.shard, ctx.shards) == (0, 1) and ":shard-" not in ctx.idempotency_key


# -- shards spread over instances -----------------------------------------------------------------


async def test_two_instances_share_the_shards_of_one_occurrence_each_fenced_alone(
    make_engine: EngineFactory,
) -> None:
    gate = asyncio.Event()

    async def part(ctx: HandlerContext) -> Result:
        await gate.wait()
        return {"shard": ctx.shard}

    lock = MemoryLock()  # one lock service, as in production
    a = make_engine({"part": part}, instance_id="a", lock=lock, batch_size=2)
    b = make_engine({"part": part}, instance_id="b", lock=lock, batch_size=2)
    job = await a.add(make_job("sharded", "part", schedule=EVERY_MINUTE, shards=4))
    a.engine.start()
    b.engine.start()
    assert (await a.engine.tick()).claimed == 1, "a claims the occurrence..."
    assert (await a.engine.tick()).claimed == 2, "...and two of its shards"
    assert (await b.engine.tick()).claimed == 2, "b takes the other two"
    assert (await b.engine.tick()).claimed == 0, "the job does not overlap itself"
    gate.set()
    await asyncio.wait_for(asyncio.gather(a.engine.settled(), b.engine.settled()), WAIT)

    runs = await executions(a.store, job.id)
    assert sorted((e.owner, e.shard, e.status) for e in runs) == [
        ("a", 0, Status.SUCCESS),
        ("a", 1, Status.SUCCESS),
        ("b", 2, Status.SUCCESS),
        ("b", 3, Status.SUCCESS),
    ]
    assert len({e.token for e in runs}) == 4, "each shard fenced by a token of its own"
    stored = await a.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == T0 + timedelta(minutes=1), "the schedule advanced once"
    assert stored.last_execution is not None and stored.last_execution.status is Status.SUCCESS
    keys = {lock_key(job.id), *(shard_lock_key(job.id, shard) for shard in range(4))}
    assert await lock.acquire_many(dict.fromkeys(keys, 1.0), "probe") == keys, "all released"


async def test_an_instance_killed_mid_occurrence_leaves_its_shard_to_run_again_alone(
    make_engine: EngineFactory,
) -> None:
    """a dies running shard 1 (after shard 0 succeeded): b takes shard 1 over once its lease
    has expired and runs it alone; shard 0 does not run again; the occurrence ends once, and
    a's late end of shard 1 is fenced off."""
    ran: list[tuple[str, int]] = []
    hung = asyncio.Event()

    def part(instance: str) -> Callable[[HandlerContext], Awaitable[Result]]:
        async def run(ctx: HandlerContext) -> Result:
            ran.append((instance, ctx.shard))
            if instance == "a" and ctx.shard == 1:
                await hung.wait()  # a's process froze here
            return None

        return run

    lock = MemoryLock(monotonic=lambda: a.clock.now().timestamp())
    hourly = IntervalSchedule(every_seconds=3600)
    settings = {"lock": lock, "batch_size": 2, "lease_margin_seconds": 1}
    a = make_engine({"part": part("a")}, instance_id="a", **settings)
    b = make_engine({"part": part("b")}, instance_id="b", **settings)
    job = await a.add(make_job("sharded", "part", schedule=hourly, shards=4))
    a.engine.start()
    await a.engine.tick()  # the occurrence
    await a.engine.tick()  # shards 0 and 1
    # Shard 0's end written, shard 1 running: on a store whose claim is the lock, nothing but
    # the written end keeps shard 0 from being taken over once its lease has expired.
    await asyncio.wait_for(
        _until(
            lambda: (
                ("a", 1) in ran
                and a.engine.ledger.count(RunState.RUNNING) == 1
                and a.engine.ledger.count(RunState.ENDED) == 0
            )
        ),
        WAIT,
    )
    await b.engine.drain()  # shards 2 and 3; shard 1 is still a's
    assert sorted(ran) == [("a", 0), ("a", 1), ("b", 2), ("b", 3)]
    held = await b.store.get_job(job.id)
    assert held is not None and held.lease is not None, "the occurrence goes on"

    a.clock.advance(60 + 6)  # past shard 1's lease and lock: a is gone
    await b.engine.drain()
    assert sorted(ran) == [("a", 0), ("a", 1), ("b", 1), ("b", 2), ("b", 3)], "shard 1 alone"
    runs = await executions(b.store, job.id)
    assert sorted((e.shard, e.owner, e.status) for e in runs) == [
        (0, "a", Status.SUCCESS),
        (1, "a", Status.ABANDONED),
        (1, "b", Status.SUCCESS),
        (2, "b", Status.SUCCESS),
        (3, "b", Status.SUCCESS),
    ]
    ended = await b.store.get_job(job.id)
    assert ended is not None and ended.lease is None
    assert ended.last_execution is not None and ended.last_execution.status is Status.SUCCESS
    assert ended.next_run_at == T0 + timedelta(seconds=66 + 3600), "advanced once, from its end"

    hung.set()  # a wakes up, too late
    await asyncio.wait_for(a.engine.settled(), WAIT)
    assert a.engine.metrics.fenced._value.get() == 1
    assert await b.store.get_job(job.id) == ended, "a's late shard changed nothing"


async def test_a_triggered_occurrence_runs_its_shards_once_and_the_trigger_once(
    make_engine: EngineFactory,
) -> None:
    """A trigger stays queued while its run holds the job; a sharded one is its shards' once
    they are queued, and leaves the queue then: the occurrence does not run again when its
    last shard frees the job."""
    h = make_engine({"noop": noop}, workers=4)
    later = T0 + timedelta(days=1)  # not due by its schedule
    job = await h.add(
        make_job("sharded", "noop", schedule=EVERY_MINUTE, shards=3, next_run_at=later)
    )
    trigger = RunRequest(
        id=new_id(), job_id=job.id, scheduled_at=T0, reason="trigger", not_before=T0, created_at=T0
    )
    await h.store.insert_run_requests([trigger])
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.advance(1)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    runs = await executions(h.store, job.id)
    assert sorted((e.shard, e.status) for e in runs) == [(i, Status.SUCCESS) for i in range(3)]
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None and stored.next_run_at == later
    assert await h.store.due_run_requests(later, 10) == []


async def test_a_sharded_occurrence_edited_while_its_shards_run_runs_once(
    make_engine: EngineFactory,
) -> None:
    """Ops raise a sharded job's retries while its shards run: the last shard's end still
    moves the job on (its entries keep the time the occurrence was claimed at), or the whole
    occurrence is due again and every shard runs twice."""
    gate = asyncio.Event()
    started: list[int] = []

    async def part(ctx: HandlerContext) -> Result:
        started.append(ctx.shard)
        await gate.wait()
        return None

    h = make_engine({"part": part}, workers=4)
    job = await h.add(make_job("sharded", "part", schedule=EVERY_MINUTE, shards=2))
    h.engine.start()
    await h.engine.tick()  # the occurrence
    await h.engine.tick()  # its shards
    await asyncio.wait_for(_until(lambda: len(started) == 2), WAIT)
    stored = await h.store.get_job(job.id)
    assert stored is not None
    change = JobChange(
        id=new_id(), job_id=job.id, job_name=job.name, at=T0, actor="ops", action="update",
        changes={"max_retries": {"from": 0, "to": 5}},
    )  # fmt: skip
    assert await h.store.replace_job(replace(stored, max_retries=5), stored.revision, change)
    gate.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    runs = await executions(h.store, job.id)
    assert sorted((e.scheduled_at, e.shard) for e in runs) == [(T0, 0), (T0, 1)]
    after = await h.store.get_job(job.id)
    assert after is not None and after.next_run_at == T0 + timedelta(minutes=1)
