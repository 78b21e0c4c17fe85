"""/v1/dead-letters: occurrences that failed for good (failed or timed out after their last
retry), listed, re-driven (one, or many by filter) or discarded; each action in the job's history.

A dead letter is an execution whose `dead_letter` is set (scheduler/dead_letters.py): `open` until
someone acts, `redriving` while a re-drive is queued or running, `redriven` once a later run of
the occurrence ended, `discarded` when ops gave up on it. A re-drive is a run request for the same
occurrence (same scheduled_at, so the same idempotency key), as a retry is.

A dead letter outlives its job: deleting a job discards its unhandled dead letters (the store does
it with the delete), and any left open can still be discarded, never re-driven (nothing would run
it). Either way the execution stays listed (state=discarded) until retention prunes it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field

from tickd.api.executions import load_execution, page_of
from tickd.api.jobs import change_entry, guard_system, is_system_handler
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
from tickd.scheduler.ports.backends import ExecutionQuery, JobChange, RunRequest

MAX_REDRIVE_BATCH = 100
JOB_DELETED = "its job was deleted: nothing would run it (discard it instead)"


class DeadLetterQuery(PageQuery):
    state: DeadLetter = Field(default=DeadLetter.OPEN, description="open: not yet handled")
    handler: str | None = Field(default=None, max_length=200)
    job_id: str | None = Field(default=None, max_length=64)
    since: Rfc3339 | None = Field(default=None, description="Occurrences scheduled from then on")


class RedriveFilter(Strict):
    """Which open dead letters to re-drive, the newest first; at most `limit` of them. With
    `ids`, exactly those (each still open and matching the other fields), whatever `limit`:
    what a list on screen showed is what gets re-driven."""

    ids: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REDRIVE_BATCH,
        description=f"These dead letters only (at most {MAX_REDRIVE_BATCH})",
    )
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
        raise ApiError(409, "Conflict", f"cannot re-drive this dead letter: {JOB_DELETED}")
    guard_system(job, call.scope, state(call).registry)
    return job


async def job_if_any(call: Call[Q, B], execution: Execution) -> Job | None:
    """The dead letter's job, guarded as its actions are; None once deleted (a job on a system
    handler needed an admin token, and its dead letters still do)."""
    s = state(call)
    job = await s.store.get_job(execution.job_id)
    if job is not None:
        guard_system(job, call.scope, s.registry)
    elif call.scope != "admin" and is_system_handler(s.registry, execution.handler):
        raise ApiError(
            403, "Forbidden", f"{execution.handler!r} is a system handler: this needs admin scope"
        )
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


async def matching(call: Call[None, RedriveFilter]) -> tuple[list[Execution], bool]:
    """The open dead letters the filter matches, and whether it matched more than its limit."""
    body = call.body
    store = state(call).store
    if body.ids is not None:
        read = [await store.get_execution(i) for i in dict.fromkeys(body.ids)]
        return [e for e in read if e is not None and chosen_by(body, e)], False
    found = await store.list_executions(
        ExecutionQuery(
            job_id=body.job_id,
            handler=body.handler,
            since=body.since,
            dead_letter=DeadLetter.OPEN,
            limit=body.limit + 1,
        )
    )
    return found[: body.limit], len(found) > body.limit


def chosen_by(body: RedriveFilter, execution: Execution) -> bool:
    return (
        execution.dead_letter is DeadLetter.OPEN
        and body.job_id in (None, execution.job_id)
        and body.handler in (None, execution.handler)
        and (body.since is None or execution.scheduled_at >= body.since)
    )


async def redrive_many(call: Call[None, RedriveFilter]) -> Reply:
    s = state(call)
    matched, more = await matching(call)
    jobs: dict[str, Job | None] = {}
    chosen: list[tuple[Execution, Job]] = []
    skipped: list[NotRedriven] = []
    if call.body.ids is not None:
        found = {e.id for e in matched}
        skipped += [
            NotRedriven(id=i, reason="not an open dead letter the filter matches")
            for i in dict.fromkeys(call.body.ids)
            if i not in found
        ]
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
        return JOB_DELETED
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


async def record_of_deleted(
    call: Call[Q, B], execution: Execution, entry: dict[str, object]
) -> None:
    """A deleted job's history is still read by its id: the action goes there."""
    s = state(call)
    change = JobChange(
        id=new_id(),
        job_id=execution.job_id,
        job_name=execution.job_name,
        at=s.clock.now(),
        actor=call.actor,
        action="discard",
        changes=entry,
    )
    await s.store.record_change(change)


async def discard(call: Call[None, None]) -> Reply:
    s = state(call)
    execution = await load_dead_letter(call)
    job = await job_if_any(call, execution)
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
    if job is None:
        await record_of_deleted(call, execution, entry)
    else:
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
