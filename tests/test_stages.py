"""Each stage of the run path built alone, on a real store, lock and fake clock, handed a fresh
ledger and the real next stage or a small stand-in for it: what it hands on, and what it tells
the ledger. The engine as a whole is tested in tests/test_engine.py; the pool and the writer
alone in tests/test_pool.py and tests/test_finishing.py."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import T0, RecordingObserver, make_job
from tests.test_engine import executions
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.lock import lock_key
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Job, Misfire, MisfirePolicy, Status, new_id
from tickd.scheduler.partitions import Partitions, partition_of
from tickd.scheduler.plugin.api import HandlerContext, HandlerFunc, Result
from tickd.scheduler.plugin.contexts import HandlerContexts
from tickd.scheduler.plugin.outcomes import Outcome
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import EVERY_DUE, DueFilter, RunRequest, Store
from tickd.scheduler.ports.clock import FakeClock
from tickd.scheduler.run.arm import Arming
from tickd.scheduler.run.claim import Claimer
from tickd.scheduler.run.end import Ender
from tickd.scheduler.run.execute import Executor
from tickd.scheduler.run.fetch import Fetcher
from tickd.scheduler.run.ledger import RECORDED_AHEAD_SECONDS, DueRun, Ledger, Task
from tickd.scheduler.run.pool import WorkerPool
from tickd.scheduler.run.record import Recorder
from tickd.scheduler.run.states import RunState
from tickd.scheduler.run.write import Ended, Writer
from tickd.scheduler.store.sqlite import SQLiteStore

# Bounds every wait on a real event in these tests.
WAIT = 5.0
INSTANCE = "instance-a"


# -- the parts every stage is built from ------------------------------------------------------


@dataclass
class Parts:
    """What the stages share on one instance: the store, the lock, the clock, the ledger."""

    store: Store
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))
    ledger: Ledger = field(default_factory=Ledger)
    observer: RecordingObserver = field(default_factory=RecordingObserver)
    lock: MemoryLock = field(init=False)

    def __post_init__(self) -> None:
        # Lock time is the fake clock's: a lock expires as the test moves time on.
        self.lock = MemoryLock(monotonic=self.clock.monotonic)


def settings(instance_id: str = INSTANCE, **overrides: Any) -> Settings:
    return Settings(instance_id=instance_id, api_port=0, **overrides)


def fetcher(parts: Parts, *, partitions: Partitions | None = None, **overrides: Any) -> Fetcher:
    return Fetcher(
        settings=settings(**overrides),
        store=parts.store,
        domains=parts.store,
        ledger=parts.ledger,
        registry=HandlerRegistry(),
        clock=parts.clock,
        partitions=partitions,
    )


def claimer(parts: Parts, instance_id: str = INSTANCE) -> Claimer:
    return Claimer(
        settings=settings(instance_id),
        store=parts.store,
        requests=parts.store,
        lock=parts.lock,
        clock=parts.clock,
        metrics=Metrics(),
        event_source=None,
    )


def writer(parts: Parts) -> Writer:
    return Writer(
        store=parts.store,
        lock=parts.lock,
        clock=parts.clock,
        ledger=parts.ledger,
        observer=parts.observer,
        batch_size=10,
        linger_seconds=0,
    )


def ender(parts: Parts, next_stage: Writer | None = None) -> Ender:
    return Ender(
        settings=settings(),
        store=parts.store,
        requests=parts.store,
        clock=parts.clock,
        ledger=parts.ledger,
        writer=next_stage or writer(parts),
        observer=parts.observer,
        rng=random.Random(0),
    )


def recorder(parts: Parts) -> Recorder:
    return Recorder(
        settings=settings(),
        store=parts.store,
        lock=parts.lock,
        clock=parts.clock,
        ledger=parts.ledger,
        ender=ender(parts),
        observer=parts.observer,
        event_source=None,
    )


async def due(parts: Parts, *jobs: Job) -> list[DueRun]:
    """The jobs stored, as the due query reads them."""
    for job in jobs:
        await parts.store.insert_job(job)
    horizon = parts.clock.now() + timedelta(seconds=10)
    read = await parts.store.due_jobs(horizon, 100, DueFilter(exclude_handlers=[]))
    return [DueRun(job) for job in read]


async def claimed(parts: Parts, *jobs: Job, token: str = "token-a") -> list[DueRun]:
    """The jobs stored and claimed by this instance (the claim stage, as the dispatcher runs
    it)."""
    return await claimer(parts).claim(await due(parts, *jobs), parts.clock.now(), token)


async def recorded(parts: Parts, job: Job) -> Task:
    """The job claimed and its run recorded `running`: what a worker takes."""
    [run] = await claimed(parts, job)
    [task] = (await recorder(parts).record([(run, "token-a")], parts.clock.now())).tasks
    return task


def trigger(job: Job) -> RunRequest:
    return RunRequest(
        id=new_id(),
        job_id=job.id,
        scheduled_at=T0,
        reason="trigger",
        not_before=T0,
        created_at=T0,
    )


async def lock_is_free(lock: MemoryLock, key: str) -> bool:
    return key in await lock.acquire_many({key: 1.0}, "anyone-else")


# -- stand-ins for a next stage, each with the methods its stage calls ----------------------


class RecordingPool:
    """Takes the runs the arming stage releases; room for as many as the test says."""

    def __init__(self, room: int = 10) -> None:
        self.room = room
        self.released: list[Task] = []

    def free_slots(self) -> int:
        return self.room

    def starts_within(self, seconds: float) -> int:
        return 0

    def submit_fired(self, task: Task) -> None:
        self.released.append(task)


@dataclass(frozen=True)
class HandedOver:
    task: Task
    outcome: Outcome
    started: datetime
    finished: datetime
    seconds: float


class RecordingEnder:
    """Keeps what the execute stage hands the end stage."""

    def __init__(self) -> None:
        self.handed: list[HandedOver] = []

    async def hand_over(
        self, task: Task, outcome: Outcome, started: datetime, finished: datetime, seconds: float
    ) -> None:
        self.handed.append(HandedOver(task, outcome, started, finished, seconds))


class RecordingWriter:
    """Keeps the ends the end stage hands the writer, writing none."""

    def __init__(self) -> None:
        self.ends: list[Ended] = []

    def has_room(self) -> bool:
        return True

    async def room(self) -> None:
        return None

    def write_later(self, ended: Ended) -> None:
        self.ends.append(ended)


def arming(parts: Parts, pool: RecordingPool) -> Arming:
    fake_pool: WorkerPool = pool  # type: ignore[assignment]  # the workers that take fired runs
    return Arming(
        settings=settings(),
        clock=parts.clock,
        ledger=parts.ledger,
        recorder=recorder(parts),
        pool=fake_pool,
        metrics=Metrics(),
    )


@asynccontextmanager
async def executor(
    parts: Parts, handed: RecordingEnder, tmp_path: Path, func: HandlerFunc
) -> AsyncIterator[Executor]:
    """The execute stage with one handler, `work`; closed (its HTTP session too) afterwards."""
    registry = HandlerRegistry()
    registry.register("work", func)
    fake_ender: Ender = handed  # type: ignore[assignment]  # the end stage, given each outcome
    stage = Executor(
        settings=settings(),
        store=parts.store,
        cancels=parts.store,
        lock=parts.lock,
        clock=parts.clock,
        registry=registry,
        contexts=HandlerContexts(
            settings=settings(),
            clock=parts.clock,
            mailer=OutboxMailer(tmp_path / "outbox"),
            resources={},
        ),
        ender=fake_ender,
        observer=parts.observer,
    )
    try:
        yield stage
    finally:
        await stage.close()


# -- fetch --------------------------------------------------------------------------------------


async def test_a_fetch_takes_only_the_runs_a_handlers_concurrency_limit_has_room_for(
    store: Store,
) -> None:
    parts = Parts(store)
    parts.ledger.armed(DueRun(make_job("already-busy", "limited")))
    for name in ("first", "second", "third"):
        await store.insert_job(make_job(name, "limited"))

    fetched = await fetcher(parts, handler_concurrency={"limited": 2}).fetch(T0, armed_due=False)

    assert fetched is not None
    assert fetched.read == 3
    assert len(fetched.runs) == 1, "two allowed, one already busy: room for one more"
    assert parts.ledger.busy()["limited"] == 1, "fetching tells the ledger nothing"


async def test_runs_someone_asked_for_are_fetched_before_the_scheduled_ones(store: Store) -> None:
    parts = Parts(store)
    scheduled = make_job("scheduled")
    asked = make_job("asked-for", next_run_at=T0 + timedelta(hours=1))
    for job in (scheduled, asked):
        await store.insert_job(job)
    request = trigger(asked)
    await store.insert_run_requests([request])

    fetched = await fetcher(parts).fetch(T0, armed_due=False)

    assert fetched is not None
    assert [(run.job.name, run.request) for run in fetched.runs] == [
        ("asked-for", request),
        ("scheduled", None),
    ]


class SixOfEight:
    """Partitions 0-5 of 8, as a keeper would hold them."""

    count = 8

    def readable(self) -> list[int]:
        return [0, 1, 2, 3, 4, 5]


async def test_under_a_backlog_each_lane_walks_the_partitions_and_the_others_lane_reads_once(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the store reads partitions one at a time (FerretDB: a command each), a busy
    domain's lane goes on from where its last read stopped, and the others' lane, which mostly
    finds none, is one read: a walk would read every partition to find that out."""
    store = sqlite_store
    monkeypatch.setattr(store, "reads_partitions_in_turn", True)

    async def read_then_claimed(*args: Any, **kwargs: Any) -> None:
        return None  # as on FerretDB: the jobs are read, then claimed apart

    reads: list[tuple[list[str] | None, bool, list[int] | None]] = []
    due_jobs = store.due_jobs

    async def recorded(now: datetime, limit: int, where: DueFilter = EVERY_DUE) -> list[Job]:
        partitions = None if where.partitions is None else list(where.partitions)
        domains = None if where.domains is None else list(where.domains)
        reads.append((domains, where.in_turn, partitions))
        return await due_jobs(now, limit, where)

    monkeypatch.setattr(store, "claim_due_jobs", read_then_claimed)
    monkeypatch.setattr(store, "due_jobs", recorded)
    in_3 = (make_job(f"a-{n}", domain="a") for n in range(10_000))
    for job in [job for job in in_3 if partition_of(job.id, 8) == 3][:30]:
        await store.insert_job(job)
    fetch = fetcher(Parts(store), partitions=SixOfEight(), batch_size=10)
    first = await fetch.fetch(T0, armed_due=False)  # every domain at once: a backlog found
    assert first is not None and first.full

    reads.clear()
    await fetch.fetch(T0, armed_due=False)
    assert reads == [(["a"], True, [0, 1, 2, 3, 4, 5]), (None, False, [0, 1, 2, 3, 4, 5])]

    reads.clear()
    await fetch.fetch(T0, armed_due=False)  # the others' lane found none a moment ago
    assert reads == [(["a"], True, [3, 4, 5])], "0 to 2 gave none of a's: passed over"


