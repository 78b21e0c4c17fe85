"""The reads a token limited to domains is answered from, on every backend: executions, dead
letters, the jobs list, the overview's figures and the due backlog keep exactly what belongs to
jobs of the domains asked for, in the same read (SQL reads the jobs table with the executions,
MongoDB the domains' job ids first), and an execution whose job was deleted belongs to none."""

from __future__ import annotations

from datetime import timedelta

from tests.conftest import T0, make_job
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job, Status
from tickd.scheduler.ports.backends import ExecutionQuery, JobSearch, Store

PAYMENTS = frozenset({"payments"})
SINCE = T0 - timedelta(hours=1)
UNTIL = T0 + timedelta(minutes=1)


def run_of(job: Job, minutes_ago: int, status: Status = Status.SUCCESS) -> Execution:
    at = T0 - timedelta(minutes=minutes_ago)
    failed = status is Status.FAILED
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=at,
        status=status,
        started_at=at + timedelta(seconds=1),
        finished_at=at + timedelta(seconds=2),
        attempts=1,
        error=ExecutionError(type="RuntimeError", message="no") if failed else None,
        dead_letter=DeadLetter.OPEN if failed else None,
    )


async def seeded(store: Store) -> dict[str, Job]:
    """A job in payments, one in search, one in default (stored as a job naming none), one of
    payments deleted; each with a success and an open dead letter."""
    jobs = {
        "pay": make_job("pay", domain="payments", next_run_at=T0 - timedelta(minutes=5)),
        "find": make_job("find", domain="search", next_run_at=T0 - timedelta(minutes=5)),
        "plain": make_job("plain", next_run_at=T0 - timedelta(minutes=5)),
        "gone": make_job("gone", domain="payments"),
    }
    await store.insert_missing_jobs(list(jobs.values()))
    for job in jobs.values():
        await store.insert_executions([run_of(job, 10), run_of(job, 20, Status.FAILED)])
    await store.delete_job(jobs["gone"].id)
    return jobs


async def test_executions_are_kept_to_the_jobs_of_the_domains(store: Store) -> None:
    jobs = await seeded(store)

    async def names(**query: object) -> list[str]:
        runs = await store.list_executions(ExecutionQuery(**query))  # type: ignore[arg-type]
        return sorted({e.job_name for e in runs})

    assert await names() == ["find", "gone", "pay", "plain"]
    assert await names(domains=PAYMENTS) == ["pay"], "the deleted job's runs are in no domain"
    assert await names(domains=frozenset({"payments", "default"})) == ["pay", "plain"]
    assert await names(domains=PAYMENTS, job_id=jobs["find"].id) == []
    assert await names(domains=PAYMENTS, job_id=jobs["pay"].id) == ["pay"]
    assert await names(domains=PAYMENTS, dead_letter=DeadLetter.OPEN) == ["pay"]
    assert await names(domains=frozenset({"nobody"})) == []
    page = await store.list_executions(ExecutionQuery(domains=PAYMENTS, limit=1))
    assert [(e.job_name, e.status) for e in page] == [("pay", Status.SUCCESS)]


async def test_the_jobs_list_and_its_count_keep_the_domains(store: Store) -> None:
    await seeded(store)
    found = await store.search_jobs(JobSearch(domains=frozenset({"search", "default"})))
    assert [j.name for j in found] == ["find", "plain"]
    assert await store.count_jobs(JobSearch(domains=PAYMENTS)) == 1
    assert await store.count_jobs(JobSearch(domains=PAYMENTS, domain="search")) == 0


async def test_the_overview_counts_only_the_domains_runs_and_jobs(store: Store) -> None:
    await seeded(store)
    every = await store.execution_stats(SINCE, UNTIL, 60)
    scoped = await store.execution_stats(SINCE, UNTIL, 60, domains=PAYMENTS)
    assert sum(every.counts.values()) == 8
    assert scoped.counts == {("success", "noop"): 1, ("failed", "noop"): 1}
    assert sum(sum(bucket.values()) for bucket in scoped.bucket_counts) == 2
    assert scoped.lag.measured == 2

    seen = await store.attention(SINCE, UNTIL, T0, limit=20, domains=PAYMENTS)
    assert [t.job_name for t in seen.dead_letters] == ["pay"]
    assert (seen.dead_letters_total, seen.dead_letter_jobs) == (1, 1)
    assert [t.job_name for t in seen.failures] == ["pay"]
    assert [j.name for j in seen.late] == ["pay"] and seen.late_total == 1
    assert seen.failing == [] and seen.failing_total == 0
    every_attention = await store.attention(SINCE, UNTIL, T0, limit=20)
    assert every_attention.dead_letters_total == 3, "the deleted job's was discarded with it"

    assert (await store.due_backlog(T0, domains=PAYMENTS)).due == 1
    assert (await store.due_backlog(T0, domains=frozenset({"default", "search"}))).due == 2
    assert (await store.due_backlog(T0)).due == 3
