"""Job CRUD: list, create, read, replace, change, delete, pause, resume, and a job's history."""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from aiohttp import web

from tickd.api.domains import check_room
from tickd.api.jobs import (
    JobListPage,
    JobSearchQuery,
    accepted_part,
    change_entry,
    definition_changed,
    guard_system,
    job_search,
    refusals_beside,
)
from tickd.api.models import (
    ChangeOut,
    ChangePage,
    JobCreate,
    JobOut,
    JobPatch,
    PageQuery,
    WriteQuery,
)
from tickd.api.problems import ApiError, field_error
from tickd.api.routing import B, Call, Q, Reply, Route, Routes, authenticate
from tickd.api.scoping import refuse_foreign_domain
from tickd.api.v1 import (
    JOB,
    STATE,
    decode_cursor,
    encode_cursor,
    entity_tags,
    if_match,
    job_out,
    job_reply,
    load_job,
    name_cursor,
    state,
    time_cursor,
)
from tickd.scheduler.codec import to_json_ready
from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import DuplicateJobName, JobOrder, UnstorableValue


async def list_jobs(call: Call[JobSearchQuery, None]) -> Reply:
    q = call.query
    s = state(call)
    search = replace(job_search(q, *_after(q.cursor, q.sort)), domains=call.domains)
    jobs = await s.views.search_jobs(search)
    page, more = jobs[: q.limit], len(jobs) > q.limit
    total = await s.views.count_jobs(search) if q.total else None
    return Reply(
        JobListPage(
            items=[job_out(j, s.registry) for j in page],
            next_cursor=_cursor_after(page[-1], q.sort) if more else None,
            total=total,
        )
    )


def _after(cursor: str | None, order: JobOrder) -> tuple[str | None, datetime | None]:
    """The last job of the previous page, as the cursor the list gave out in this order."""
    if cursor is None or order is JobOrder.NAME:
        return name_cursor(cursor), None
    fields = decode_cursor(cursor, "after_name", "after_next_run_at")
    name, at = fields["after_name"], fields["after_next_run_at"]
    if not isinstance(name, str) or not (at is None or _aware_time(at)):
        raise field_error("query.cursor", "not a cursor this API gave out", 400)
    return name, None if at is None else datetime.fromisoformat(at)


def _aware_time(value: object) -> bool:
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _cursor_after(job: Job, order: JobOrder) -> str:
    if order is JobOrder.NAME:
        return encode_cursor(after_name=job.name)
    at = None if job.next_run_at is None else job.next_run_at.isoformat()
    return encode_cursor(after_name=job.name, after_next_run_at=at)


async def create_job(call: Call[WriteQuery, JobCreate]) -> Reply:
    s = state(call)
    now = s.clock.now()
    job = s.builder.create(call.body, now)
    guard_system(job, call.scope, s.registry)
    refuse_foreign_domain(call, job.domain)
    await check_room(call, job.domain)
    if call.query.dry_run:
        await _check_name_free(call, job)
        return job_reply(job, call, 201)
    try:
        await s.jobs.insert_job(job, change_entry("create", None, job, call.actor, now, s.registry))
    except DuplicateJobName:
        raise field_error("name", f"a job named {job.name!r} exists already", 409) from None
    except UnstorableValue as exc:
        raise field_error("params", f"cannot be stored: {exc.reason}") from None
    s.poke()
    reply = job_reply(job, call, 201)
    return replace(reply, headers={**(reply.headers or {}), "Location": f"/v1/jobs/{job.id}"})


async def _check_name_free(call: Call[Q, B], job: Job) -> None:
    """The store's unique name, checked ahead for a dry run: the 409 the write would get."""
    holder = await state(call).jobs.get_job_by_name(job.name)
    if holder is not None and holder.id != job.id:
        raise field_error("name", f"a job named {job.name!r} exists already", 409)


async def create_refusals(
    request: web.Request, doc: dict[str, Any], refused: frozenset[str]
) -> list[tuple[str, str]]:
    """What a create's checks refuse of the fields its body's model accepted."""
    s = request.app[STATE]
    body = accepted_part(JobCreate, doc, refused)
    if body is None:
        return []
    return refusals_beside(lambda: s.builder.create(body, s.clock.now()), refused)


async def put_refusals(
    request: web.Request, doc: dict[str, Any], refused: frozenset[str]
) -> list[tuple[str, str]]:
    """What a replace's checks refuse of the fields its body's model accepted."""
    s = request.app[STATE]
    body = accepted_part(JobCreate, doc, refused)
    job = await job_seen(request)
    if body is None or job is None:
        return []
    return refusals_beside(lambda: s.builder.replace(job, body, s.clock.now()), refused)


