"""A run whose worker or instance dies each time (its lease expires, the reaper abandons it) is
run again only within its job's retries: the store counts an occurrence's abandonments, and
the one past max_retries + 1 attempts is the occurrence's dead letter, on every backend."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tests.conftest import T0, make_job
from tickd.scheduler.model import (
    DeadLetter,
    Execution,
    ExecutionError,
    Job,
    OnceSchedule,
    Status,
)
from tickd.scheduler.ports.backends import Claim, ExecutionQuery, RunEnd, RunRequest, Store

LEASE = timedelta(seconds=5)
# A run that kills its worker every time is never run more often than this, whatever its job.
ENOUGH_EXPIRIES = 30


async def run_and_die(store: Store, job_id: str, now: datetime) -> Execution | None:
    """Claim the job's due occurrence, record its run, then let its lease expire unended (the
    worker died) and reap it. None when nothing was due."""
    job = await store.get_job(job_id)
    assert job is not None
    if not job.enabled or job.next_run_at is None or job.next_run_at > now:
        return None
    claim = Claim(
        job_id=job.id,
        revision=job.revision,
        next_run_at=job.next_run_at,
        owner="instance-a",
        until=now + LEASE,
    )
    [won] = await store.claim_jobs([claim], now)
    assert won.lease is not None
    await store.insert_executions([running(won, won.lease.token, now)])
    [reaped] = await store.reap_expired_leases(now + LEASE + timedelta(seconds=1))
    return reaped


def running(job: Job, token: int, now: datetime) -> Execution:
    assert job.next_run_at is not None
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=job.next_run_at,
        status=Status.RUNNING,
        started_at=now,
        owner="instance-a",
        token=token,
    )


async def runs_until_given_up(store: Store, job: Job) -> list[Execution]:
    """Every run of the job's first occurrence, each dying, until the occurrence is not due
    again (or ENOUGH_EXPIRIES: a store that never gives up)."""
    runs: list[Execution] = []
    now = T0
    while len(runs) < ENOUGH_EXPIRIES:
        reaped = await run_and_die(store, job.id, now)
        if reaped is None or reaped.scheduled_at != T0:
            break
        runs.append(reaped)
        now += LEASE + timedelta(seconds=2)
    return runs


async def test_a_run_with_no_retries_whose_worker_dies_is_a_dead_letter_at_the_first_expiry(
    store: Store,
) -> None:
    job = make_job("dies", max_retries=0)
    await store.insert_job(job)

    runs = await runs_until_given_up(store, job)

    assert len(runs) == 1
    [given_up] = runs
    assert given_up.status is Status.ABANDONED
    assert given_up.dead_letter is DeadLetter.OPEN
    assert given_up.error is not None and given_up.error.type == "Abandoned"
    assert "abandoned 1 times" in given_up.error.message
    assert await store.count_dead_letters() == {("noop", "default"): 1}
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None
    assert after.next_run_at is not None and after.next_run_at > T0, "the schedule moved on"
    assert after.consecutive_failures == 1
    stored = await store.list_executions(ExecutionQuery(job_id=job.id))
    assert [(e.id, e.dead_letter) for e in stored] == [(given_up.id, DeadLetter.OPEN)]


async def test_a_run_with_two_retries_whose_worker_dies_runs_at_most_three_times(
    store: Store,
) -> None:
    job = make_job("dies-thrice", max_retries=2)
    await store.insert_job(job)

    runs = await runs_until_given_up(store, job)

    assert len(runs) == 3
    assert [e.dead_letter for e in runs] == [None, None, DeadLetter.OPEN]
    assert runs[-1].error is not None and "abandoned 3 times" in runs[-1].error.message
    assert await store.count_dead_letters() == {("noop", "default"): 1}


async def test_a_once_job_whose_run_dies_past_its_retries_is_done(store: Store) -> None:
    job = make_job("once", schedule=OnceSchedule(at=T0), max_retries=0)
    await store.insert_job(job)

    runs = await runs_until_given_up(store, job)

    assert [e.dead_letter for e in runs] == [DeadLetter.OPEN]
    after = await store.get_job(job.id)
    assert after is not None and after.next_run_at is None and not after.enabled


async def test_a_run_stopped_at_a_graceful_shutdown_does_not_count_as_abandoned(
    store: Store,
) -> None:
    job = make_job("deployed", max_retries=0)
    await store.insert_job(job)
    [won] = await store.claim_jobs(
        [Claim(job_id=job.id, revision=1, next_run_at=T0, owner="instance-a", until=T0 + LEASE)],
        T0,
    )
    assert won.lease is not None
    execution = running(won, won.lease.token, T0)
    await store.insert_executions([execution])
    stopped = execution.ended(
        status=Status.ABANDONED,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        duration_ms=1000.0,
        attempts=1,
        error=ExecutionError(type="Shutdown", message="cancelled"),
        result=None,
    )
    await store.write_ends([RunEnd(stopped, None)])  # given back, as at a shutdown

    runs = await runs_until_given_up(store, job)

    assert [e.dead_letter for e in runs] == [DeadLetter.OPEN]
    assert runs[0].error is not None and "abandoned 1 times" in runs[0].error.message


async def test_a_requested_run_abandoned_past_its_retries_leaves_the_queue_and_the_schedule(
    store: Store,
) -> None:
    later = T0 + timedelta(hours=1)
    job = make_job("triggered", max_retries=0, next_run_at=later)
    await store.insert_job(job)
    request = RunRequest(
        id="trigger-1",
        job_id=job.id,
        scheduled_at=T0,
        reason="trigger",
        not_before=T0,
        created_at=T0,
    )
    await store.insert_run_requests([request])
    [(taken, read)] = await store.due_run_requests(T0, 10)
    claim = Claim(
        job_id=job.id, revision=read.revision, next_run_at=None, owner="me", until=T0 + LEASE
    )
    [(_, won)] = await store.claim_run_requests([taken], [claim], T0)
    assert won.lease is not None
    run = replace(running(won, won.lease.token, T0), scheduled_at=T0, requested="trigger")
    await store.insert_executions([run])

    [reaped] = await store.reap_expired_leases(T0 + LEASE + timedelta(seconds=1))

    assert reaped.dead_letter is DeadLetter.OPEN
    assert await store.due_run_requests(T0 + timedelta(minutes=1), 10) == []
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None and after.next_run_at == later


async def test_a_reap_stopped_before_its_dead_letter_was_written_is_finished_by_the_next(
    store: Store,
) -> None:
    """The run is marked abandoned and its lease still held (the reaper's instance died in
    between): the next reap writes the dead letter rather than give the occurrence back."""
    job = make_job("reaper-died", max_retries=0)
    await store.insert_job(job)
    [won] = await store.claim_jobs(
        [Claim(job_id=job.id, revision=1, next_run_at=T0, owner="instance-a", until=T0 + LEASE)],
        T0,
    )
    assert won.lease is not None
    marked = replace(
        running(won, won.lease.token, T0),
        status=Status.ABANDONED,
        finished_at=T0 + LEASE + timedelta(seconds=1),
        error=ExecutionError(type="LeaseExpired", message="the lease expired before the run ended"),
    )
    await store.insert_executions([marked])

    later = T0 + LEASE + timedelta(seconds=30)
    assert await store.reap_expired_leases(later) == [], "nothing newly abandoned"

    stored = await store.get_execution(marked.id)
    assert stored is not None and stored.dead_letter is DeadLetter.OPEN
    assert await store.due_jobs(later, 10) == [], "the occurrence does not run again"
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None and after.next_run_at != T0