async def test_under_a_backlog_a_store_that_claims_as_it_reads_claims_every_lane_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL claims the busy domains' heads and the others' lane in one statement, where
    each lane would be a statement of its own; every domain gets its share either way."""
    calls: Counter[str] = Counter()
    for name in ("claim_due_lanes", "claim_due_jobs", "due_jobs"):
        method = getattr(store, name)

        async def counted(*args: Any, _method: Any = method, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return await _method(*args, **kw)

        monkeypatch.setattr(store, name, counted)
    for n in range(10):
        for domain in "abc":
            due = T0 - timedelta(seconds=30 - n)
            await store.insert_job(make_job(f"{domain}-{n}", domain=domain, next_run_at=due))
    fetch = fetcher(Parts(store), batch_size=6)
    first = await fetch.fetch(T0, armed_due=False)  # every domain at once: a backlog found
    assert first is not None and first.full
    calls.clear()
    second = await fetch.fetch(T0, armed_due=False)
    assert second is not None
    assert Counter(run.job.domain for run in second.runs) == {"a": 2, "b": 2, "c": 2}
    if store.claim_is_the_lock:
        assert calls == {"claim_due_lanes": 1}
        assert all(run.claimed for run in second.runs)
    else:  # a lane a read, and the others' lane (which finds none) one more
        assert calls["due_jobs"] == 4


async def test_after_a_slow_read_of_every_domain_the_others_lane_waits_ten_times_as_long(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fetcher times its reads on its clock: where a look at every domain's head is slow
    (FerretDB decodes every free job for it), it takes a tenth of the fetches' time at most."""
    store, parts = sqlite_store, Parts(sqlite_store)
    reads: list[list[str] | None] = []
    claim_due_jobs = store.claim_due_jobs

    async def slow_for_every_domain(
        now: datetime, horizon: datetime, limit: int, **kwargs: Any
    ) -> list[Job] | None:
        domains = kwargs["where"].domains
        reads.append(None if domains is None else list(domains))
        if domains is None:
            parts.clock.advance(1.0)
        return await claim_due_jobs(now, horizon, limit, **kwargs)

    monkeypatch.setattr(store, "claim_due_jobs", slow_for_every_domain)
    for n in range(40):
        await store.insert_job(make_job(f"a-{n}", domain="a"))
    fetch = fetcher(parts, batch_size=10)
    first = await fetch.fetch(T0, armed_due=False)  # every domain at once, for a second
    assert first is not None and first.full

    reads.clear()
    await fetch.fetch(T0 + timedelta(seconds=9.9), armed_due=False)
    assert reads == [["a"]]
    reads.clear()
    await fetch.fetch(T0 + timedelta(seconds=10), armed_due=False)
    assert reads == [["a"], None]  # the others' lane, for a second: found none
    reads.clear()
    await fetch.fetch(T0 + timedelta(seconds=19.9), armed_due=False)
    assert reads == [["a"]]


