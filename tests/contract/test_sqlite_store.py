"""What the SQLite store promises beyond the store contract: the dispatcher's queries read about
as many rows as they return, however many jobs wait (a burst of 30,000 must not cost 30,000 rows
a tick). Work is counted in SQLite's virtual-machine steps (its progress handler), not timed."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import tickd.scheduler.store.kit.sqlite as store_kit_sqlite
import tickd.scheduler.store.sqlite.completion as completion_module
import tickd.scheduler.store.sqlite.dispatch as dispatch_module
from tests.conftest import T0, make_job
from tests.fixtures.stores import on_each_connection
from tickd.scheduler.model import Execution, Job, Priority, Status
from tickd.scheduler.ports.backends import Claim, DueFilter, ExecutionQuery, RunEnd, StoreError
from tickd.scheduler.store.sqlite import SQLiteStore
from tickd.scheduler.store.sqlite.rows import job_from_row

# The handler is called every this many VM steps: fine enough to tell 10 rows from 1,000.
STEPS_PER_CALL = 10


async def steps_of(store: SQLiteStore, call: Callable[[], Awaitable[Any]]) -> int:
    """SQLite's VM steps (to STEPS_PER_CALL) spent on the store calls `call` makes."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += STEPS_PER_CALL
        return 0  # go on

    await on_each_connection(store, lambda db: db.set_progress_handler(count, STEPS_PER_CALL))
    try:
        await call()
    finally:
        await on_each_connection(store, lambda db: db.set_progress_handler(None, STEPS_PER_CALL))
    return steps


def waiting(count: int, prefix: str, **fields: Any) -> list[Job]:
    return [make_job(f"{prefix}-{i:05}", **fields) for i in range(count)]


async def test_a_backlog_query_reads_the_jobs_it_returns_not_the_whole_backlog(
    sqlite_store: SQLiteStore,
) -> None:
    """Under a backlog the dispatcher asks for the starved first: the answer is the same batch
    whether 100 or 3,000 jobs are due, and so is the work."""
    bound = T0 - timedelta(minutes=1)
    due = {"next_run_at": T0 - timedelta(seconds=5)}
    await sqlite_store.insert_missing_jobs(waiting(100, "small", **due))

    async def batch() -> None:
        assert len(await sqlite_store.due_jobs(T0, 10, DueFilter(starved_before=bound))) == 10

    small = await steps_of(sqlite_store, batch)
    await sqlite_store.insert_missing_jobs(waiting(2_900, "large", **due))
    large = await steps_of(sqlite_store, batch)
    assert large < 2 * small, (small, large)


async def test_jobs_not_due_yet_are_not_read_by_the_due_query(sqlite_store: SQLiteStore) -> None:
    """Critical jobs due tomorrow do not slow down finding the normal ones due now."""
    tomorrow = {"next_run_at": T0 + timedelta(days=1), "priority": Priority.CRITICAL}
    await sqlite_store.insert_missing_jobs(waiting(10, "now"))
    await sqlite_store.insert_missing_jobs(waiting(100, "few-later", **tomorrow))

    async def batch() -> None:
        assert len(await sqlite_store.due_jobs(T0, 10)) == 10

    few = await steps_of(sqlite_store, batch)
    await sqlite_store.insert_missing_jobs(waiting(2_900, "many-later", **tomorrow))
    many = await steps_of(sqlite_store, batch)
    assert many < 2 * few, (few, many)


def claim_of(job: Job) -> Claim:
    return Claim(
        job_id=job.id,
        revision=job.revision,
        next_run_at=job.next_run_at,
        owner="instance-a",
        until=T0 + timedelta(minutes=5),
    )


def count_decoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the jobs the store decodes from their rows."""
    decoded: list[str] = []

    def counted(row: sqlite3.Row) -> Job:
        decoded.append(row["id"])
        return job_from_row(row)

    monkeypatch.setattr(dispatch_module, "job_from_row", counted)
    return decoded


async def test_a_claim_returns_the_jobs_the_due_query_read_without_decoding_them_again(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding a job is most of a claim's cost in a burst: the jobs read a moment before by the
    due query are the claim's answer, with the claim's lease."""
    await sqlite_store.insert_missing_jobs(waiting(20, "due"))
    due = await sqlite_store.due_jobs(T0, 20)
    decoded = count_decoded(monkeypatch)

    won = await sqlite_store.claim_jobs([claim_of(job) for job in due], T0)

    assert decoded == []
    stored = [await sqlite_store.get_job(job.id) for job in due]
    assert won == stored
    assert all(job.lease is not None and job.lease.owner == "instance-a" for job in won)


