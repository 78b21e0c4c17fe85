"""Running work: the runs on the workers now, the instances that hold them, and a cancel.

A cancel is a request kept in the store: the instance running the execution finds it within a
tick and stops the run, which is recorded `cancelled` with who asked (scheduler/run/execute.py).
"""

from __future__ import annotations

from collections import Counter

from tickd.api.executions import load_execution
from tickd.api.jobs import guard_system, is_system_handler
from tickd.api.models import (
    CancelOut,
    CancelRequestBody,
    InstanceOut,
    InstancePage,
    RunningOut,
    RunningPage,
    RunningQuery,
)
from tickd.api.problems import ApiError
from tickd.api.routing import B, Call, Q, Reply, Route, Routes, parse_body
from tickd.api.scoping import within
from tickd.api.v1 import state
from tickd.scheduler.model import CancelRequest, Execution, Status
from tickd.scheduler.ports.backends import ExecutionQuery, InstanceView

# The running view lists at most this many runs, the oldest start first.
MAX_RUNNING = 1000
INTERRUPTS = (
    "an async handler at once (it sees CancelledError); a sync handler when it returns or "
    "reaches its deadline (a thread cannot be interrupted); a queued run never starts"
)


async def running_executions(call: Call[Q, B], domain: str | None = None) -> list[Execution]:
    query = ExecutionQuery(status=Status.RUNNING, limit=MAX_RUNNING, domains=within(call, domain))
    runs = await state(call).executions.list_executions(query)
    return sorted(runs, key=lambda e: (e.started_at or e.scheduled_at, e.id))


async def list_running(call: Call[RunningQuery, None]) -> Reply:
    s = state(call)
    runs = await running_executions(call, call.query.domain)
    asked = {r.execution_id: r for r in await s.cancels.cancel_requests([e.id for e in runs])}
    now = s.clock.now()
    items = []
    for run in runs:
        since = run.started_at or run.scheduled_at
        request = asked.get(run.id)
        items.append(
            RunningOut(
                id=run.id,
                job_id=run.job_id,
                job_name=run.job_name,
                handler=run.handler,
                instance=run.owner,
                attempts=run.attempts,
                scheduled_at=run.scheduled_at,
                started_at=run.started_at,
                age_seconds=max(0.0, round((now - since).total_seconds(), 3)),
                shard=run.shard,
                shards=run.shards,
                cancel_requested_by=request.requested_by if request else None,
                cancel_requested_at=request.requested_at if request else None,
            )
        )
    return Reply(RunningPage(items=items))


async def list_instances(call: Call[None, None]) -> Reply:
    views = await state(call).instances.instance_views()
    holding = Counter(run.owner for run in await running_executions(call))
    # An instance's own count of runs in flight is of every domain: not for a limited token.
    whole = call.domains is None
    items = [instance_out(view, holding[view.instance], whole=whole) for view in views]
    return Reply(InstancePage(items=items))


def instance_out(view: InstanceView, running: int, *, whole: bool = True) -> InstanceOut:
    status = view.status
    return InstanceOut(
        id=view.instance,
        last_beat_at=view.beat_at,
        running=running,
        version=status.version if status else None,
        started_at=status.started_at if status else None,
        partitions=view.partitions,
        runs_in_flight=status.runs_in_flight if status and whole else None,
    )


async def cancel_execution(call: Call[None, None]) -> Reply:
    s = state(call)
    execution_id = call.path("execution_id")
    body = await cancel_body(call)
    execution = await load_execution(call)
    await guard_its_job(call, execution)
    if execution.status is not Status.RUNNING:
        ended = f"only running executions are cancelled; this one is {execution.status}"
        raise ApiError(409, "Conflict", ended)
    request = CancelRequest(
        execution_id=execution_id,
        requested_by=call.actor,
        requested_at=s.clock.now(),
        reason=body.reason.strip(),
    )
    await s.cancels.request_cancel(request)
    s.poke()  # the dispatcher looks for cancel requests each tick
    return Reply(cancel_out(request), 202)


async def cancel_body(call: Call[None, None]) -> CancelRequestBody:
    """No body, `{}`, or a reason; anything else is refused before anything changes."""
    if not (await call.request.read()).strip():
        return CancelRequestBody()
    body = await parse_body(call.request, CancelRequestBody)
    assert body is not None
    return body


async def guard_its_job(call: Call[None, None], execution: Execution) -> None:
    """A run of a system job, or of a system handler, is cancelled with an admin token only."""
    s = state(call)
    job = await s.jobs.get_job(execution.job_id)
    if job is not None:
        guard_system(job, call.scope, s.registry)
    elif call.scope != "admin" and is_system_handler(s.registry, execution.handler):
        raise ApiError(
            403, "Forbidden", f"{execution.handler!r} is a system handler: this needs admin scope"
        )


def cancel_out(request: CancelRequest) -> CancelOut:
    return CancelOut(
        execution_id=request.execution_id,
        requested_by=request.requested_by,
        requested_at=request.requested_at,
        reason=request.reason,
        interrupts=INTERRUPTS,
    )


RUNNING_ROUTES: Routes = [
    Route(
        "GET",
        "/v1/running",
        list_running,
        "The executions running now, the longest running first: each one's job, handler, "
        "instance, attempts, age (by the server's clock) and shard, and any cancel asked for",
        "read",
        RunningPage,
        query=RunningQuery,
        tag="executions",
    ),
    Route(
        "POST",
        "/v1/executions/{execution_id}/cancel",
        cancel_execution,
        "Stop a running (or queued) execution: recorded `cancelled` with who asked, not "
        'retried, no dead letter. Optional body {"reason": "..."}; 409 once it has ended',
        "write",
        CancelOut,
        202,
        tag="executions",
    ),
    Route(
        "GET",
        "/v1/instances",
        list_instances,
        "The instances that beat, by id: each one's last heartbeat, version, start, partitions "
        "of the due queue held, runs in flight (as it said) and executions running (as the "
        "store has them)",
        "read",
        InstancePage,
        tag="executions",
    ),
]
