"""Misfire policies, schedule advance, the circuit breaker and retry backoff: pure functions."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.model import (
    CronSchedule,
    ExecutionSummary,
    Job,
    Misfire,
    MisfirePolicy,
    OnceSchedule,
    Schedule,
    Status,
)
from tickd.scheduler.schedule.backoff import backoff_delay
from tickd.scheduler.schedule.planning import MAX_SKIPPED_RECORDS, advance_after, plan_run

EVERY_MINUTE = CronSchedule(expr="0 * * * * *")
RNG = random.Random(7)


def late_job(
    policy: MisfirePolicy,
    *,
    minutes_late: float,
    grace: float = 60.0,
    schedule: Schedule = EVERY_MINUTE,
) -> Job:
    return make_job(
        schedule=schedule,
        next_run_at=T0 - timedelta(minutes=minutes_late),
        misfire=Misfire(policy=policy, grace_seconds=grace),
    )


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_within_grace_every_policy_just_runs_late(policy: MisfirePolicy) -> None:
    job = late_job(policy, minutes_late=0.5)
    plan = plan_run(job, T0)
    assert plan.run_at == job.next_run_at
    assert plan.skipped == []
    assert plan.advance_from == job.next_run_at


def test_coalesce_runs_once_and_carries_on_from_now() -> None:
    job = late_job(MisfirePolicy.COALESCE, minutes_late=30)
    plan = plan_run(job, T0)
    assert plan.run_at == job.next_run_at
    assert plan.skipped == []
    summary = ExecutionSummary(execution_id="e", status=Status.SUCCESS, finished_at=T0)
    advance = advance_after(job, plan, summary, breaker_threshold=0, rng=RNG)
    assert advance.next_run_at == T0 + timedelta(minutes=1)


def test_run_all_runs_the_oldest_and_the_next_is_still_due() -> None:
    job = late_job(MisfirePolicy.RUN_ALL, minutes_late=30)
    plan = plan_run(job, T0)
    summary = ExecutionSummary(execution_id="e", status=Status.SUCCESS, finished_at=T0)
    advance = advance_after(job, plan, summary, breaker_threshold=0, rng=RNG)
    assert plan.run_at == job.next_run_at
    assert advance.next_run_at == job.next_run_at + timedelta(minutes=1)  # type: ignore[operator]


def test_skip_records_every_late_occurrence_and_runs_the_one_in_grace() -> None:
    # Due at 08:30:00; now 09:00:00; every minute; grace 90 s: 08:59 and 09:00 are in grace.
    job = late_job(MisfirePolicy.SKIP, minutes_late=30, grace=90)
    plan = plan_run(job, T0)
    assert plan.skipped == [job.next_run_at + timedelta(minutes=i) for i in range(29)]  # type: ignore[operator]
    assert plan.run_at == T0 - timedelta(minutes=1)


def test_skip_with_nothing_in_grace_runs_nothing_and_moves_past_now() -> None:
    hourly = CronSchedule(expr="0 0 * * * *")
    job = late_job(MisfirePolicy.SKIP, minutes_late=180, grace=60, schedule=hourly)
    plan = plan_run(job, T0.replace(minute=30))
    assert plan.run_at is None
    assert len(plan.skipped) == 4  # 06:00, 07:00, 08:00, 09:00
    summary = ExecutionSummary(execution_id="e", status=Status.SKIPPED, finished_at=T0)
    advance = advance_after(job, plan, summary, breaker_threshold=0, rng=RNG)
    assert advance.next_run_at == T0 + timedelta(hours=1)


def test_skip_records_are_capped_and_say_so() -> None:
    every_second = CronSchedule(expr="* * * * * *")
    job = late_job(MisfirePolicy.SKIP, minutes_late=60, grace=1, schedule=every_second)
    plan = plan_run(job, T0)
    assert len(plan.skipped) == MAX_SKIPPED_RECORDS
    assert plan.skipped_truncated


def test_skip_past_the_cap_still_runs_the_occurrence_within_grace() -> None:
    """Down 20 hours, every minute, an hour of grace: 1,201 occurrences missed, so the records
    are capped, and the 61 within grace come after those read. Before, none of them ran."""
    every_minute = CronSchedule(expr="0 * * * * *")
    job = late_job(MisfirePolicy.SKIP, minutes_late=20 * 60, grace=3600, schedule=every_minute)
    plan = plan_run(job, T0)
    assert plan.run_at == T0 - timedelta(hours=1)
    assert len(plan.skipped) == MAX_SKIPPED_RECORDS and plan.skipped_truncated
    assert all(T0 - t > timedelta(hours=1) for t in plan.skipped), "only late ones recorded"
    summary = ExecutionSummary(execution_id="e", status=Status.SUCCESS, finished_at=T0)
    advance = advance_after(job, plan, summary, breaker_threshold=0, rng=RNG)
    assert advance.next_run_at == T0 - timedelta(minutes=59), "the next within grace, in turn"


def test_once_is_disabled_after_its_run() -> None:
    job = make_job(schedule=OnceSchedule(at=T0), next_run_at=T0)
    plan = plan_run(job, T0)
    summary = ExecutionSummary(execution_id="e", status=Status.SUCCESS, finished_at=T0)
    advance = advance_after(job, plan, summary, breaker_threshold=0, rng=RNG)
    assert (advance.enabled, advance.next_run_at) == (False, None)


def test_interval_advances_from_when_the_run_finished() -> None:
    job = make_job(next_run_at=T0)  # every 60 s
    finished = T0 + timedelta(seconds=12)
    summary = ExecutionSummary(execution_id="e", status=Status.SUCCESS, finished_at=finished)
    advance = advance_after(job, plan_run(job, T0), summary, breaker_threshold=0, rng=RNG)
    assert advance.next_run_at == finished + timedelta(seconds=60)


def test_jitter_delays_within_its_bound() -> None:
    job = make_job(schedule=EVERY_MINUTE, next_run_at=T0, jitter_seconds=10)
    summary = ExecutionSummary(execution_id="e", status=Status.SUCCESS, finished_at=T0)
    times = {
        advance_after(job, plan_run(job, T0), summary, breaker_threshold=0, rng=RNG).next_run_at
        for _ in range(20)
    }
    nominal = T0 + timedelta(minutes=1)
    assert all(nominal <= t <= nominal + timedelta(seconds=10) for t in times)  # type: ignore[operator]
    assert len(times) > 1


@pytest.mark.parametrize(
    ("failures_before", "status", "threshold", "paused"),
    [
        (2, Status.FAILED, 3, True),
        (2, Status.TIMEOUT, 3, True),
        (1, Status.FAILED, 3, False),
        (5, Status.FAILED, 0, False),  # breaker off
        (2, Status.SUCCESS, 3, False),
    ],
)
def test_circuit_breaker(
    failures_before: int, status: Status, threshold: int, paused: bool
) -> None:
    job = make_job(next_run_at=T0, consecutive_failures=failures_before)
    summary = ExecutionSummary(execution_id="e", status=status, finished_at=T0, error="boom")
    advance = advance_after(job, plan_run(job, T0), summary, breaker_threshold=threshold, rng=RNG)
    assert advance.enabled is not paused
    assert (advance.paused_reason is not None) is paused
    if paused:
        assert "3 consecutive failed executions" in advance.paused_reason  # type: ignore[operator]
        assert "boom" in advance.paused_reason  # type: ignore[operator]
    expected = 0 if status is Status.SUCCESS else failures_before + 1
    assert advance.consecutive_failures == expected


def test_backoff_doubles_from_one_second_to_a_thirty_second_cap() -> None:
    assert [backoff_delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff_delay(10_000) == 30
    with pytest.raises(ValueError, match="attempt"):
        backoff_delay(0)
