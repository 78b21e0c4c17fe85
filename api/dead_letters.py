"""/v1/dead-letters: occurrences that failed for good (failed or timed out after their last
retry), listed, grouped by error, re-driven or discarded (one, or many by ids or by filter); each
action in the job's history.

A dead letter is an execution whose `dead_letter` is set (scheduler/dead_letters.py): `open` until
someone acts, `redriving` while a re-drive is queued or running, `redriven` once a later run of
the occurrence ended, `discarded` when ops gave up on it. A re-drive is a run request for the same
occurrence (same scheduled_at, so the same idempotency key), as a retry is.

A dead letter outlives its job: deleting a job discards its unhandled dead letters (the store does
it with the delete), and any left open can still be discarded, never re-driven (nothing would run
it). Either way the execution stays listed (state=discarded) until retention prunes it.

An action on many is bounded (at most `MAX_BATCH` a call) and exact: with `ids`, exactly those
(what a list on screen showed), else the newest the filter matches, and the answer says which
were acted on, which were skipped and why, and whether more match. The store filters by job,
handler and time; the error's type is matched here, on at most `MAX_SCAN` dead letters read a
call. The groups (identical errors with their counts) are made here too, from at most
`MAX_SCAN` dead letters, newest first, and say when they stopped there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Annotated, TypeVar

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
    of_domain,
)
from tickd.api.problems import ApiError
from tickd.api.routing import B, Call, Q, Reply, Route, Routes
from tickd.api.runs import run_request_out
from tickd.api.scoping import executions_seen, within
from tickd.api.v1 import execution_out, state, time_cursor
from tickd.scheduler.dead_letters import REDRIVE, redrive_entry, rerun_of
from tickd.scheduler.model import DeadLetter, Execution, Job, new_id
from tickd.scheduler.ports.backends import ExecutionQuery, JobChange, RunRequest
from tickd.scheduler.ports.store_api import ExecutionStore

MAX_BATCH = 100
# The most dead letters read by one call that matches the error's type or groups them.
MAX_SCAN = 2000
SCAN_PAGE = 500
# An error's first line, as a group names it, is cut to this many characters.
GROUP_LINE_CHARS = 200
JOB_DELETED = "its job was deleted: nothing would run it (discard it instead)"


class GroupQuery(Strict):
    """Which dead letters to read: the groups' query, and the list's besides its page."""

    state: DeadLetter = Field(default=DeadLetter.OPEN, description="open: not yet handled")
    handler: str | None = Field(default=None, max_length=200)
    job_id: str | None = Field(default=None, max_length=64)
    since: Rfc3339 | None = Field(default=None, description="Occurrences scheduled from then on")
    until: Rfc3339 | None = Field(default=None, description="Occurrences scheduled before then")
    domain: str | None = of_domain()


class DeadLetterQuery(PageQuery, GroupQuery):
    pass


Ids = list[Annotated[str, Field(min_length=1, max_length=64)]]
Limit = Annotated[int, Field(ge=1, le=MAX_BATCH), BeforeValidator(integral)]


class DeadLetterFilter(Strict):
    """Which dead letters to act on, the newest first; at most `limit` of them. With `ids`,
    exactly those (each still matching the other fields), whatever `limit`: what a list on
    screen showed is what gets acted on."""

    ids: Ids | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_BATCH,
        description=f"These dead letters only (at most {MAX_BATCH})",
    )
    handler: str | None = Field(default=None, max_length=200)
    job_id: str | None = Field(default=None, max_length=64)
    since: Rfc3339 | None = Field(default=None, description="Occurrences scheduled from then on")
    until: Rfc3339 | None = Field(default=None, description="Occurrences scheduled before then")
    domain: str | None = of_domain()
    error_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description=f"Only those whose error is of this type (matched on the newest {MAX_SCAN})",
    )
    limit: Limit = MAX_BATCH


class RedriveFilter(DeadLetterFilter):
    """Which open dead letters to re-drive (see DeadLetterFilter)."""


class DiscardFilter(DeadLetterFilter):
    """Which dead letters to discard (see DeadLetterFilter): by filter, open ones; by `ids`,
    open ones and those being re-driven, as one is discarded alone."""


F = TypeVar("F", bound=DeadLetterFilter)


class NotRedriven(BaseModel):
    id: str
    reason: str


class RedriveOut(BaseModel):
    requests: list[RunRequestOut] = Field(description="One run request per dead letter re-driven")
    skipped: list[NotRedriven] = Field(description="Dead letters matched but not re-driven")
    more: bool = Field(description="More open dead letters may match than `limit`")


class DiscardOut(BaseModel):
    discarded: list[str] = Field(description="The ids of the dead letters discarded, newest first")
    count: int = Field(description="How many were discarded: len(discarded)")
    skipped: list[NotRedriven] = Field(description="Dead letters matched but not discarded")
    more: bool = Field(description="More open dead letters may match than `limit`")


class ErrorGroup(BaseModel):
    job_id: str
    job_name: str
    handler: str
    error_type: str = Field(description="The error's type; empty for a run without one")
    error: str = Field(description=f"Its message's first line, at most {GROUP_LINE_CHARS} chars")
    count: int = Field(description="How many of the dead letters read have this error")
    newest_at: datetime = Field(description="The newest one's occurrence")
    oldest_at: datetime = Field(description="The oldest one's occurrence")
    ids: list[str] = Field(description="Their ids, newest first: to act on the group exactly")


class ErrorGroups(BaseModel):
    groups: list[ErrorGroup] = Field(description="The most dead letters first")
    read: int = Field(description="How many dead letters the groups count")
    complete: bool = Field(
        description=f"Every dead letter the query matches is counted; false: only the newest "
        f"{MAX_SCAN}"
    )


async def list_dead_letters(call: Call[DeadLetterQuery, None]) -> Reply:
    q = call.query
    query = ExecutionQuery(
        job_id=q.job_id,
        handler=q.handler,
        since=q.since,
        until=q.until,
        dead_letter=q.state,
        before=time_cursor(q.cursor),
        limit=q.limit,
        domains=within(call, q.domain),
    )
    return await page_of(call, query)


async def load_dead_letter(call: Call[None, None]) -> Execution:
    execution = await load_execution(call)
    if execution.dead_letter is None:
        raise ApiError(404, "Not Found", f"execution {execution.id!r} is not a dead letter")
    return execution


async def load_job_of(call: Call[Q, B], execution: Execution) -> Job:
    job = await state(call).jobs.get_job(execution.job_id)
    if job is None:
        raise ApiError(409, "Conflict", f"cannot re-drive this dead letter: {JOB_DELETED}")
    guard_system(job, call.scope, state(call).registry)
    return job


async def job_if_any(call: Call[Q, B], execution: Execution) -> Job | None:
    """The dead letter's job, guarded as its actions are; None once deleted (a job on a system
    handler needed an admin token, and its dead letters still do)."""
    job = await state(call).jobs.get_job(execution.job_id)
    refused = refusal(call, job, execution)
    if refused is not None:
        raise refused
    return job


def refusal(call: Call[Q, B], job: Job | None, execution: Execution) -> ApiError | None:
    """Why this caller may not act on this dead letter of `job` (None: deleted); None if it may."""
    s = state(call)
    try:
        if job is not None:
            guard_system(job, call.scope, s.registry)
    except ApiError as exc:
        return exc
    if job is None and call.scope != "admin" and is_system_handler(s.registry, execution.handler):
        return ApiError(
            403, "Forbidden", f"{execution.handler!r} is a system handler: this needs admin scope"
        )
    return None


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


async def matching(
    call: Call[None, F], unhandled: Sequence[DeadLetter] = (DeadLetter.OPEN,)
) -> tuple[list[Execution], bool]:
    """The dead letters the filter matches (by `ids`: in one of the `unhandled` states; else
    open ones), and whether more may match than its limit."""
    body = call.body
    s = state(call)
    if body.ids is not None:
        read = [await s.executions.get_execution(i) for i in dict.fromkeys(body.ids)]
        found = [e for e in read if e is not None and chosen_by(body, e, unhandled)]
        narrowed = None if body.domain is None else frozenset({body.domain})
        return await executions_seen(call, s.jobs, found, narrowed), False
    domains = within(call, body.domain)
    found, cut = await newest_matching(s.executions, body, domains, want=body.limit + 1)
    return found[: body.limit], cut or len(found) > body.limit


async def newest_matching(
    store: ExecutionStore,
    body: DeadLetterFilter,
    domains: frozenset[str] | None,
    *,
    want: int,
) -> tuple[list[Execution], bool]:
    """Up to `want` open dead letters the filter matches in `domains` (None: in any), newest
    first, read in pages of SCAN_PAGE, at most MAX_SCAN of them; and whether the read stopped
    there with fewer than `want` found (more may match)."""
    found: list[Execution] = []
    limit = want if body.error_type is None else SCAN_PAGE
    query = store_query(body, DeadLetter.OPEN, domains, limit=limit)
    read = 0
    while len(found) < want and read < MAX_SCAN:
        page = await store.list_executions(replace(query, limit=min(query.limit, MAX_SCAN - read)))
        read += len(page)
        found += [e for e in page if of_error_type(body.error_type, e)]
        if len(page) < query.limit or not page:
            return found[:want], False
        query = replace(query, before=(page[-1].scheduled_at, page[-1].id))
    return found[:want], len(found) < want


def store_query(
    body: DeadLetterFilter | GroupQuery,
    dead_letter: DeadLetter,
    domains: frozenset[str] | None,
    *,
    limit: int,
) -> ExecutionQuery:
    return ExecutionQuery(
        job_id=body.job_id,
        handler=body.handler,
        since=body.since,
        until=body.until,
        dead_letter=dead_letter,
        limit=limit,
        domains=domains,
    )


def of_error_type(error_type: str | None, execution: Execution) -> bool:
    kind = execution.error.type if execution.error is not None else ""
    return error_type is None or kind == error_type


def chosen_by(
    body: DeadLetterFilter, execution: Execution, unhandled: Sequence[DeadLetter]
) -> bool:
    return (
        execution.dead_letter in unhandled
        and body.job_id in (None, execution.job_id)
        and body.handler in (None, execution.handler)
        and (body.since is None or execution.scheduled_at >= body.since)
        and (body.until is None or execution.scheduled_at < body.until)
        and of_error_type(body.error_type, execution)
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
            jobs[execution.job_id] = await s.jobs.get_job(execution.job_id)
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
    won = await s.executions.mark_dead_letters(
        ids, states=[DeadLetter.OPEN], to=DeadLetter.REDRIVING
    )
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
    await s.requests.insert_run_requests(list(requests.values()))
    for job_id, redriven in entries.items():
        await record(call, jobs[job_id], REDRIVE, redriven)
    if requests:
        s.poke()
    return requests


async def record(call: Call[Q, B], job: Job, action: str, entries: list[dict[str, object]]) -> None:
    s = state(call)
    change = change_entry(action, job, job, call.actor, s.clock.now(), s.registry)
    await s.jobs.record_change(replace(change, changes=one_entry(entries)))


def one_entry(entries: list[dict[str, object]]) -> dict[str, object]:
    """What the history says of an action on one dead letter, or on several at once."""
    return entries[0] if len(entries) == 1 else {"count": len(entries), "dead_letters": entries}


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
    await s.jobs.record_change(change)


async def discard(call: Call[None, None]) -> Reply:
    s = state(call)
    execution = await load_dead_letter(call)
    job = await job_if_any(call, execution)
    if execution.id not in await s.executions.mark_dead_letters(
        [execution.id], states=UNHANDLED, to=DeadLetter.DISCARDED
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


async def discard_many(call: Call[None, DiscardFilter]) -> Reply:
    """Discard the dead letters the filter matches, each as one is discarded alone: marked by
    compare-and-set (of two calls at once, one discards each), each job's share in its history
    in one entry."""
    s = state(call)
    matched, more = await matching(call, UNHANDLED)
    skipped = not_matched(call.body.ids, matched, "not a dead letter the filter matches to discard")
    allowed: list[Execution] = []
    jobs: dict[str, Job | None] = {}
    for execution in matched:
        reason = await why_not_discarded(call, execution, jobs)
        if reason is None:
            allowed.append(execution)
        else:
            skipped.append(NotRedriven(id=execution.id, reason=reason))
    won = await s.executions.mark_dead_letters(
        [e.id for e in allowed], states=UNHANDLED, to=DeadLetter.DISCARDED
    )
    discarded = [e for e in allowed if e.id in won]
    skipped += [
        NotRedriven(id=e.id, reason="discarded or re-driven by someone else meanwhile")
        for e in allowed
        if e.id not in won
    ]
    await record_discards(call, discarded, jobs)
    ids = [e.id for e in discarded]
    return Reply(DiscardOut(discarded=ids, count=len(ids), skipped=skipped, more=more))


def not_matched(ids: list[str] | None, matched: list[Execution], reason: str) -> list[NotRedriven]:
    """The ids asked for that the filter did not keep."""
    if ids is None:
        return []
    found = {e.id for e in matched}
    return [NotRedriven(id=i, reason=reason) for i in dict.fromkeys(ids) if i not in found]


async def why_not_discarded(
    call: Call[Q, B], execution: Execution, jobs: dict[str, Job | None]
) -> str | None:
    """Why this caller may not discard this dead letter, as a discard of it alone would say;
    its job read once a call, into `jobs`."""
    if execution.job_id not in jobs:
        jobs[execution.job_id] = await state(call).jobs.get_job(execution.job_id)
    refused = refusal(call, jobs[execution.job_id], execution)
    return None if refused is None else refused.detail


async def record_discards(
    call: Call[Q, B], discarded: list[Execution], jobs: dict[str, Job | None]
) -> None:
    by_job: defaultdict[str, list[Execution]] = defaultdict(list)
    for execution in discarded:
        by_job[execution.job_id].append(execution)
    for job_id, executions in by_job.items():
        entries: list[dict[str, object]] = [
            {"execution": e.id, "occurrence": e.scheduled_at.isoformat()} for e in executions
        ]
        job = jobs.get(job_id)
        if job is not None:
            await record(call, job, "discard", entries)
        else:
            await record_of_deleted(call, executions[0], one_entry(entries))


async def error_groups(call: Call[GroupQuery, None]) -> Reply:
    """Identical errors of the newest MAX_SCAN dead letters the query matches: one group per
    job, error type and first line of the message, the largest first."""
    store = state(call).executions
    domains = within(call, call.query.domain)
    query = store_query(call.query, call.query.state, domains, limit=SCAN_PAGE)
    read: list[Execution] = []
    complete = False
    while len(read) < MAX_SCAN:
        page = await store.list_executions(query)
        read += page
        if len(page) < query.limit:
            complete = True
            break
        query = replace(query, before=(page[-1].scheduled_at, page[-1].id))
    return Reply(ErrorGroups(groups=grouped(read), read=len(read), complete=complete))


def grouped(executions: list[Execution]) -> list[ErrorGroup]:
    groups: dict[tuple[str, str, str], list[Execution]] = {}
    for execution in executions:
        groups.setdefault(group_key(execution), []).append(execution)
    out = [
        ErrorGroup(
            job_id=members[0].job_id,
            job_name=members[0].job_name,
            handler=members[0].handler,
            error_type=kind,
            error=line,
            count=len(members),
            newest_at=members[0].scheduled_at,
            oldest_at=members[-1].scheduled_at,
            ids=[e.id for e in members],
        )
        for (_, kind, line), members in groups.items()
    ]
    return sorted(out, key=lambda g: (-g.count, -g.newest_at.timestamp(), g.job_name))


def group_key(execution: Execution) -> tuple[str, str, str]:
    if execution.error is None:
        return execution.job_id, "", ""
    return execution.job_id, execution.error.type, first_line(execution.error.message)


def first_line(message: str) -> str:
    """The first non-blank line of a message, cut to GROUP_LINE_CHARS (stored messages are
    masked already)."""
    line = next((part.strip() for part in message.splitlines() if part.strip()), "")
    return line if len(line) <= GROUP_LINE_CHARS else line[: GROUP_LINE_CHARS - 1] + "…"


UNHANDLED = (DeadLetter.OPEN, DeadLetter.REDRIVING)
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
        f"Re-drive the open dead letters a filter matches, at most {MAX_BATCH} a call",
        "write",
        RedriveOut,
        202,
        body=RedriveFilter,
        tag="dead-letters",
    ),
    Route(
        "GET",
        "/v1/dead-letters/groups",
        error_groups,
        f"Identical errors of the newest {MAX_SCAN} dead letters, counted: by job, error type "
        "and first line of the message, the largest group first",
        "read",
        ErrorGroups,
        query=GroupQuery,
        tag="dead-letters",
    ),
    Route(
        "POST",
        "/v1/dead-letters/discard",
        discard_many,
        f"Discard the dead letters listed, or the open ones a filter matches, at most {MAX_BATCH} "
        "a call",
        "write",
        DiscardOut,
        body=DiscardFilter,
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
