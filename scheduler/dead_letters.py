"""Dead letters, where runs end: an occurrence that failed for good (failed or timed out after its
last retry) is marked on its execution record, so listing them is a query and costs the run no
extra write; its job's re-drive policy may queue the next re-drive in the same batch.

A sharded occurrence's shard that failed for good is a dead letter of its own: its re-drive runs
that shard alone. An abandoned run is no dead letter: its occurrence runs again anyway. A run that
re-ran its occurrence (any run request) settles the occurrence's earlier dead letters (of its
shard), whatever its outcome: a success ends the story, a new failure is the occurrence's dead
letter from then on.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tickd.scheduler.model import DeadLetter, Execution, Job, Status, new_id
from tickd.scheduler.ports import Advance, Finish, JobChange, RunRequest

REDRIVE = "redrive"
# Who the history names for what the engine does on its own.
ENGINE_ACTOR = "tickd"


def finish_of(
    job: Job, request: RunRequest | None, execution: Execution, advance: Advance | None
) -> Finish:
    """The run's end as the store takes it, dead letter and automatic re-drive included."""
    settles = request is not None and execution.status is not Status.ABANDONED
    if not execution.status.is_failure:
        return Finish(execution, advance, settles=settles)
    assert execution.finished_at is not None
    done = request.redrives if request is not None and request.reason == REDRIVE else 0
    policy = job.redrive
    if policy is None or done >= policy.max_attempts:
        return Finish(replace(execution, dead_letter=DeadLetter.OPEN), advance, settles=settles)
    delay = policy.delay_seconds(done + 1)
    redrive = automatic_redrive(job, execution, done + 1, execution.finished_at, delay)
    return Finish(
        replace(execution, dead_letter=DeadLetter.REDRIVING),
        advance,
        settles=settles,
        redrive=redrive,
    )


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
