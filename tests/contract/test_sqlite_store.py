"""What the SQLite store promises beyond the store contract: the dispatcher's queries read about
as many rows as they return, however many jobs wait (a burst of 30,000 must not cost 30,000 rows
a tick). Work is counted in SQLite's virtual-machine steps (its progress handler), not timed."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import scheduler.store.sqlite as sqlite_module
from scheduler.model import Job, Priority
from scheduler.ports import Claim
from scheduler.store.sqlite import SQLiteStore
from scheduler.store.sqlite_rows import job_from_row
from tests.conftest import T0, make_job

# The handler is called every this many VM steps: fine enough to tell 10 rows from 1,000.
STEPS_PER_CALL = 10


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(f"sqlite:///{tmp_path}/tickd.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def steps_of(store: SQLiteStore, call: Callable[[], Awaitable[Any]]) -> int:
    """SQLite's VM steps (to STEPS_PER_CALL) spent on the store calls `call` makes."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += STEPS_PER_CALL
        return 0  # go on

    assert store._db is not None
    store._db.set_progress_handler(count, STEPS_PER_CALL)
    try:
        await call()
    finally:
        store._db.set_progress_handler(None, STEPS_PER_CALL)
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
        assert len(await sqlite_store.due_jobs(T0, 10, starved_before=bound)) == 10

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

    monkeypatch.setattr(sqlite_module, "job_from_row", counted)
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
    assert sqlite_store._db is not None
    sqlite_store._db.execute(
        "UPDATE jobs SET consecutive_failures = 3 WHERE id = ?", (due[0].id,)
    ).connection.commit()

    won = await sqlite_store.claim_jobs([claim_of(job) for job in due], T0)

    assert {job.id: job.consecutive_failures for job in won} == {due[0].id: 3, due[1].id: 0}
    assert won == [await sqlite_store.get_job(job.id) for job in due]
