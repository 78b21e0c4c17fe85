"""What the /v1 endpoints share: the state they run on (ApiState), cursors, the views of jobs and
executions, loading a job, and If-Match (a write applies only to the revision the client saw).

The endpoints themselves, by what they do: api/jobs_routes.py (jobs and their history),
api/runs.py (trigger, backfill, retry), api/executions.py, api/schedules.py (previews),
api/handlers_routes.py, api/domains.py (the domains' settings); api/app.py puts their routes
into one table.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web

from tickd.api import safejson
from tickd.api.jobs import JobBuilder, masked_params
from tickd.api.mail_health import MailHealth
from tickd.api.models import ExecutionOut, JobOut
from tickd.api.problems import ApiError, field_error
from tickd.api.routing import B, Call, Q, Reply
from tickd.api.scoping import job_not_found, visible
from tickd.handlers.product_store import ProductStore
from tickd.scheduler.codec import execution_to_doc, job_to_doc, to_json_ready
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.maintenance.relay import RelayState
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Execution, Job, Priority
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_api import (
    CancelRequestStore,
    DomainStore,
    ExecutionStore,
    JobStore,
    RunRequestStore,
    ViewStore,
)
from tickd.scheduler.ports.store_engine import HousekeepingStore, InstanceStore


@dataclass(frozen=True, kw_only=True)
class ApiState:
    # The store, by the roles the routes use (scheduler/ports/store_api.py): one object behind
    # them, handed over as each role by the composition root (tickd/app.py).
    jobs: JobStore
    requests: RunRequestStore
    executions: ExecutionStore
    cancels: CancelRequestStore
    views: ViewStore
    domains: DomainStore
    housekeeping: HousekeepingStore
    instances: InstanceStore
    registry: HandlerRegistry
    settings: Settings
    clock: Clock
    metrics: Metrics
    # Set when the API runs in the daemon: a trigger wakes the dispatcher at once.
    wake: asyncio.Event | None = None
    # Readiness of the dispatcher, when there is one: () -> (healthy, last error).
    dispatcher_health: Callable[[], tuple[bool, str | None]] | None = None
    # The event relay's state, when there is an engine (reported by /readyz, never failing it).
    relay_state: Callable[[], RelayState] | None = None
    # How the last sends of mail went, when there is an engine (the same: reported, never failing).
    mail_health: Callable[[], MailHealth] | None = None
    # The product store, when the alert scanner is installed: unsubscribe links, bounces.
    products: ProductStore | None = None

    @property
    def builder(self) -> JobBuilder:
        return JobBuilder(self.registry, self.settings)

    def poke(self) -> None:
        if self.wake is not None:
            self.wake.set()


STATE = web.AppKey("state", ApiState)
# A job's path: the operations on one job are below it.
JOB = "/v1/jobs/{job_id}"


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
    doc["occurrence"] = execution.occurrence
    return ExecutionOut.model_validate(doc)


def job_reply(job: Job, call: Call[Q, B], status: int = 200) -> Reply:
    return Reply(job_out(job, state(call).registry), status, etag(job))


# -- a job, and If-Match ---------------------------------------------------------------------------


async def load_job(call: Call[Q, B]) -> Job:
    """The job of the path; 404 when there is none or it is of a domain the token does not
    reach."""
    job = visible(call, await state(call).jobs.get_job(call.path("job_id")))
    if job is None:
        raise job_not_found(call.path("job_id"))
    return job


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
