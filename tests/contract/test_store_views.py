"""The store's views, on every backend: the jobs list the API pages through (search, filters, both
orders, keyset cursors, true totals) and the dashboard's overview (a window counted whole, fire
lag of first starts, what needs attention grouped by job)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tests.conftest import T0, make_job
from tickd.scheduler.model import (
    DeadLetter,
    Execution,
    ExecutionError,
    ExecutionSummary,
    Job,
    Status,
)
from tickd.scheduler.ports.backends import JobOrder, JobSearch, Store


def ran(job: Job, status: Status) -> Job:
    summary = ExecutionSummary(execution_id=f"run-{job.name}", status=status, finished_at=T0)
    return replace(job, last_execution=summary)


def run_of(
    job: Job,
    at: datetime,
    status: Status = Status.SUCCESS,
    *,
    lag: float | None = 0.5,
    error: str | None = None,
    dead_letter: DeadLetter | None = None,
) -> Execution:
    started = None if lag is None else at + timedelta(seconds=lag)
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=at,
        status=status,
        started_at=started,
        finished_at=started or at,
        error=ExecutionError(type="RuntimeError", message=error) if error else None,
        dead_letter=dead_letter,
    )


async def every_page(store: Store, search: JobSearch) -> list[str]:
    """Names of every page, each read after the last job of the one before."""
    names: list[str] = []
    while True:
        page = await store.search_jobs(search)
        names += [job.name for job in page]
        if len(page) < search.limit:
            return names
        last = page[-1]
        search = replace(search, after_name=last.name, after_next_run_at=last.next_run_at)


async def test_a_search_finds_a_name_or_id_anywhere_ignoring_case(store: Store) -> None:
    jobs = [make_job(f"team-{i:02}.sync", "ping") for i in range(12)]
    odd = make_job("Billing_100%.export", "ping")
    for job in [*jobs, odd]:
        await store.insert_job(job)

    found = await store.search_jobs(JobSearch(text="BILLING_100%"))
    assert [job.name for job in found] == [odd.name]
    assert await store.search_jobs(JobSearch(text="y_")) == []  # `_` is not a wildcard
    by_id = await store.search_jobs(JobSearch(text=jobs[7].id[:10]))
    assert jobs[7].id in [job.id for job in by_id]
    assert await store.count_jobs(JobSearch(text="SYNC")) == 12


async def test_filters_keep_a_handler_a_state_and_a_last_status(store: Store) -> None:
    await store.insert_job(ran(make_job("a.failed", "ping"), Status.FAILED))
    await store.insert_job(ran(make_job("b.timeout", "sleep"), Status.TIMEOUT))
    await store.insert_job(ran(make_job("c.ok", "ping", enabled=False), Status.SUCCESS))
    await store.insert_job(make_job("d.never", "ping"))

    failing = JobSearch(last_status=frozenset({Status.FAILED, Status.TIMEOUT}))
    assert [j.name for j in await store.search_jobs(failing)] == ["a.failed", "b.timeout"]
    ping_failing = replace(failing, handler="ping")
    assert [j.name for j in await store.search_jobs(ping_failing)] == ["a.failed"]
    assert [j.name for j in await store.search_jobs(JobSearch(enabled=False))] == ["c.ok"]
    assert await store.count_jobs(JobSearch(handler="ping", enabled=True)) == 2


async def test_pages_by_name_cover_every_job_once_and_the_total_is_whole(store: Store) -> None:
    names = [f"job-{i:03}" for i in range(23)]
    for name in reversed(names):
        await store.insert_job(make_job(name))

    assert await every_page(store, JobSearch(limit=5)) == names
    assert await store.count_jobs(JobSearch(limit=5)) == 23


async def test_by_next_run_the_soonest_come_first_and_the_unscheduled_last(store: Store) -> None:
    soon = [make_job(f"soon-{i}", next_run_at=T0 + timedelta(minutes=i % 3)) for i in range(7)]
    never = [make_job(f"none-{i}", next_run_at=None, enabled=False) for i in range(4)]
    for job in [*never, *soon]:
        await store.insert_job(job)

    order = await every_page(store, JobSearch(order=JobOrder.NEXT_RUN, limit=3))
    expected = sorted(soon, key=lambda j: (j.next_run_at, j.name))
    assert order == [j.name for j in expected] + sorted(j.name for j in never)
    narrowed = JobSearch(order=JobOrder.NEXT_RUN, text="none", limit=2)
    assert await every_page(store, narrowed) == sorted(j.name for j in never)


async def test_stats_count_every_execution_of_the_window(store: Store) -> None:
    ping, boom = make_job("ping", "ping"), make_job("boom", "boom")
    since = T0 - timedelta(hours=1)
    runs = [run_of(ping, since + timedelta(seconds=10 * i)) for i in range(300)]
    runs += [run_of(boom, since + timedelta(minutes=i), Status.FAILED) for i in range(7)]
    runs.append(run_of(boom, since - timedelta(seconds=1), Status.FAILED))  # before the window
    await store.insert_executions(runs)

    stats = await store.execution_stats(since, T0, 600)
    assert stats.counts == {("success", "ping"): 300, ("failed", "boom"): 7}
    assert len(stats.bucket_counts) == 6
    assert stats.bucket_counts[0] == {"success": 60, "failed": 7}
    assert sum(c.get("success", 0) for c in stats.bucket_counts) == 300


async def test_fire_lag_is_each_occurrences_first_start_skips_left_out(store: Store) -> None:
    job = make_job("lagging")
    since = T0 - timedelta(minutes=10)
    runs = [run_of(job, since + timedelta(minutes=i), lag=float(i + 1)) for i in range(4)]
    # A retry of the first occurrence, much later, and a skip: neither is fire lag.
    runs.append(run_of(job, since, Status.FAILED, lag=300.0))
    runs.append(run_of(job, since + timedelta(minutes=5), Status.SKIPPED, lag=None))
    await store.insert_executions(runs)

    stats = await store.execution_stats(since, T0, 300)
    assert (stats.lag.measured, stats.lag.p50, stats.lag.p99) == (4, 2.0, 4.0)
    assert (stats.bucket_lags[0].measured, stats.bucket_lags[0].p99) == (4, 4.0)
    assert stats.bucket_lags[1].p50 is None


async def test_attention_groups_dead_letters_and_failures_by_job(store: Store) -> None:
    noisy, quiet = make_job("noisy", "boom"), make_job("quiet", "ping")
    since = T0 - timedelta(hours=1)
    runs = [
        run_of(noisy, since + timedelta(seconds=i), Status.FAILED, error=f"e{i % 5}")
        for i in range(40)
    ]
    runs.append(run_of(quiet, since, Status.TIMEOUT, error="slow", dead_letter=DeadLetter.OPEN))
    runs += [
        run_of(
            noisy, T0 - timedelta(hours=3, minutes=i), Status.FAILED, dead_letter=DeadLetter.OPEN
        )
        for i in range(17)
    ]
    await store.insert_executions(runs)

    seen = await store.attention(since, T0, T0, limit=20)
    assert [(t.job_name, t.count) for t in seen.failures] == [("noisy", 40), ("quiet", 1)]
    assert [e[1].message for e in seen.failures[0].errors if e[1]] == ["e4", "e3", "e2"]
    assert (seen.dead_letters_total, seen.dead_letter_jobs) == (18, 2)
    assert {(t.job_name, t.count) for t in seen.dead_letters} == {("noisy", 17), ("quiet", 1)}
    assert seen.failure_jobs == 2
    one = await store.attention(since, T0, T0, limit=1)
    assert [t.job_name for t in one.failures] == ["noisy"] and one.failure_jobs == 2


async def test_attention_names_jobs_failing_now_and_jobs_late(store: Store) -> None:
    await store.insert_job(make_job("failing-2", consecutive_failures=2))
    await store.insert_job(make_job("failing-5", consecutive_failures=5))
    await store.insert_job(make_job("late", next_run_at=T0 - timedelta(minutes=10)))
    await store.insert_job(make_job("due-now", next_run_at=T0))
    await store.insert_job(make_job("paused", next_run_at=T0 - timedelta(hours=1), enabled=False))

    seen = await store.attention(T0 - timedelta(hours=1), T0, T0 - timedelta(seconds=30), limit=1)
    assert [job.name for job in seen.failing] == ["failing-5"] and seen.failing_total == 2
    assert [job.name for job in seen.late] == ["late"] and seen.late_total == 1
