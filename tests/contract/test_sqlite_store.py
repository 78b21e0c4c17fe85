"""What the SQLite store promises beyond the store contract: the dispatcher's queries read about
as many rows as they return, however many jobs wait (a burst of 30,000 must not cost 30,000 rows
a tick). Work is counted in SQLite's virtual-machine steps (its progress handler), not timed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.model import Job, Priority
from scheduler.store.sqlite import SQLiteStore
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
