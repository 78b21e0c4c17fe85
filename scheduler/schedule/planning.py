"""What to run for a due job, and where its schedule goes next: pure functions of the job and now.

Misfire: an occurrence later than the job's grace period was missed (the daemon was down or
behind). The policy says what becomes of the missed ones:

* coalesce (default): one run stands for all of them; the schedule carries on from now;
* run_all: every missed occurrence runs, one after the other, oldest first;
* skip: none of them runs; each leaves a `skipped` execution (the first MAX_SKIPPED_RECORDS; beyond
  that a counter); an occurrence still within grace runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickd.scheduler.model import (
    CronSchedule,
    ExecutionSummary,
    IntervalSchedule,
    Job,
    MisfirePolicy,
    OnceSchedule,
    Status,
    ValidationError,
)
from tickd.scheduler.ports.backends import Advance
from tickd.scheduler.schedule.schedules import jittered, next_fire, occurrences

MAX_SKIPPED_RECORDS = 1000


@dataclass(frozen=True, kw_only=True)
class Plan:
    # The occurrence to run now, or None when every due occurrence is skipped.
    run_at: datetime | None
    skipped: list[datetime] = field(default_factory=list)
    # True when more occurrences were skipped than are listed in `skipped`.
    skipped_truncated: bool = False
    # The next fire time is computed from here once this run is over.
    advance_from: datetime


def plan_run(job: Job, now: datetime) -> Plan:
    due = job.next_run_at
    assert due is not None, "a due job has a next_run_at"
    grace = timedelta(seconds=job.misfire.grace_seconds)
    if now - due <= grace or job.misfire.policy is MisfirePolicy.RUN_ALL:
        return Plan(run_at=due, advance_from=due)
    if job.misfire.policy is MisfirePolicy.COALESCE:
        return Plan(run_at=due, advance_from=now)
    return _skip_missed(job, due, now, grace)


def _skip_missed(job: Job, due: datetime, now: datetime, grace: timedelta) -> Plan:
    try:
        missed = occurrences(
            job.schedule, due, now, job_name=job.name, limit=MAX_SKIPPED_RECORDS + 1
        )
        truncated = len(missed) > MAX_SKIPPED_RECORDS
        missed = missed[:MAX_SKIPPED_RECORDS]
        in_time = [t for t in missed if now - t <= grace]
        if truncated:
            # The occurrences read are the oldest; those still within grace come last.
            in_time = _first_in_grace(job, now, grace)
    except ValidationError:  # a schedule refused since it was stored: run once, then pause
        return Plan(run_at=due, advance_from=now)
    late = [t for t in missed if now - t > grace]
    if in_time:
        run_at = in_time[0]
        return Plan(run_at=run_at, skipped=late, skipped_truncated=truncated, advance_from=run_at)
    return Plan(run_at=None, skipped=late, skipped_truncated=truncated, advance_from=now)


def _first_in_grace(job: Job, now: datetime, grace: timedelta) -> list[datetime]:
    """The first occurrence within grace of now, if there is one."""
    since = now - grace - timedelta(microseconds=1)
    first = next_fire(job.schedule, since, job_name=job.name)
    return (
        [] if first is None else occurrences(job.schedule, first, now, job_name=job.name, limit=1)
    )


def next_run_after(
    job: Job, plan: Plan, finished_at: datetime, rng: random.Random
) -> datetime | None:
    """Cron: the next fire time after the occurrence; interval: finished + every; once: none."""
    schedule = job.schedule
    if isinstance(schedule, OnceSchedule):
        return None
    if isinstance(schedule, IntervalSchedule):
        base = finished_at + timedelta(seconds=schedule.every_seconds)
        return jittered(base, job.jitter_seconds, rng)
    assert isinstance(schedule, CronSchedule)
    # advance_from may carry this occurrence's jitter; jitter shorter than the period (the API
    # checks) cannot move the next fire time past its successor.
    fire = next_fire(schedule, plan.advance_from, job_name=job.name)
    return None if fire is None else jittered(fire, job.jitter_seconds, rng)


def advance_after(
    job: Job,
    plan: Plan,
    summary: ExecutionSummary,
    *,
    breaker_threshold: int,
    rng: random.Random,
) -> Advance:
    """The job's state once a run (or a skip) is over, with the circuit breaker applied. A
    schedule stored before tickd refused its kind (`?`, `W`, a step longer than its field) is
    paused with the reason, so ops see it and fix it, rather than run on a meaning no cron
    shares."""
    refused = None
    try:
        next_run_at = next_run_after(job, plan, summary.finished_at, rng)
    except ValidationError as exc:
        next_run_at, refused = None, f"schedule refused: {exc}; change it to resume"
    failures = job.consecutive_failures + 1 if summary.status.is_failure else 0
    if summary.status is Status.SKIPPED:
        failures = job.consecutive_failures
    tripped = breaker_threshold > 0 and failures >= breaker_threshold
    paused_reason = (
        f"circuit breaker: paused after {failures} consecutive failed executions"
        f" (last error: {summary.error or summary.status})"
        if tripped
        else refused
    )
    return Advance(
        revision=job.revision,
        next_run_at=next_run_at,
        enabled=next_run_at is not None and not tripped,
        consecutive_failures=failures,
        paused_reason=paused_reason,
        last_execution=summary,
        claimed_next_run_at=job.next_run_at,
    )


def after_step_back(job: Job, now: datetime, seconds: float, rng: random.Random) -> datetime | None:
    """Where a job's next run goes once the wall clock stepped back `seconds` (NTP correcting a
    clock that ran fast): its next run was computed from a wall time that far ahead. Cron: its
    next fire time after now; interval: as long after now as it was after the run it follows,
    `every_seconds` at most; once: its date stays. None when the next run stays where it is."""
    due = job.next_run_at
    if due is None or due <= now or isinstance(job.schedule, OnceSchedule):
        return None
    if isinstance(job.schedule, IntervalSchedule):
        every = timedelta(seconds=job.schedule.every_seconds)
        moved: datetime | None = max(now, min(due - timedelta(seconds=seconds), now + every))
    else:
        try:
            moved = next_fire(job.schedule, now, job_name=job.name)
        except ValidationError:  # a schedule refused since it was stored: its run pauses it
            return None
        moved = None if moved is None else jittered(moved, job.jitter_seconds, rng)
    return moved if moved is not None and moved < due else None


def keep_schedule(job: Job, summary: ExecutionSummary) -> Advance:
    """After a requested run (trigger, retry, backfill): record it, move nothing. It does not
    count towards the circuit breaker either, which watches the schedule's own runs."""
    return Advance(
        revision=job.revision,
        next_run_at=job.next_run_at,
        enabled=job.enabled,
        consecutive_failures=job.consecutive_failures,
        paused_reason=job.paused_reason,
        last_execution=summary,
    )
