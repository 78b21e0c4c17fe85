"""/v1/dead-letters: occurrences that failed for good (failed or timed out after their last
retry), listed, re-driven (one, or many by filter) or discarded; each action in the job's history.

A dead letter is an execution whose `dead_letter` is set (scheduler/dead_letters.py): `open` until
someone acts, `redriving` while a re-drive is queued or running, `redriven` once a later run of
the occurrence ended, `discarded` when ops gave up on it. A re-drive is a run request for the same
occurrence (same scheduled_at, so the same idempotency key), as a retry is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field

from tickd.api.executions import load_execution, page_of
from tickd.api.jobs import change_entry, guard_system
from tickd.api.models import (
    ExecutionOut,
    ExecutionPage,
    PageQuery,
    Rfc3339,
    RunRequestOut,
    Strict,
    integral,
)
from tickd.api.problems import ApiError
from tickd.api.routing import B, Call, Q, Reply, Route, Routes
from tickd.api.runs import run_request_out
from tickd.api.v1 import execution_out, state, time_cursor
from tickd.scheduler.dead_letters import REDRIVE, redrive_entry, rerun_of
from tickd.scheduler.model import DeadLetter, Execution, Job, new_id
from tickd.scheduler.ports import ExecutionQuery, RunRequest

MAX_REDRIVE_BATCH = 100


class DeadLetterQuery(PageQuery):
    state: DeadLetter = Field(default=DeadLetter.OPEN, description="open: not yet handled")
    handler: str | None = Field(default=None, max_length=200)
    job_id: str | None = Field(default=None, max_length=64)
    since: Rfc3339 | None = Field(default=None, description="Occurrences scheduled from then on")


class RedriveFilter(Strict):
    """Which open dead letters to re-drive, the newest first; at most `limit` of them."""

    handler: str | None = Field(default=None, max_length=200)
    job_id: str | None = Field(default=None, max_length=64)
    since: Rfc3339 | None = Field(default=None, description="Occurrences scheduled from then on")
    limit: Annotated[int, Field(ge=1, le=MAX_REDRIVE_BATCH), BeforeValidator(integral)] = (
        MAX_REDRIVE_BATCH
    )


class NotRedriven(BaseModel):
    id: str
    reason: str


class RedriveOut(BaseModel):
    requests: list[RunRequestOut] = Field(description="One run request per dead letter re-driven")
    skipped: list[NotRedriven] = Field(description="Dead letters matched but not re-driven")
    more: bool = Field(description="More open dead letters matched than `limit`")


async def list_dead_letters(call: Call[DeadLetterQuery, None]) -> Reply:
    q = call.query
    query = ExecutionQuery(
        job_id=q.job_id,
        handler=q.handler,
        since=q.since,
        dead_letter=q.state,
        before=time_cursor(q.cursor),
        limit=q.limit,
    )
    return await page_of(call, query)


async def load_dead_letter(call: Call[None, None]) -> Execution:
    execution = await load_execution(call)
    if execution.dead_letter is None:
        raise ApiError(404, "Not Found", f"execution {execution.id!r} is not a dead letter")
    return execution


async def load_job_of(call: Call[Q, B], execution: Execution) -> Job:
    job = await state(call).store.get_job(execution.job_id)
    if job is None:
        raise ApiError(409, "Conflict", "the job of this dead letter no longer exists")
    guard_system(job, call.scope, state(call).registry)
    return job


def not_open(execution: Execution, now: DeadLetter | None = None) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f"only open dead letters are re-driven; this one is {now or execution.dead_letter}",
    )


async def redrive_one(call: Call[None, None]) -> Reply:
    execution = await load_dead_letter(call)
    job = await load_job_of(call, execution)
    if execution.dead_letter is not DeadLetter.OPEN:
        raise not_open(execution)
    requests = await redrive(call, [(execution, job)])
    if execution.id not in requests:  # another re-drive took it meanwhile
        raise not_open(execution, DeadLetter.REDRIVING)
    return Reply(run_request_out(requests[execution.id]), 202)


async def redrive_many(call: Call[None, RedriveFilter]) -> Reply:
    body = call.body
    s = state(call)
    found = await s.store.list_executions(
        ExecutionQuery(
            job_id=body.job_id,
            handler=body.handler,
            since=body.since,
            dead_letter=DeadLetter.OPEN,
            limit=body.limit + 1,
        )
    )
    matched, more = found[: body.limit], len(found) > body.limit
    jobs: dict[str, Job | None] = {}
    chosen: list[tuple[Execution, Job]] = []
    skipped: list[NotRedriven] = []
    for execution in matched:
        if execution.job_id not in jobs:
            jobs[execution.job_id] = await s.store.get_job(execution.job_id)
        job = jobs[execution.job_id]
        reason = why_not(call, job)
        if reason is not None or job is None:
            skipped.append(NotRedriven(id=execution.id, reason=reason or "no job"))
        else:
            chosen.append((execution, job))
    requests = await redrive(call, chosen)
    skipped += [
        NotRedriven(id=e.id, reason="re-driven by someone else meanwhile")
        for e, _ in chosen
        if e.id not in requests
    ]
    out = RedriveOut(
        requests=[run_request_out(r) for r in requests.values()], skipped=skipped, more=more
    )
    return Reply(out, 202)


def why_not(call: Call[Q, B], job: Job | None) -> str | None:
    if job is None:
        return "the job no longer exists"
    try:
        guard_system(job, call.scope, state(call).registry)
    except ApiError as exc:
        return exc.detail
    return None


async def redrive(call: Call[Q, B], dead: Sequence[tuple[Execution, Job]]) -> dict[str, RunRequest]:
    """Mark first (open -> redriving, compare-and-set), then queue a run for each marked: of two
    re-drives of one dead letter at once, only one queues a run. The requests by dead letter."""
    s = state(call)
    ids = [execution.id for execution, _ in dead]
    won = await s.store.mark_dead_letters(ids, states=[DeadLetter.OPEN], to=DeadLetter.REDRIVING)
    now = s.clock.now()
    requests: dict[str, RunRequest] = {}
    entries: defaultdict[str, list[dict[str, object]]] = defaultdict(list)
    jobs: dict[str, Job] = {}
    for execution, job in dead:
        if execution.id not in won:
            continue
        request = rerun_of(
            execution,
            RunRequest(
                id=new_id(),
                job_id=job.id,
                scheduled_at=execution.scheduled_at,
                reason=REDRIVE,
                not_before=now,
                created_at=now,
            ),
        )
        requests[execution.id] = request
        entries[job.id].append(redrive_entry(execution, request))
        jobs[job.id] = job
    await s.store.insert_run_requests(list(requests.values()))
    for job_id, redriven in entries.items():
        await record(call, jobs[job_id], REDRIVE, redriven)
    if requests:
        s.poke()
    return requests


async def record(call: Call[Q, B], job: Job, action: str, entries: list[dict[str, object]]) -> None:
    s = state(call)
    change = change_entry(action, job, job, call.actor, s.clock.now(), s.registry)
    first = entries[0] if len(entries) == 1 else {"count": len(entries), "dead_letters": entries}
    await s.store.record_change(replace(change, changes=first))


async def discard(call: Call[None, None]) -> Reply:
    s = state(call)
    execution = await load_dead_letter(call)
    job = await load_job_of(call, execution)
    unhandled = [DeadLetter.OPEN, DeadLetter.REDRIVING]
    if execution.id not in await s.store.mark_dead_letters(
        [execution.id], states=unhandled, to=DeadLetter.DISCARDED
    ):
        raise ApiError(
            409, "Conflict", f"this dead letter is {execution.dead_letter}: nothing to discard"
        )
    entry: dict[str, object] = {
        "execution": execution.id,
        "occurrence": execution.scheduled_at.isoformat(),
    }
    await record(call, job, "discard", [entry])
    return Reply(execution_out(replace(execution, dead_letter=DeadLetter.DISCARDED)))


DEAD_LETTER = "/v1/dead-letters/{execution_id}"
DEAD_LETTER_ROUTES: Routes = [
    Route(
        "GET",
        "/v1/dead-letters",
        list_dead_letters,
        "Runs that failed for good, newest first (state=open: not yet handled)",
        "read",
        ExecutionPage,
        query=DeadLetterQuery,
        tag="dead-letters",
    ),
    Route(
        "POST",
        "/v1/dead-letters/redrive",
        redrive_many,
        f"Re-drive the open dead letters a filter matches, at most {MAX_REDRIVE_BATCH} a call",
        "write",
        RedriveOut,
        202,
        body=RedriveFilter,
        tag="dead-letters",
    ),
    Route(
        "POST",
        DEAD_LETTER + "/redrive",
        redrive_one,
        "Run an open dead letter's occurrence again (same idempotency key)",
        "write",
        RunRequestOut,
        202,
        tag="dead-letters",
    ),
    Route(
        "POST",
        DEAD_LETTER + "/discard",
        discard,
        "Give up on a dead letter: it is no longer counted as unhandled, and may be pruned",
        "write",
        ExecutionOut,
        tag="dead-letters",
    ),
]