async def patch_refusals(
    request: web.Request, doc: dict[str, Any], refused: frozenset[str]
) -> list[tuple[str, str]]:
    """What a change's checks refuse of the fields its body's model accepted."""
    s = request.app[STATE]
    body = accepted_part(JobPatch, doc, refused)
    job = await job_seen(request)
    if body is None or job is None:
        return []
    return refusals_beside(lambda: s.builder.patch(job, body, s.clock.now()), refused)


async def job_seen(request: web.Request) -> Job | None:
    """The path's job, if the presented token sees it: a refused body's answer says nothing
    more of a job of another domain than of one that does not exist."""
    job = await request.app[STATE].jobs.get_job(request.match_info["job_id"])
    domains = authenticate(request, "read").domains
    return job if job is not None and (domains is None or job.domain in domains) else None


async def get_job(call: Call[None, None]) -> Reply:
    return job_reply(await load_job(call), call)


async def put_job(call: Call[WriteQuery, JobCreate]) -> Reply:
    builder = state(call).builder
    return await write_job(
        call,
        "update",
        lambda job, now: builder.replace(job, call.body, now),
        dry_run=call.query.dry_run,
    )


async def patch_job(call: Call[WriteQuery, JobPatch]) -> Reply:
    builder = state(call).builder
    return await write_job(
        call,
        "update",
        lambda job, now: builder.patch(job, call.body, now),
        dry_run=call.query.dry_run,
    )


async def pause_job(call: Call[None, None]) -> Reply:
    def paused(job: Job, now: datetime) -> Job:
        return replace(job, enabled=False, paused_reason=f"paused by {call.actor}", updated_at=now)

    return await write_job(call, "pause", paused)


async def resume_job(call: Call[None, None]) -> Reply:
    builder = state(call).builder

    def resumed(job: Job, now: datetime) -> Job:
        return builder.patch(replace(job, enabled=False), JobPatch(enabled=True), now)

    return await write_job(call, "resume", resumed)


# How often a write without If-Match reads the job again and re-applies itself when another
# instance wrote the job between its read and its write; writes from this one take turns.
MAX_WRITE_ATTEMPTS = 5

# Writes to one job from this process take turns (read, change, write), so they never lose the
# compare-and-set to one another. A lock lives while a request holds or waits on it.
_turns: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


def _turn(job_id: str) -> asyncio.Lock:
    lock = _turns.get(job_id)
    if lock is None:
        lock = asyncio.Lock()
        _turns[job_id] = lock
    return lock


async def write_job(
    call: Call[Q, B],
    action: str,
    change: Callable[[Job, datetime], Job],
    *,
    dry_run: bool = False,
) -> Reply:
    """Apply `change` to the job as stored. With If-Match naming a revision, only to that
    revision: a concurrent change is a 412. Without it, last writer wins: a write that loses
    the compare-and-set reads the job again and applies `change` to what it finds.
    `dry_run`: every check, and the answer the write would give, with nothing written."""
    if dry_run:
        before = await load_job(call)
        return await rehearse(call, before, change(before, state(call).clock.now()), action)
    async with _turn(call.path("job_id")):
        for _ in range(MAX_WRITE_ATTEMPTS):
            before = await load_job(call)
            reply = await save(call, before, change(before, state(call).clock.now()), action)
            if reply is not None:
                return reply
            if not _last_writer_wins(call):
                raise ApiError(
                    412, "Precondition Failed", "the job changed meanwhile: read it again"
                )
    raise _changed_too_often()


def _changed_too_often() -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f"the job changed {MAX_WRITE_ATTEMPTS} times while this request applied itself: send it "
        "again",
    )


def _last_writer_wins(call: Call[Q, B]) -> bool:
    """No If-Match, or `If-Match: *` (any current revision): the client named no revision."""
    header = call.request.headers.get("If-Match")
    return header is None or entity_tags(header) is None


