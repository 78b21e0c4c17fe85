"""Runs asked for, beside the schedule: trigger (now, once), backfill (past occurrences), retry
(a failed execution's occurrence again). Each is a run request the dispatcher picks up."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import datetime, timedelta

from tickd.api.executions import load_execution
from tickd.api.jobs import change_entry, guard_system
from tickd.api.models import BackfillOut, BackfillRequest, RunRequestOut, TriggerRequest
from tickd.api.problems import ApiError, field_error
from tickd.api.routing import B, Call, Q, Reply, Route, Routes, parse_body
from tickd.api.v1 import JOB, load_job, state
from tickd.scheduler.codec import to_json_ready
from tickd.scheduler.dead_letters import rerun_of
from tickd.scheduler.model import Execution, IntervalSchedule, Job, Status, new_id
from tickd.scheduler.ports.backends import ExecutionQuery, RunRequest
from tickd.scheduler.schedule.schedules import NoFireTime, next_fire, occurrences

RETRYABLE = (Status.FAILED, Status.TIMEOUT, Status.ABANDONED)
MAX_BACKFILL = 1000
# Triggers of one job queued and not yet run: a client looping on trigger must not queue
# thousands of runs that then hold the job for hours.
MAX_PENDING_TRIGGERS = 10


async def trigger_job(call: Call[None, None]) -> Reply:
    s = state(call)
    await refuse_trigger_options(call)
    job = await load_job(call)
    guard_system(job, call.scope, s.registry)
    pending = await s.requests.count_pending_requests(job.id, reason="trigger")
    if pending >= MAX_PENDING_TRIGGERS:
        raise ApiError(
            409,
            "Conflict",
            f"{pending} triggers of this job are pending already (at most "
            f"{MAX_PENDING_TRIGGERS}): they run first, trigger again once they have",
        )
    request = await enqueue(call, job, [s.clock.now()], "trigger", per_second=None)
    return Reply(run_request_out(request[0]), 202)


async def refuse_trigger_options(call: Call[Q, B]) -> None:
    """A trigger takes no options: no body, or `{}`. Anything else asked for something this
    API would silently not do."""
    if (await call.request.read()).strip():
        await parse_body(call.request, TriggerRequest)


async def enqueue(
    call: Call[Q, B],
    job: Job,
    times: list[datetime],
    reason: str,
    per_second: float | None,
    *,
    rerun: Execution | None = None,
) -> list[RunRequest]:
    """Queue runs of chosen occurrences (the schedule does not move) and record who asked.
    `rerun`: the execution run again (a shard's re-runs that shard alone)."""
    s = state(call)
    now = s.clock.now()
    step = timedelta(seconds=1 / per_second) if per_second else timedelta(0)
    requests = [
        RunRequest(
            id=new_id(),
            job_id=job.id,
            scheduled_at=at,
            reason=reason,
            not_before=now + step * i,
            created_at=now,
        )
        for i, at in enumerate(times)
    ]
    if rerun is not None:
        requests = [rerun_of(rerun, request) for request in requests]
    await s.requests.insert_run_requests(requests)
    change = change_entry(reason, job, job, call.actor, now, s.registry)
    listed = [t.isoformat() for t in times[:20]]
    occurrences = {"count": len(times), "first": listed}
    await s.jobs.record_change(replace(change, changes={"occurrences": occurrences}))
    s.poke()
    return requests


def run_request_out(request: RunRequest) -> RunRequestOut:
    return RunRequestOut.model_validate(to_json_ready(dataclasses.asdict(request)))


async def backfill_job(call: Call[None, BackfillRequest]) -> Reply:
    body = call.body
    s = state(call)
    job = await load_job(call)
    guard_system(job, call.scope, s.registry)
    now = s.clock.now()
    if body.end <= body.start:
        raise field_error("end", "must be after start")
    if body.end > now:
        raise field_error("end", "must not be in the future: backfill runs past occurrences")
    found = occurrences(
        job.schedule,
        _first_at_or_after(job, _backfill_start(job, body.start)),
        body.end - timedelta(microseconds=1),
        job_name=job.name,
        limit=MAX_BACKFILL + 1,
    )
    truncated = len(found) > MAX_BACKFILL
    found = found[:MAX_BACKFILL]
    done = await s.requests.executions_at(job.id, found)
    to_run = [t for t in found if t not in done]
    if not body.dry_run and to_run:
        await enqueue(call, job, to_run, "backfill", per_second=body.per_second)
    out = BackfillOut(
        dry_run=body.dry_run, occurrences=to_run, already_run=sorted(done), truncated=truncated
    )
    return Reply(out, 200 if body.dry_run else 202)


def _backfill_start(job: Job, start: datetime) -> datetime:
    """An interval job's occurrences count from its runs: before the job existed it had none.
    (A cron job's calendar did, and filling in the days before it was created is what a
    backfill is for.)"""
    if isinstance(job.schedule, IntervalSchedule):
        return max(start, job.created_at)
    return start


def _first_at_or_after(job: Job, start: datetime) -> datetime:
    try:
        first = next_fire(job.schedule, start - timedelta(microseconds=1), job_name=job.name)
    except NoFireTime:
        first = None
    if first is None:
        raise field_error("start", "the job's schedule has no occurrence in this range")
    return first


async def retry_execution(call: Call[None, None]) -> Reply:
    """A new execution of the same occurrence: same scheduled_at, so the same idempotency key."""
    execution = await load_execution(call)
    if execution.status not in RETRYABLE:
        raise ApiError(
            409,
            "Conflict",
            f"only failed, timed out or abandoned executions are "
            f"retried; this one is {execution.status}",
        )
    job = await state(call).jobs.get_job(execution.job_id)
    if job is None:
        raise ApiError(409, "Conflict", "the job of this execution no longer exists")
    guard_system(job, call.scope, state(call).registry)
    pending = await state(call).requests.executions_at(job.id, [execution.scheduled_at])
    if execution.scheduled_at in pending and await _retry_pending(call, execution):
        raise ApiError(409, "Conflict", "a retry of this occurrence is already queued or running")
    [request] = await enqueue(
        call, job, [execution.scheduled_at], "retry", per_second=None, rerun=execution
    )
    return Reply(run_request_out(request), 202)


async def _retry_pending(call: Call[Q, B], execution: Execution) -> bool:
    """True when something newer than this execution exists for its occurrence."""
    runs = await state(call).executions.list_executions(
        ExecutionQuery(
            job_id=execution.job_id,
            since=execution.scheduled_at,
            until=execution.scheduled_at + timedelta(microseconds=1),
            limit=100,
        )
    )
    # Another shard of the occurrence is no re-run of this one.
    newer = [
        e
        for e in runs
        if e.shard == execution.shard and (e.id > execution.id or e.status is Status.RUNNING)
    ]
    return bool(newer) or await state(call).requests.run_request_pending(
        execution.job_id, execution.scheduled_at
    )


RUN_ROUTES: Routes = [
    Route(
        "POST",
        JOB + "/trigger",
        trigger_job,
        "Run a job now, once, without moving its schedule",
        "write",
        RunRequestOut,
        202,
    ),
    Route(
        "POST",
        JOB + "/backfill",
        backfill_job,
        "Run a job's past occurrences (dry run first); 200 for a dry run, 202 when queued",
        "write",
        BackfillOut,
        202,
        body=BackfillRequest,
        also=(200,),
    ),
]


RETRY_ROUTE = Route(
    "POST",
    "/v1/executions/{execution_id}/retry",
    retry_execution,
    "Run a failed, timed-out or abandoned execution's occurrence again",
    "write",
    RunRequestOut,
    202,
    tag="executions",
)
