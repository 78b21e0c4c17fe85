"""The reads ops make on the SQLite store run on connections of their own, off the engine's
writer, each within a time limit: a week of stats over a large executions table neither holds up
the engine's claims and ends nor stalls itself, and a read stopped at its limit says so.

A read is made slow on purpose: a trace callback, which SQLite calls as a statement starts on the
connection's own thread, holds the stats statement until the test lets it go, or moves the
read's clock past its limit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from tests.api.conftest import READ, Api, serving
from tests.conftest import T0, EngineFactory, make_job
from tests.contract.test_store import advance_to, claimed, finish_one, running
from tests.fixtures.stores import on_each_connection
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.ports.store_values import ExecutionQuery, JobQuery, JobSearch
from tickd.scheduler.store.kit import sqlite as kit
from tickd.scheduler.store.sqlite import SQLiteStore

WEEK = 604800  # /v1/stats?window=604800
BUCKET_SECONDS = 10080  # the API's bucket for that window: 60 of them
SINCE = T0 - timedelta(seconds=WEEK)
UNTIL = T0 + timedelta(microseconds=1)
# The statement of the stats read that counts a bucket's executions.
COUNTING = "count(*) FROM executions"
WAIT = 10.0  # seconds: the most any step of a test waits for another


@pytest.fixture
def store(sqlite_store: SQLiteStore) -> SQLiteStore:
    """Every test here is of the SQLite store alone."""
    return sqlite_store


class HeldStatement:
    """Holds the statements containing `text`, on whichever connection they run, until let go."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.started = threading.Event()
        self.let_go = threading.Event()

    def traced(self, statement: str) -> None:
        if self.text in statement:
            self.started.set()
            self.let_go.wait(WAIT)


def executions(buckets_ago: range, each: int) -> list[Execution]:
    """`each` successful runs in each of these buckets of the week, counted back from the newest
    (0), a second apart from the bucket's start."""
    made = []
    for ago in buckets_ago:
        start = SINCE + timedelta(seconds=(59 - ago) * BUCKET_SECONDS)
        for i in range(each):
            scheduled = start + timedelta(seconds=i)
            made.append(
                Execution(
                    job_id=f"id-{ago}-{i}",
                    job_name=f"job-{ago}-{i}",
                    handler="ping",
                    scheduled_at=scheduled,
                    status=Status.SUCCESS,
                    started_at=scheduled,
                    finished_at=scheduled,
                )
            )
    return made


async def test_the_engine_claims_and_finishes_while_a_week_of_stats_is_being_read(
    store: SQLiteStore,
) -> None:
    job = make_job()
    await store.insert_job(job)
    await store.insert_executions(executions(range(3), each=5))
    held = HeldStatement(COUNTING)
    await on_each_connection(store, lambda db: db.set_trace_callback(held.traced))
    read = asyncio.create_task(store.execution_stats(SINCE, UNTIL, BUCKET_SECONDS))
    try:
        assert await asyncio.to_thread(held.started.wait, WAIT), "the stats read never started"
        won = await asyncio.wait_for(claimed(store, job), WAIT / 2)
        execution = running(won, won.lease.token)  # type: ignore[union-attr]
        await asyncio.wait_for(store.insert_executions([execution]), WAIT / 2)
        done = replace(execution, status=Status.SUCCESS, finished_at=T0, attempts=1)
        ended = finish_one(store, done, advance_to(T0 + timedelta(minutes=1), done))
        assert await asyncio.wait_for(ended, WAIT / 2)
        assert not read.done(), "the stats read ended before the engine's writes"
    finally:
        held.let_go.set()
    figures = await asyncio.wait_for(read, WAIT)
    assert figures.counted_since is None
    assert figures.counts[("success", "ping")] == 3 * 5


# The reads ops make, each on a job with one execution due at T0.
API_READS: dict[str, Callable[[SQLiteStore, str, str], Awaitable[object]]] = {
    "a job": lambda store, job_id, _: store.get_job(job_id),
    "a job by name": lambda store, _, __: store.get_job_by_name("job"),
    "the jobs": lambda store, _, __: store.list_jobs(JobQuery()),
    "a page of jobs": lambda store, _, __: store.search_jobs(JobSearch()),
    "how many jobs": lambda store, _, __: store.count_jobs(JobSearch()),
    "an execution": lambda store, _, execution_id: store.get_execution(execution_id),
    "the executions": lambda store, _, __: store.list_executions(ExecutionQuery()),
    "a week of stats": lambda store, _, __: store.execution_stats(SINCE, UNTIL, BUCKET_SECONDS),
    "what needs attention": lambda store, _, __: store.attention(SINCE, UNTIL, T0, limit=20),
    "a run asked for": lambda store, job_id, _: store.run_request_pending(job_id, T0),
    "runs asked for": lambda store, job_id, _: store.count_pending_requests(
        job_id, reason="trigger"
    ),
    "runs at times": lambda store, job_id, _: store.executions_at(job_id, [T0]),
}


