"""Dead letters, where runs end: an occurrence that failed for good (failed or timed out after its
last retry) is marked on its execution record, so listing them is a query and costs the run no
extra write; its job's re-drive policy may queue the next re-drive in the same batch.

A sharded occurrence's shard that failed for good is a dead letter of its own: its re-drive runs
that shard alone. A run abandoned because its worker or instance died (its lease expired) runs
again, within its job's retries: the store counts an occurrence's abandonments, and the one past
max_retries + 1 attempts is the occurrence's dead letter (`abandoned_for_good`), so a run that
kills its worker every time is not run for ever. A run abandoned at a graceful shutdown is no
dead letter and does not count: tickd stopped it, not the run, and a deploy must not use up a
job's retries. A run that re-ran its occurrence (any run request) settles the occurrence's
earlier dead letters (of its shard), whatever its outcome: a success ends the story, a new
failure is the occurrence's dead letter from then on.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

from tickd.scheduler.model import (
    DeadLetter,
    Execution,
    ExecutionError,
    Job,
    Status,
    new_id,
)
from tickd.scheduler.ports.backends import Advance, JobChange, RunEnd, RunRequest
from tickd.scheduler.schedule.planning import advance_after, keep_schedule, plan_run

REDRIVE = "redrive"
# Who the history names for what the engine does on its own.
ENGINE_ACTOR = "tickd"


def end_of(
    job: Job, request: RunRequest | None, execution: Execution, advance: Advance | None
) -> RunEnd:
    """The run's end as the store takes it, dead letter and automatic re-drive included."""
    settles = request is not None and execution.status is not Status.ABANDONED
    if not execution.status.is_failure:
        return RunEnd(execution, advance, settles=settles)
    return _dead_letter(job, request, execution, advance, settles=settles)


def _dead_letter(
    job: Job,
    request: RunRequest | None,
    execution: Execution,
    advance: Advance | None,
    *,
    settles: bool,
) -> RunEnd:
    """An occurrence's end for good: open, or re-driven now by its job's policy."""
    assert execution.finished_at is not None
    done = request.redrives if request is not None and request.reason == REDRIVE else 0
    policy = job.redrive
    if policy is None or done >= policy.max_attempts:
        return RunEnd(replace(execution, dead_letter=DeadLetter.OPEN), advance, settles=settles)
    delay = policy.delay_seconds(done + 1)
    redrive = automatic_redrive(job, execution, done + 1, execution.finished_at, delay)
    return RunEnd(
        replace(execution, dead_letter=DeadLetter.REDRIVING),
        advance,
        settles=settles,
        redrive=redrive,
    )


ABANDONED_ERROR_TYPE = "Abandoned"


def abandoned_for_good(
    job: Job, request: RunRequest | None, execution: Execution, abandonments: int
) -> RunEnd | None:
    """What becomes of a run its lease's expiry abandoned, its occurrence's `abandonments`th
    (this one included): None while its job's retries allow another attempt (the occurrence
    runs again); past them, its end as a dead letter, with the job's schedule moved on as
    after any run that failed for good (a once-job is done) and the failure counted; a
    requested run's leaves the schedule alone, and leaves the queue."""
    if abandonments <= job.max_retries:
        return None
    assert execution.finished_at is not None
    error = ExecutionError(
        type=ABANDONED_ERROR_TYPE,
        message=f"the run was abandoned {abandonments} times: "
        "its worker or instance died each time",
    )
    ended = replace(execution, status=Status.ABANDONED, error=error, attempts=abandonments)
    summary = ended.summary()
    if request is not None or job.next_run_at is None:
        advance = keep_schedule(job, summary)
    else:
        plan = plan_run(job, execution.finished_at)
        advance = advance_after(job, plan, summary, breaker_threshold=0, rng=random.Random())
        advance = replace(advance, consecutive_failures=job.consecutive_failures + 1)
    finish = _dead_letter(job, request, ended, advance, settles=request is not None)
    return replace(finish, request_id=None if request is None else request.id)


def automatic_redrive(
    job: Job, execution: Execution, redrive: int, now: datetime, delay_seconds: float
) -> tuple[RunRequest, JobChange]:
    # The request's id derives from the execution's: a batch written twice (a lost connection)
    # queues it once.
    request = rerun_of(
        execution,
        RunRequest(
            id=f"{execution.id}-r{redrive}",
            job_id=job.id,
            scheduled_at=execution.scheduled_at,
            reason=REDRIVE,
            not_before=now + timedelta(seconds=delay_seconds),
            created_at=now,
            redrives=redrive,
        ),
    )
    change = JobChange(
        id=new_id(),
        job_id=job.id,
        job_name=job.name,
        at=now,
        actor=ENGINE_ACTOR,
        action=REDRIVE,
        changes=redrive_entry(execution, request),
    )
    return request, change


def rerun_of(execution: Execution, request: RunRequest) -> RunRequest:
    """A request that re-runs this execution: a shard's, that shard alone (as many shards as
    the job had then); a plain run's, the whole occurrence."""
    if execution.shards == 1:
        return request
    return replace(request, shard=execution.shard, shards=execution.shards)


def redrive_entry(execution: Execution, request: RunRequest) -> dict[str, object]:
    """What the history says of a re-drive, automatic or asked for."""
    entry: dict[str, object] = {
        "execution": execution.id,
        "occurrence": execution.scheduled_at.isoformat(),
        "not_before": request.not_before.isoformat(),
        "redrive": request.redrives or None,
    }
    if request.shard is not None:
        entry["shard"] = request.shard
    return entry