async def test_a_fetch_with_no_room_left_on_the_workers_takes_nothing(store: Store) -> None:
    parts = Parts(store)
    await store.insert_job(make_job("waiting"))
    for i in range(3):  # one worker and a queue of two: full
        parts.ledger.armed(DueRun(make_job(f"held-{i}")))

    # No timers either (lookahead_limit 0): nothing may be claimed ahead of its time.
    fetched = await fetcher(parts, workers=1, queue_size=2, lookahead_limit=0).fetch(
        T0, armed_due=False
    )

    assert fetched is None


# -- claim --------------------------------------------------------------------------------------


async def test_of_two_instances_claiming_the_same_due_runs_each_run_is_won_by_one(
    store: Store,
) -> None:
    parts = Parts(store)
    runs = await due(parts, *(make_job(f"job-{i}") for i in range(3)))

    won_a, won_b = await asyncio.wait_for(
        asyncio.gather(
            claimer(parts, "instance-a").claim(runs, T0, "token-a"),
            claimer(parts, "instance-b").claim(runs, T0, "token-b"),
        ),
        WAIT,
    )

    names_a = {run.job.name for run in won_a}
    names_b = {run.job.name for run in won_b}
    assert names_a | names_b == {"job-0", "job-1", "job-2"}
    assert not names_a & names_b
    for run in (*won_a, *won_b):
        stored = await store.get_job(run.job.id)
        assert stored is not None and stored.lease is not None
        assert stored.lease.owner == ("instance-a" if run in won_a else "instance-b")