@pytest.mark.parametrize("read", API_READS.values(), ids=API_READS.keys())
async def test_a_read_answers_while_the_writer_is_busy(
    store: SQLiteStore, read: Callable[[SQLiteStore, str, str], Awaitable[object]]
) -> None:
    job = make_job()
    await store.insert_job(job)
    execution = running(job, 1)
    await store.insert_executions([execution])
    let_go = threading.Event()
    busy = asyncio.create_task(store._in_thread(lambda db: let_go.wait(WAIT)))
    try:
        await asyncio.wait_for(read(store, job.id, execution.id), WAIT / 2)
        assert not busy.done(), "the writer's thread was free before the read answered"
    finally:
        let_go.set()
    await busy


class ReadClock:
    """The readers' clock, moved past their limit when the `nth` counting statement starts."""

    def __init__(self, nth: int) -> None:
        self.now = 0.0
        self.nth = nth
        self.counted = 0

    def __call__(self) -> float:
        return self.now

    def traced(self, statement: str) -> None:
        if COUNTING in statement:
            self.counted += 1
            if self.counted == self.nth:
                self.now += kit.READ_SECONDS * 2


async def a_stats_read_stopped_in_its_third_bucket(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kit, "READ_CHECK_STEPS", 10)  # a few rows a bucket make enough steps
    clock = ReadClock(nth=3)
    monkeypatch.setattr(store, "read_clock", clock)
    await on_each_connection(store, lambda db: db.set_trace_callback(clock.traced))
    await store.insert_executions(executions(range(4), each=20))


async def test_a_stats_read_past_its_time_limit_answers_for_its_newest_buckets_and_says_so(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await a_stats_read_stopped_in_its_third_bucket(store, monkeypatch)

    figures = await asyncio.wait_for(store.execution_stats(SINCE, UNTIL, BUCKET_SECONDS), WAIT)

    assert figures.counted_since == SINCE + timedelta(seconds=58 * BUCKET_SECONDS)
    assert figures.counts == {("success", "ping"): 2 * 20}
    assert figures.bucket_counts[58:] == [{"success": 20}, {"success": 20}]
    assert all(not counts for counts in figures.bucket_counts[:58])
    assert figures.lag.measured == 2 * 20


class TickingClock:
    """A clock on which each look takes a second."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


async def test_a_read_past_its_time_limit_that_cannot_answer_in_part_fails_saying_so(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.insert_missing_jobs([make_job(f"job-{i:03}") for i in range(50)])
    monkeypatch.setattr(kit, "READ_CHECK_STEPS", 10)
    store.read_clock = TickingClock()

    with pytest.raises(StoreError, match="the read took over 5 s and was stopped"):
        await asyncio.wait_for(store.list_jobs(JobQuery(limit=100)), WAIT)

    store.read_clock = lambda: 0.0
    assert len(await store.list_jobs(JobQuery(limit=100))) == 50  # the next read has its own


@pytest.fixture
async def api_on_sqlite(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine) as served:
        yield served


async def test_the_stats_api_says_its_figures_are_partial_and_since_when(
    api_on_sqlite: Api, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = api_on_sqlite
    assert api.store is store
    api.clock.set(T0)
    await a_stats_read_stopped_in_its_third_bucket(store, monkeypatch)

    status, body, _ = await api.call("GET", f"/v1/stats?window={WEEK}", token=READ)

    assert status == 200, body
    counted_since = SINCE + timedelta(seconds=58 * BUCKET_SECONDS)
    assert body["complete"] is False
    assert datetime.fromisoformat(body["counted_since"]) == counted_since
    assert "time limit" in body["partial_reason"]
    assert body["totals"] == {"success": 40}


async def test_the_stats_api_says_whole_figures_are_complete(
    api_on_sqlite: Api, store: SQLiteStore
) -> None:
    api = api_on_sqlite
    api.clock.set(T0)
    await store.insert_executions(executions(range(4), each=20))

    status, body, _ = await api.call("GET", f"/v1/stats?window={WEEK}", token=READ)

    assert status == 200, body
    assert body["complete"] is True
    assert body["counted_since"] is None
    assert body["partial_reason"] is None
    assert body["totals"] == {"success": 80}