async def test_a_job_changed_between_the_due_query_and_its_claim_is_claimed_as_stored(
    sqlite_store: SQLiteStore,
) -> None:
    """What a run's end writes beside the schedule (failures in a row, the last execution) does
    not change the revision the claim compares: the claim answers the row, not the earlier read."""
    await sqlite_store.insert_missing_jobs(waiting(2, "due"))
    due = await sqlite_store.due_jobs(T0, 2)
    sql = "UPDATE jobs SET consecutive_failures = 3 WHERE id = ?"
    await sqlite_store._run(lambda db: db.execute(sql, (due[0].id,)))

    won = await sqlite_store.claim_jobs([claim_of(job) for job in due], T0)

    assert {job.id: job.consecutive_failures for job in won} == {due[0].id: 3, due[1].id: 0}
    assert won == [await sqlite_store.get_job(job.id) for job in due]


# -- the engine's batches, run on the loop's thread while the store's thread is idle -----------


def running(job: Job) -> Execution:
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=T0,
        status=Status.RUNNING,
        started_at=T0,
        owner="instance-a",
        token=1,
    )


def succeeded(record: Execution) -> Execution:
    return record.ended(
        status=Status.SUCCESS,
        started_at=T0,
        finished_at=T0,
        duration_ms=1.0,
        attempts=1,
        error=None,
        result=None,
    )


async def test_a_batch_never_joins_a_transaction_open_on_the_stores_thread(
    sqlite_store: SQLiteStore,
) -> None:
    """The one connection is never used by two threads at once: a batch that comes while a
    call is under way on the store's thread waits for it, and so does not commit that call's
    half-done writes with its own when that call is rolled back."""
    job = make_job("batched")
    await sqlite_store.insert_missing_jobs([job])
    written, go_on = threading.Event(), threading.Event()

    def half_done_then_fails(db: sqlite3.Connection) -> None:
        db.execute("UPDATE jobs SET consecutive_failures = 7 WHERE id = ?", (job.id,))
        written.set()
        assert go_on.wait(5)
        raise RuntimeError("rolled back")

    slow = asyncio.ensure_future(sqlite_store._run(half_done_then_fails))
    assert await asyncio.to_thread(written.wait, 5)
    batch = asyncio.ensure_future(sqlite_store.insert_executions([running(job)]))
    await asyncio.sleep(0)
    go_on.set()
    with pytest.raises(RuntimeError):
        await slow
    await asyncio.wait_for(batch, 5)

    stored = await sqlite_store.get_job(job.id)
    assert stored is not None and stored.consecutive_failures == 0
    assert len(await sqlite_store.list_executions(ExecutionQuery(job_id=job.id))) == 1