async def test_a_claim_lost_to_another_instance_releases_the_losers_locks(store: Store) -> None:
    parts = Parts(store)
    [read_by_b] = await due(parts, make_job("contested"))
    # Instance a claims it; b read it before then, and claims once a's claim lock has lapsed.
    [won] = await claimer(parts, "instance-a").claim([read_by_b], T0, "token-a")
    parts.clock.advance(won.job.timeout_seconds + 6)  # past a's lock, within its lease

    lost = await claimer(parts, "instance-b").claim([read_by_b], parts.clock.now(), "token-b")

    assert lost == []
    assert await lock_is_free(parts.lock, read_by_b.lock_key), "b let go of its lock"
    stored = await store.get_job(won.job.id)
    assert stored is not None and stored.lease is not None
    assert stored.lease.owner == "instance-a"


async def test_a_run_given_back_is_due_again_and_its_lock_free(store: Store) -> None:
    parts = Parts(store)
    [run] = await claimed(parts, make_job("given-back"), token="token-a")
    assert await due(parts) == [], "claimed: not due to anyone else"

    await claimer(parts).give_back([(run, "token-a")], "test")

    assert [again.job.name for again in await due(parts)] == ["given-back"]
    assert await lock_is_free(parts.lock, run.lock_key)


# -- arm ----------------------------------------------------------------------------------------


