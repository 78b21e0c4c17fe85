"""What the SQLite store's views promise beyond the contract: a page of the jobs list, in either
order and with a filter an index serves, reads about as many rows as it returns, however many
jobs there are. Work is counted in SQLite's virtual-machine steps, not timed: a read looks at its
clock every READ_CHECK_STEPS steps, and the test's clock counts the looks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.model import ExecutionSummary, Job, Status
from tickd.scheduler.ports.backends import JobOrder, JobSearch
from tickd.scheduler.store.kit import sqlite as kit
from tickd.scheduler.store.sqlite import SQLiteStore

PAGE = 50
SEARCHES = {
    "by name": JobSearch(limit=PAGE),
    "by next run": JobSearch(order=JobOrder.NEXT_RUN, limit=PAGE),
    "a handler, by next run": JobSearch(handler="ping", order=JobOrder.NEXT_RUN, limit=PAGE),
    "a handler, by name": JobSearch(handler="ping", limit=PAGE),
    "a domain, by name": JobSearch(domain="payments", limit=PAGE),
    "a domain, by next run": JobSearch(domain="payments", order=JobOrder.NEXT_RUN, limit=PAGE),
    "last run failed": JobSearch(last_status=frozenset({Status.FAILED}), limit=PAGE),
    "a page further on": JobSearch(order=JobOrder.NEXT_RUN, limit=PAGE, after_name="j-00100",
                                   after_next_run_at=T0 + timedelta(seconds=100)),
}  # fmt: skip


STEPS_PER_LOOK = 10


async def steps_of(
    store: SQLiteStore, call: Callable[[], Awaitable[object]], monkeypatch: pytest.MonkeyPatch
) -> int:
    """SQLite's VM steps (to STEPS_PER_LOOK) the reads `call` makes take."""
    looks = 0

    def clock() -> float:
        nonlocal looks
        looks += 1
        return 0.0

    monkeypatch.setattr(kit, "READ_CHECK_STEPS", STEPS_PER_LOOK)
    monkeypatch.setattr(store, "read_clock", clock)
    await call()
    reads = 1  # each read looks once at its start
    return (looks - reads) * STEPS_PER_LOOK


def jobs(count: int) -> list[Job]:
    failed = ExecutionSummary(execution_id="run", status=Status.FAILED, finished_at=T0)
    made = []
    for i in range(count):
        job = make_job(
            f"j-{i:05}", "ping", next_run_at=T0 + timedelta(seconds=i), domain="payments"
        )
        made.append(replace(job, last_execution=failed) if i % 2 else job)
    return made


def others(count: int) -> list[Job]:
    """Jobs that sort before the others by name and by next run, of another handler and domain,
    never run: a page that walked past the ones its filter drops would read them all."""
    return [
        make_job(f"a-{i:05}", "sleep", next_run_at=T0 - timedelta(seconds=i)) for i in range(count)
    ]


@pytest.mark.parametrize("search", SEARCHES.values(), ids=SEARCHES.keys())
async def test_a_page_reads_the_jobs_it_returns_not_every_job(
    sqlite_store: SQLiteStore, search: JobSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sqlite_store.insert_missing_jobs(jobs(300))

    async def page() -> None:
        assert len(await sqlite_store.search_jobs(search)) == PAGE

    few = await steps_of(sqlite_store, page, monkeypatch)
    await sqlite_store.insert_missing_jobs(others(6_000))
    many = await steps_of(sqlite_store, page, monkeypatch)
    assert many < 2 * few, (few, many)