async def test_a_batch_never_holds_the_loop_while_another_process_writes(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    """A database locked by another process (a tool writing to the same file) sends the batch
    to the store's thread, which waits there for the lock: the loop goes on meanwhile, and the
    batch is written once the lock is let go."""
    job = make_job("batched")
    await sqlite_store.insert_missing_jobs([job])
    other = sqlite3.connect(tmp_path / "tickd.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock
    loop, loops_thread = asyncio.get_running_loop(), threading.get_ident()
    tried_on_the_thread = threading.Event()

    def traced(statement: str) -> None:
        if statement.startswith("INSERT") and threading.get_ident() != loops_thread:
            tried_on_the_thread.set()

    await on_each_connection(sqlite_store, lambda db: db.set_trace_callback(traced))
    try:
        before = loop.time()
        batch = asyncio.ensure_future(sqlite_store.insert_executions([running(job)]))
        assert await asyncio.to_thread(tried_on_the_thread.wait, 5)
        assert not batch.done()  # neither failed nor written: waiting for the lock, off the loop
        # ... and not after holding the loop for the time a write waits for a lock (5 s).
        assert loop.time() - before < store_kit_sqlite.BUSY_TIMEOUT_MS / 1000 / 2
    finally:
        other.execute("COMMIT")
        other.close()
    await asyncio.wait_for(batch, 5)

    assert len(await sqlite_store.list_executions(ExecutionQuery(job_id=job.id))) == 1


async def test_a_batch_too_large_to_write_in_a_moment_is_written_off_the_loop(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Misfire skips (up to a thousand a job) can make a batch's insert large: beyond
    AT_ONCE_MAX_ROWS a batch of records or of ends is written on the store's thread, and the
    loop goes on meanwhile."""
    for role in (dispatch_module, completion_module):
        monkeypatch.setattr(role, "AT_ONCE_MAX_ROWS", 2)
    jobs = waiting(3, "skipped")
    await sqlite_store.insert_missing_jobs(jobs)
    loops_thread = threading.get_ident()
    on_the_loop: list[bool] = []

    def traced(statement: str) -> None:
        if statement.startswith(("INSERT", "UPDATE")):
            on_the_loop.append(threading.get_ident() == loops_thread)

    async def written_on_the_loop(call: Awaitable[object]) -> set[bool]:
        on_the_loop.clear()
        await call
        return set(on_the_loop)

    await on_each_connection(sqlite_store, lambda db: db.set_trace_callback(traced))
    records = [running(job) for job in jobs]
    ends = [RunEnd(succeeded(record), None) for record in records]

    assert await written_on_the_loop(sqlite_store.insert_executions(records[:2])) == {True}
    assert await written_on_the_loop(sqlite_store.insert_executions(records[2:])) == {True}
    assert await written_on_the_loop(sqlite_store.write_ends(ends[:2])) == {True}
    assert await written_on_the_loop(sqlite_store.insert_executions(records)) == {False}
    assert await written_on_the_loop(sqlite_store.write_ends(ends)) == {False}


async def test_batches_run_on_the_loop_still_have_their_log_checkpointed(
    sqlite_store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch run on the loop's thread never makes a checkpoint (it syncs the disk); the
    store's thread makes one every so many of them, so the write-ahead log does not grow
    without end in a daemon whose store's thread is otherwise idle."""
    monkeypatch.setattr(store_kit_sqlite, "AT_ONCE_PER_CHECKPOINT", 20)
    jobs = waiting(400, "logged")
    await sqlite_store.insert_missing_jobs(jobs)
    wal = tmp_path / "tickd.db-wal"
    for job in jobs:
        await sqlite_store.insert_executions([running(job)])
        for _ in range(3):  # the checkpoint's turn on the store's thread
            await asyncio.sleep(0)
    # Unchecked, 400 batches leave a log of about 12 MB (7 pages a batch).
    assert wal.stat().st_size < 4 * 1024 * 1024, wal.stat().st_size


async def test_a_batch_run_while_a_cancelled_call_is_still_on_the_thread_is_a_transaction_apart(
    sqlite_store: SQLiteStore,
) -> None:
    """A caller that stops waiting (its await cancelled) leaves its transaction running on the
    store's thread. A batch run at once meanwhile is a transaction of its own: it neither
    commits what the other has written so far nor is undone when the other rolls back."""
    job = make_job("raced")
    await sqlite_store.insert_missing_jobs([job])
    inside, release = threading.Event(), threading.Event()

    def write_then_fail(db: sqlite3.Connection) -> None:
        db.execute("UPDATE jobs SET consecutive_failures = 7 WHERE id = ?", (job.id,))
        inside.set()
        release.wait(5)
        raise sqlite3.IntegrityError("this transaction fails")

    abandoned = asyncio.ensure_future(sqlite_store._run(write_then_fail))
    assert await asyncio.to_thread(inside.wait, 5)
    abandoned.cancel()
    await asyncio.gather(abandoned, return_exceptions=True)

    batch = asyncio.ensure_future(sqlite_store.insert_executions([running(job)]))
    await asyncio.sleep(0)  # the batch's turn, while the thread is inside the other transaction
    release.set()
    await asyncio.wait_for(batch, 5)

    stored = await sqlite_store.get_job(job.id)
    assert stored is not None and stored.consecutive_failures == 0, "the rollback held"
    assert len(await sqlite_store.list_executions(ExecutionQuery(job_id=job.id))) == 1


async def test_a_file_that_is_not_a_database_is_refused_at_open_as_no_retry_cures(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tickd.db"
    path.write_bytes(b"not a database, " * 512)
    store = SQLiteStore(f"sqlite:///{path}")

    with pytest.raises(StoreError, match="file is not a database") as refused:
        await store.open()

    assert not refused.value.transient
    assert str(path) in str(refused.value)
    await store.close()  # closing what failed to open is harmless


async def test_a_cursor_is_closed_on_the_thread_of_its_connection_not_returned(
    sqlite_store: SQLiteStore,
) -> None:
    """A cursor freed on another thread resets its statement, which the connection's thread may
    be running for another call at that moment: what a transaction returns is never one."""
    returned = await sqlite_store._run(lambda db: db.execute("SELECT 1"))
    assert returned is None