async def test_a_run_armed_ahead_is_recorded_just_before_its_time_and_released_at_it(
    store: Store,
) -> None:
    parts, pool = Parts(store), RecordingPool()
    stage = arming(parts, pool)
    [run] = await claimed(parts, make_job("later", next_run_at=T0 + timedelta(seconds=5)))

    stage.arm(run, "token-a", T0)
    assert parts.ledger.count(RunState.ARMED) == 1
    assert (await stage.fire(T0)).released == 0
    assert await executions(store) == []

    parts.clock.advance(5 - RECORDED_AHEAD_SECONDS)
    assert (await stage.fire(parts.clock.now())).released == 0
    [execution] = await executions(store)
    assert (execution.status, execution.started_at) == (Status.RUNNING, T0 + timedelta(seconds=5))
    assert parts.ledger.count(RunState.RECORDED) == 1
    assert parts.ledger.count(RunState.ARMED) == 0
    assert pool.released == []

    parts.clock.advance(RECORDED_AHEAD_SECONDS)
    assert (await stage.fire(parts.clock.now())).released == 1
    assert [task.job.name for task in pool.released] == ["later"]
    assert pool.released[0].fired


async def test_runs_taken_back_from_the_arming_stage_are_let_go_in_the_ledger(
    store: Store,
) -> None:
    parts = Parts(store)
    stage = arming(parts, RecordingPool())
    later = T0 + timedelta(seconds=5)
    runs = await claimed(
        parts, make_job("one", next_run_at=later), make_job("two", next_run_at=later)
    )
    for run in runs:
        stage.arm(run, "token-a", T0)
    assert parts.ledger.armed_count() == 2

    taken = stage.take_armed()

    assert sorted(run.job.name for run, _ in taken) == ["one", "two"]
    assert (parts.ledger.armed_count(), parts.ledger.own_runs()) == (0, [])


# -- record -------------------------------------------------------------------------------------


async def test_a_claimed_run_becomes_a_task_whose_execution_is_stored_running(
    store: Store,
) -> None:
    parts = Parts(store)
    [run] = await claimed(parts, make_job("now"))

    result = await recorder(parts).record([(run, "token-a")], T0)

    [task] = result.tasks
    assert (task.job.name, task.lock_token, task.claimed_at) == ("now", "token-a", T0)
    assert task.execution.status is Status.RUNNING
    [stored] = await executions(store)
    assert (stored.id, stored.status, stored.owner) == (task.execution.id, Status.RUNNING, INSTANCE)
    assert parts.observer.of("now") == [("recorded", "running")]