async def save(call: Call[Q, B], before: Job, after: Job, action: str) -> Reply | None:
    """Write a change if the job is still at the revision the client saw (If-Match) or, without
    If-Match, at the revision this request read; None when it is no longer."""
    s = state(call)
    guard_system(before, call.scope, s.registry)
    guard_system(after, call.scope, s.registry)
    expected = if_match(call, before)
    if action == "update" and not definition_changed(before, after):
        return job_reply(before, call)  # nothing to write: no revision, no history entry
    if after.domain != before.domain:
        refuse_foreign_domain(call, after.domain)
        await check_room(call, after.domain)
    change = change_entry(action, before, after, call.actor, s.clock.now(), s.registry)
    try:
        stored = await s.jobs.replace_job(after, expected, change, read=before)
    except DuplicateJobName:
        raise field_error("name", f"a job named {after.name!r} exists already", 409) from None
    except UnstorableValue as exc:
        raise field_error("params", f"cannot be stored: {exc.reason}") from None
    if stored is None:
        return None
    s.poke()
    return job_reply(stored, call)


async def rehearse(call: Call[Q, B], before: Job, after: Job, action: str) -> Reply:
    """What `save` would answer, from the checks it and the store make, writing nothing."""
    s = state(call)
    guard_system(before, call.scope, s.registry)
    guard_system(after, call.scope, s.registry)
    if_match(call, before)
    if action == "update" and not definition_changed(before, after):
        return job_reply(before, call)
    if after.name != before.name:
        await _check_name_free(call, after)
    if after.domain != before.domain:
        refuse_foreign_domain(call, after.domain)
        await check_room(call, after.domain)
    return job_reply(replace(after, revision=before.revision + 1), call)


async def delete_job(call: Call[None, None]) -> Reply:
    """Deleted at the revision the client saw (If-Match: a job changed meanwhile is a 412), or,
    without If-Match, as stored: a delete that loses the compare-and-set to another instance's
    write reads the job again, so its history entry holds what was deleted."""
    s = state(call)
    async with _turn(call.path("job_id")):
        for _ in range(MAX_WRITE_ATTEMPTS):
            job = await load_job(call)
            guard_system(job, call.scope, s.registry)
            expected = if_match(call, job)
            change = change_entry("delete", job, None, call.actor, s.clock.now(), s.registry)
            if await s.jobs.delete_job(job.id, change, expected_revision=expected):
                return Reply(None, 204)
            if await s.jobs.get_job(job.id) is None:
                raise ApiError(404, "Not Found", f"no job with id {job.id!r}")
            if not _last_writer_wins(call):
                raise ApiError(
                    412, "Precondition Failed", "the job changed meanwhile: read it again"
                )
    raise _changed_too_often()


async def job_history(call: Call[PageQuery, None]) -> Reply:
    q = call.query
    job_id = call.path("job_id")
    if call.domains is not None:
        # A deleted job's history is read by its id; its domain is gone with it.
        await load_job(call)
    changes = await state(call).jobs.list_changes(
        job_id, limit=q.limit + 1, before=time_cursor(q.cursor)
    )
    if not changes and await state(call).jobs.get_job(job_id) is None:
        raise ApiError(404, "Not Found", f"no job with id {job_id!r} and no history of one")
    page, more = changes[: q.limit], len(changes) > q.limit
    cursor = encode_cursor(at=page[-1].at.isoformat(), id=page[-1].id) if more else None
    items = [ChangeOut.model_validate(to_json_ready(dataclasses.asdict(c))) for c in page]
    return Reply(ChangePage(items=items, next_cursor=cursor))


JOB_ROUTES: Routes = [
    Route(
        "GET",
        "/v1/jobs",
        list_jobs,
        "List jobs: searched, filtered, sorted and paged by the store",
        "read",
        JobListPage,
        query=JobSearchQuery,
    ),
    Route(
        "POST",
        "/v1/jobs",
        create_job,
        "Create a job",
        "write",
        JobOut,
        201,
        query=WriteQuery,
        body=JobCreate,
        body_check=create_refusals,
    ),
    Route("GET", JOB, get_job, "Read a job", "read", JobOut),
    Route(
        "PUT",
        JOB,
        put_job,
        "Replace a job's definition",
        "write",
        JobOut,
        query=WriteQuery,
        body=JobCreate,
        body_check=put_refusals,
    ),
    Route(
        "PATCH",
        JOB,
        patch_job,
        "Change some of a job's fields",
        "write",
        JobOut,
        query=WriteQuery,
        body=JobPatch,
        body_check=patch_refusals,
    ),
    Route("DELETE", JOB, delete_job, "Delete a job", "write", None, 204),
    Route("POST", JOB + "/pause", pause_job, "Pause a job", "write", JobOut),
    Route("POST", JOB + "/resume", resume_job, "Resume a job from now", "write", JobOut),
]


HISTORY_ROUTE = Route(
    "GET",
    JOB + "/history",
    job_history,
    "Who changed the job, when, and what",
    "read",
    ChangePage,
    query=PageQuery,
)
