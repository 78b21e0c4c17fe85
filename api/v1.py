"""The /v1 endpoints: jobs, executions, run requests, schedules, history, handlers."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from api import safejson
from api.jobs import (
    JobBuilder,
    change_entry,
    definition_changed,
    guard_system,
    masked_params,
    to_schedule,
)
from api.models import (
    BackfillOut,
    BackfillRequest,
    ChangeOut,
    ChangePage,
    CountQuery,
    ExecutionListQuery,
    ExecutionOut,
    ExecutionPage,
    FireTime,
    HandlerList,
    HandlerOut,
    JobCreate,
    JobExecutionQuery,
    JobListQuery,
    JobOut,
    JobPage,
    JobPatch,
    PageQuery,
    PreviewOut,
    PreviewRequest,
    RunRequestOut,
    TriggerRequest,
)
from api.problems import ApiError, field_error
from api.routing import B, Call, Q, Reply, Route, Routes, parse_body
from handlers.product_store import ProductStore
from scheduler.clock import Clock
from scheduler.codec import execution_to_doc, job_to_doc, to_json_ready
from scheduler.config import Settings
from scheduler.metrics import Metrics
from scheduler.model import Execution, IntervalSchedule, Job, Priority, Schedule, Status, new_id
from scheduler.ports import DuplicateJobName, ExecutionQuery, JobQuery, RunRequest, Store
from scheduler.registry import HandlerRegistry
from scheduler.schedules import next_fire, occurrences, zone

RETRYABLE = (Status.FAILED, Status.TIMEOUT, Status.ABANDONED)
MAX_BACKFILL = 1000
# Triggers of one job queued and not yet run: a client looping on trigger must not queue
# thousands of runs that then hold the job for hours.
MAX_PENDING_TRIGGERS = 10


@dataclass(frozen=True, kw_only=True)
class ApiState:
    store: Store
    registry: HandlerRegistry
    settings: Settings
    clock: Clock
    metrics: Metrics
    # Set when the API runs in the daemon: a trigger wakes the dispatcher at once.
    wake: asyncio.Event | None = None
    # Readiness of the dispatcher, when there is one: () -> (healthy, last error).
    dispatcher_health: Callable[[], tuple[bool, str | None]] | None = None
    # The product store, when the alert scanner is installed: unsubscribe links, bounces.
    products: ProductStore | None = None

    @property
    def builder(self) -> JobBuilder:
        return JobBuilder(self.registry, self.settings)

    def poke(self) -> None:
        if self.wake is not None:
            self.wake.set()


STATE = web.AppKey("state", ApiState)


def state(call: Call[Q, B]) -> ApiState:
    return call.request.app[STATE]


# -- cursors: opaque to clients, checked on the way in ------------------------------------------


def encode_cursor(**fields: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()


def decode_cursor(cursor: str, *keys: str) -> dict[str, Any]:
    try:
        fields = safejson.loads(base64.urlsafe_b64decode(cursor.encode()))
        # Lone surrogates (\ud800) read as JSON, but no store takes them.
        json.dumps(fields, ensure_ascii=False).encode()
    except (binascii.Error, ValueError, UnicodeError):
        raise field_error("query.cursor", "not a cursor this API gave out", 400) from None
    if not isinstance(fields, dict) or set(fields) != set(keys):
        raise field_error("query.cursor", "not a cursor this API gave out", 400)
    return fields


def time_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if cursor is None:
        return None
    fields = decode_cursor(cursor, "at", "id")
    try:
        at = datetime.fromisoformat(fields["at"])
    except (TypeError, ValueError):
        at = None
    # Only what encode_cursor wrote: an aware time and a string id.
    if at is None or at.utcoffset() is None or not isinstance(fields["id"], str):
        raise field_error("query.cursor", "not a cursor this API gave out", 400)
    return at, fields["id"]


def name_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    after = decode_cursor(cursor, "after_name")["after_name"]
    if not isinstance(after, str):
        raise field_error("query.cursor", "not a cursor this API gave out", 400)
    return after


# -- views ----------------------------------------------------------------------------------------


def job_out(job: Job, registry: HandlerRegistry) -> JobOut:
    doc = to_json_ready(job_to_doc(job))
    doc["id"] = doc.pop("_id")
    doc["params"] = masked_params(job, registry)
    doc["priority"] = Priority(job.priority).name.lower()
    for engine_field in ("fence",):
        doc.pop(engine_field)
    return JobOut.model_validate(doc)


def etag(job: Job) -> dict[str, str]:
    return {"ETag": f'"{job.revision}"'}


def execution_out(execution: Execution) -> ExecutionOut:
    doc = to_json_ready(execution_to_doc(execution))
    doc["id"] = doc.pop("_id")
    doc["idempotency_key"] = execution.idempotency_key
    return ExecutionOut.model_validate(doc)


def job_reply(job: Job, call: Call[Q, B], status: int = 200) -> Reply:
    return Reply(job_out(job, state(call).registry), status, etag(job))


# -- jobs -----------------------------------------------------------------------------------------


async def load_job(call: Call[Q, B]) -> Job:
    job = await state(call).store.get_job(call.path("job_id"))
    if job is None:
        raise ApiError(404, "Not Found", f"no job with id {call.path('job_id')!r}")
    return job


async def list_jobs(call: Call[JobListQuery, None]) -> Reply:
    q = call.query
    after = name_cursor(q.cursor)
    query = JobQuery(
        handler=q.handler,
        enabled=q.enabled,
        name_prefix=q.name_prefix,
        next_run_from=q.next_run_from,
        next_run_to=q.next_run_to,
        after_name=after,
        limit=q.limit + 1,
    )
    jobs = await state(call).store.list_jobs(query)
    page, more = jobs[: q.limit], len(jobs) > q.limit
    cursor = encode_cursor(after_name=page[-1].name) if more else None
    return Reply(
        JobPage(items=[job_out(j, state(call).registry) for j in page], next_cursor=cursor)
    )


async def create_job(call: Call[None, JobCreate]) -> Reply:
    s = state(call)
    now = s.clock.now()
    job = s.builder.create(call.body, now)
    guard_system(job, call.scope, s.registry)
    try:
        await s.store.insert_job(
            job, change_entry("create", None, job, call.actor, now, s.registry)
        )
    except DuplicateJobName:
        raise field_error("name", f"a job named {job.name!r} exists already", 409) from None
    s.poke()
    reply = job_reply(job, call, 201)
    return replace(reply, headers={**(reply.headers or {}), "Location": f"/v1/jobs/{job.id}"})


async def get_job(call: Call[None, None]) -> Reply:
    return job_reply(await load_job(call), call)


async def put_job(call: Call[None, JobCreate]) -> Reply:
    job = await load_job(call)
    now = state(call).clock.now()
    return await save(call, job, state(call).builder.replace(job, call.body, now), "update")


async def patch_job(call: Call[None, JobPatch]) -> Reply:
    body = call.body
    job = await load_job(call)
    now = state(call).clock.now()
    return await save(call, job, state(call).builder.patch(job, body, now), "update")


async def pause_job(call: Call[None, None]) -> Reply:
    job = await load_job(call)
    paused = replace(
        job,
        enabled=False,
        paused_reason=f"paused by {call.actor}",
        updated_at=state(call).clock.now(),
    )
    return await save(call, job, paused, "pause")


async def resume_job(call: Call[None, None]) -> Reply:
    job = await load_job(call)
    now = state(call).clock.now()
    body = JobPatch(enabled=True)
    resumed = state(call).builder.patch(replace(job, enabled=False), body, now)
    return await save(call, job, resumed, "resume")


async def save(call: Call[Q, B], before: Job, after: Job, action: str) -> Reply:
    """Write a change if the job is still at the revision the client saw (If-Match) or, without
    If-Match, at the revision this request read: a concurrent write is never lost."""
    s = state(call)
    guard_system(before, call.scope, s.registry)
    guard_system(after, call.scope, s.registry)
    expected = if_match(call, before)
    if action == "update" and not definition_changed(before, after):
        return job_reply(before, call)  # nothing to write: no revision, no history entry
    change = change_entry(action, before, after, call.actor, s.clock.now(), s.registry)
    try:
        stored = await s.store.replace_job(after, expected, change)
    except DuplicateJobName:
        raise field_error("name", f"a job named {after.name!r} exists already", 409) from None
    if stored is None:
        raise ApiError(412, "Precondition Failed", "the job changed meanwhile: read it again")
    s.poke()
    return job_reply(stored, call)


def if_match(call: Call[Q, B], job: Job) -> int:
    """The revision a write may apply to: the client's (If-Match) or, without If-Match, the one
    this request read. `If-Match: *` is any current revision (RFC 9110); so weak tags, compared
    strongly, never match."""
    header = call.request.headers.get("If-Match")
    if header is None:
        return job.revision
    tags = entity_tags(header)
    if tags is not None and str(job.revision) not in tags:
        raise ApiError(
            412,
            "Precondition Failed",
            f"If-Match does not match the job's revision {job.revision}: read it again",
            [("If-Match", "stale revision")],
        )
    return job.revision


# One entity-tag of a list (RFC 9110 8.8.3), with the blanks around it; no `"` inside, so a
# match never backtracks.
_ENTITY_TAG = re.compile(r'[ \t]*(W/)?"([\x21\x23-\x7e]*)"[ \t]*')


def entity_tags(header: str) -> set[str] | None:
    """The strong tags of an If-Match header, None for `*`; 400 when it is neither."""
    if header.strip() == "*":
        return None
    strong: set[str] = set()
    position, found = 0, 0
    while position < len(header):
        match = _ENTITY_TAG.match(header, position)
        if match is None:
            raise _malformed_if_match()
        found += 1
        if not match[1]:
            strong.add(match[2])
        position = match.end()
        if position < len(header) and header[position] != ",":
            raise _malformed_if_match()
        position += 1
    if not found:
        raise _malformed_if_match()
    return strong


def _malformed_if_match() -> ApiError:
    reason = 'expected * or a list of entity tags, e.g. "3" (the ETag of a read)'
    return ApiError(400, "Invalid request", f"If-Match: {reason}", [("If-Match", reason)])


async def delete_job(call: Call[None, None]) -> Reply:
    """Deleted only at the revision the client saw (If-Match) or this request read: a job that
    changed meanwhile is not deleted on the strength of a stale read."""
    s = state(call)
    job = await load_job(call)
    guard_system(job, call.scope, s.registry)
    expected = if_match(call, job)
    change = change_entry("delete", job, None, call.actor, s.clock.now(), s.registry)
    if not await s.store.delete_job(job.id, change, expected_revision=expected):
        if await s.store.get_job(job.id) is None:
            raise ApiError(404, "Not Found", f"no job with id {job.id!r}")
        raise ApiError(412, "Precondition Failed", "the job changed meanwhile: read it again")
    return Reply(None, 204)


async def trigger_job(call: Call[None, None]) -> Reply:
    s = state(call)
    await refuse_trigger_options(call)
    job = await load_job(call)
    guard_system(job, call.scope, s.registry)
    pending = await s.store.count_pending_requests(job.id, reason="trigger")
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
    call: Call[Q, B], job: Job, times: list[datetime], reason: str, per_second: float | None
) -> list[RunRequest]:
    """Queue runs of chosen occurrences (the schedule does not move) and record who asked."""
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
    await s.store.insert_run_requests(requests)
    change = change_entry(reason, job, job, call.actor, now, s.registry)
    listed = [t.isoformat() for t in times[:20]]
    occurrences = {"count": len(times), "first": listed}
    await s.store.record_change(replace(change, changes={"occurrences": occurrences}))
    s.poke()
    return requests


def run_request_out(request: RunRequest) -> RunRequestOut:
    return RunRequestOut.model_validate(to_json_ready(dataclasses.asdict(request)))


async def job_history(call: Call[PageQuery, None]) -> Reply:
    q = call.query
    job_id = call.path("job_id")
    changes = await state(call).store.list_changes(
        job_id, limit=q.limit + 1, before=time_cursor(q.cursor)
    )
    if not changes and await state(call).store.get_job(job_id) is None:
        raise ApiError(404, "Not Found", f"no job with id {job_id!r} and no history of one")
    page, more = changes[: q.limit], len(changes) > q.limit
    cursor = encode_cursor(at=page[-1].at.isoformat(), id=page[-1].id) if more else None
    items = [ChangeOut.model_validate(to_json_ready(dataclasses.asdict(c))) for c in page]
    return Reply(ChangePage(items=items, next_cursor=cursor))


async def preview_job(call: Call[CountQuery, None]) -> Reply:
    job = await load_job(call)
    q = call.query
    return Reply(preview(job.schedule, job.name, state(call).clock.now(), q.count))


async def preview_schedule(call: Call[None, PreviewRequest]) -> Reply:
    body = call.body
    schedule = to_schedule(body.schedule)
    state(call).builder.check_schedule(schedule, body.name)
    return Reply(preview(schedule, body.name, body.after or state(call).clock.now(), body.count))


def preview(schedule: Schedule, name: str, after: datetime, count: int) -> PreviewOut:
    tz = zone(getattr(schedule, "timezone", "UTC"))
    times: list[FireTime] = []
    previous_offset = after.astimezone(tz).utcoffset()
    current: datetime | None = after
    while current is not None and len(times) < count:
        current = next_fire(schedule, current, job_name=name)
        if current is None:
            break
        local = current.astimezone(tz)
        times.append(
            FireTime(
                at=current,
                local=local.isoformat(),
                dst_transition=local.utcoffset() != previous_offset,
            )
        )
        previous_offset = local.utcoffset()
    return PreviewOut(times=times)


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
    done = await s.store.executions_at(job.id, found)
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
    first = next_fire(job.schedule, start - timedelta(microseconds=1), job_name=job.name)
    if first is None:
        raise field_error("start", "the job's schedule has no occurrence in this range")
    return first


# -- executions -----------------------------------------------------------------------------------


async def list_executions(call: Call[ExecutionListQuery, None]) -> Reply:
    q = call.query
    return await execution_page(call, q, job_id=q.job_id, handler=q.handler)


async def list_job_executions(call: Call[JobExecutionQuery, None]) -> Reply:
    await load_job(call)
    q = call.query
    return await execution_page(call, q, job_id=call.path("job_id"), handler=None)


async def execution_page(
    call: Call[Q, B],
    q: JobExecutionQuery | ExecutionListQuery,
    *,
    job_id: str | None,
    handler: str | None,
) -> Reply:
    query = ExecutionQuery(
        job_id=job_id,
        status=q.status,
        handler=handler,
        since=q.since,
        until=q.until,
        before=time_cursor(q.cursor),
        limit=q.limit + 1,
    )
    runs = await state(call).store.list_executions(query)
    page, more = runs[: q.limit], len(runs) > q.limit
    last = page[-1] if more else None
    cursor = encode_cursor(at=last.scheduled_at.isoformat(), id=last.id) if last else None
    return Reply(ExecutionPage(items=[execution_out(e) for e in page], next_cursor=cursor))


async def load_execution(call: Call[Q, B]) -> Execution:
    execution = await state(call).store.get_execution(call.path("execution_id"))
    if execution is None:
        raise ApiError(404, "Not Found", f"no execution with id {call.path('execution_id')!r}")
    return execution


async def get_execution(call: Call[None, None]) -> Reply:
    return Reply(execution_out(await load_execution(call)))


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
    job = await state(call).store.get_job(execution.job_id)
    if job is None:
        raise ApiError(409, "Conflict", "the job of this execution no longer exists")
    guard_system(job, call.scope, state(call).registry)
    pending = await state(call).store.executions_at(job.id, [execution.scheduled_at])
    if execution.scheduled_at in pending and await _retry_pending(call, execution):
        raise ApiError(409, "Conflict", "a retry of this occurrence is already queued or running")
    [request] = await enqueue(call, job, [execution.scheduled_at], "retry", per_second=None)
    return Reply(run_request_out(request), 202)


async def _retry_pending(call: Call[Q, B], execution: Execution) -> bool:
    """True when something newer than this execution exists for its occurrence."""
    runs = await state(call).store.list_executions(
        ExecutionQuery(
            job_id=execution.job_id,
            since=execution.scheduled_at,
            until=execution.scheduled_at + timedelta(microseconds=1),
            limit=100,
        )
    )
    newer = [e for e in runs if e.id > execution.id or e.status is Status.RUNNING]
    return bool(newer) or await state(call).store.run_request_pending(
        execution.job_id, execution.scheduled_at
    )


# -- handlers -------------------------------------------------------------------------------------


async def list_handlers(call: Call[None, None]) -> Reply:
    items = [
        HandlerOut(
            name=r.name,
            origin=r.origin,
            params_schema=dict(r.handler.params_schema) if r.handler.params_schema else None,
            secret_params=sorted(r.handler.secret_params),
            max_concurrency=r.handler.max_concurrency,
        )
        for r in state(call).registry
    ]
    return Reply(HandlerList(items=items))


JOB = "/v1/jobs/{job_id}"
ROUTES: Routes = [
    Route("GET", "/v1/jobs", list_jobs, "List jobs", "read", JobPage, query=JobListQuery),
    Route("POST", "/v1/jobs", create_job, "Create a job", "write", JobOut, 201, body=JobCreate),
    Route("GET", JOB, get_job, "Read a job", "read", JobOut),
    Route("PUT", JOB, put_job, "Replace a job's definition", "write", JobOut, body=JobCreate),
    Route("PATCH", JOB, patch_job, "Change some of a job's fields", "write", JobOut, body=JobPatch),
    Route("DELETE", JOB, delete_job, "Delete a job", "write", None, 204),
    Route("POST", JOB + "/pause", pause_job, "Pause a job", "write", JobOut),
    Route("POST", JOB + "/resume", resume_job, "Resume a job from now", "write", JobOut),
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
    Route(
        "GET",
        JOB + "/preview",
        preview_job,
        "The job's next fire times",
        "read",
        PreviewOut,
        query=CountQuery,
        tag="schedules",
    ),
    Route(
        "GET",
        JOB + "/history",
        job_history,
        "Who changed the job, when, and what",
        "read",
        ChangePage,
        query=PageQuery,
    ),
    Route(
        "GET",
        JOB + "/executions",
        list_job_executions,
        "A job's executions, newest first",
        "read",
        ExecutionPage,
        query=JobExecutionQuery,
        tag="executions",
    ),
    Route(
        "GET",
        "/v1/executions",
        list_executions,
        "Executions across jobs, newest first (status=failed: the dead letters)",
        "read",
        ExecutionPage,
        query=ExecutionListQuery,
        tag="executions",
    ),
    Route(
        "GET",
        "/v1/executions/{execution_id}",
        get_execution,
        "Read an execution",
        "read",
        ExecutionOut,
        tag="executions",
    ),
    Route(
        "POST",
        "/v1/executions/{execution_id}/retry",
        retry_execution,
        "Run a failed, timed-out or abandoned execution's occurrence again",
        "write",
        RunRequestOut,
        202,
        tag="executions",
    ),
    Route(
        "POST",
        "/v1/schedules/preview",
        preview_schedule,
        "Fire times of a schedule before saving it, DST transitions marked",
        "read",
        PreviewOut,
        body=PreviewRequest,
        tag="schedules",
    ),
    Route(
        "GET",
        "/v1/handlers",
        list_handlers,
        "Registered handlers and their params schemas",
        "read",
        HandlerList,
        tag="handlers",
    ),
]