async def test_an_occurrence_missed_past_its_misfire_grace_is_recorded_skipped_and_not_run(
    store: Store,
) -> None:
    parts = Parts(store)
    skipping = Misfire(policy=MisfirePolicy.SKIP, grace_seconds=60)
    parts.clock.advance(90)  # the occurrence at T0 is 90 s late
    [run] = await claimed(parts, make_job("late", misfire=skipping))

    result = await recorder(parts).record([(run, "token-a")], parts.clock.now())

    assert (result.tasks, result.sharded) == ([], 0)
    [skipped] = await executions(store)
    assert (skipped.scheduled_at, skipped.status) == (T0, Status.SKIPPED)
    assert skipped.error is not None and skipped.error.type == "Misfire"
    stored = await store.get_job(run.job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == parts.clock.now() + timedelta(seconds=60), "it moves on from now"
    assert parts.ledger.own_runs() == []


async def test_a_sharded_occurrence_is_handed_to_its_shards_and_let_go(store: Store) -> None:
    parts = Parts(store)
    [run] = await claimed(parts, make_job("sharded", shards=3))
    parts.ledger.recorded(run)

    result = await recorder(parts).record([(run, "token-a")], T0)

    assert (result.tasks, result.sharded) == ([], 1)
    assert parts.ledger.own_runs() == [], "the occurrence is its shards' now"
    assert await lock_is_free(parts.lock, lock_key(run.job.id))
    entries = await store.due_run_requests(T0, 10, exclude_handlers=[], instance=INSTANCE)
    assert sorted(request.shard or 0 for request, _ in entries) == [0, 1, 2]


# -- execute ------------------------------------------------------------------------------------


async def test_a_handlers_result_reaches_the_end_stage_with_the_clocks_times(
    store: Store, tmp_path: Path
) -> None:
    parts, handed = Parts(store), RecordingEnder()

    async def work(ctx: HandlerContext) -> Result:
        parts.clock.advance(2)  # the handler takes two seconds
        return {"n": 1}

    task = await recorded(parts, make_job("works", "work"))
    async with executor(parts, handed, tmp_path, work) as stage:
        await asyncio.wait_for(stage.run(task), WAIT)

    [over] = handed.handed
    assert (over.outcome.status, over.outcome.result) == (Status.SUCCESS, {"n": 1})
    assert (over.started, over.finished, over.seconds) == (T0, T0 + timedelta(seconds=2), 2.0)
    assert over.task is task


async def test_a_handler_that_raises_ends_failed_with_its_error_type(
    store: Store, tmp_path: Path
) -> None:
    parts, handed = Parts(store), RecordingEnder()

    async def work(ctx: HandlerContext) -> Result:
        raise ValueError("no such order: 42")

    task = await recorded(parts, make_job("fails", "work"))
    async with executor(parts, handed, tmp_path, work) as stage:
        await asyncio.wait_for(stage.run(task), WAIT)

    [over] = handed.handed
    assert over.outcome.status is Status.FAILED
    assert over.outcome.error is not None
    assert (over.outcome.error.type, over.outcome.error.message) == (
        "ValueError",
        "no such order: 42",
    )


async def test_a_run_whose_job_another_instance_took_over_while_it_waited_never_starts(
    store: Store, tmp_path: Path
) -> None:
    parts, handed = Parts(store), RecordingEnder()
    ran: list[str] = []

    async def work(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    # With retries left, the reap leaves the occurrence due, for another instance to take.
    job = make_job("taken-over", "work", timeout_seconds=10, max_retries=2)
    task = await recorded(parts, job)
    # Past its lease (timeout and margin) while it waited: instance b reaps and claims the job.
    parts.clock.advance(45)
    await store.reap_expired_leases(parts.clock.now(), instance="instance-b")
    [_] = await claimer(parts, "instance-b").claim(await due(parts), parts.clock.now(), "token-b")

    async with executor(parts, handed, tmp_path, work) as stage:
        await asyncio.wait_for(stage.run(task), WAIT)

    assert ran == [], "fenced: its handler never ran"
    assert handed.handed == [], "nothing handed to the end stage"
    assert parts.observer.of("taken-over") == [
        ("recorded", "running"),
        ("fenced", "before start"),
    ]


# -- end ----------------------------------------------------------------------------------------


async def test_an_end_moves_an_interval_job_on_by_its_period_from_the_runs_end(
    store: Store,
) -> None:
    parts, writes = Parts(store), RecordingWriter()
    fake_writer: Writer = writes  # type: ignore[assignment]  # the write stage, given each end
    task = await recorded(parts, make_job("every-minute"))
    parts.ledger.started(task)
    outcome = Outcome(status=Status.SUCCESS, attempts=1, result={"n": 1})
    finished = T0 + timedelta(seconds=2)

    await ender(parts, fake_writer).hand_over(task, outcome, T0, finished, 2.0)

    [ended] = writes.ends
    execution, advance = ended.end.execution, ended.end.advance
    assert (execution.status, execution.result) == (Status.SUCCESS, {"n": 1})
    assert (execution.finished_at, execution.duration_ms) == (finished, 2000.0)
    assert advance is not None and advance.next_run_at == finished + timedelta(seconds=60)
    assert ended.lock_token == "token-a"
    assert parts.ledger.count(RunState.ENDED) == 1, "held until its end is written"


async def test_a_runs_end_is_written_and_the_ledger_holds_it_until_then(store: Store) -> None:
    parts = Parts(store)
    task = await recorded(parts, make_job("every-minute"))
    parts.ledger.started(task)
    outcome = Outcome(status=Status.SUCCESS, attempts=1, result={"n": 1})
    stage = ender(parts)

    await stage.hand_over(task, outcome, T0, T0 + timedelta(seconds=2), 2.0)
    assert parts.ledger.count(RunState.ENDED) == 1

    await asyncio.wait_for(stage.writer.settled(), WAIT)

    assert parts.ledger.own_runs() == []
    [execution] = await executions(store)
    assert (execution.status, execution.result) == (Status.SUCCESS, {"n": 1})
    stored = await store.get_job(task.job.id)
    assert stored is not None and stored.lease is None
    assert stored.next_run_at == T0 + timedelta(seconds=62), "60 s after the run ended"
    assert await lock_is_free(parts.lock, task.lock_key)
    assert ("finished", "success") in parts.observer.of("every-minute")
