"""The API's request and response models: they validate requests and generate /openapi.json, so
the document cannot drift from what the server accepts.

Unknown fields are refused everywhere (`extra="forbid"`): a typo in a field name is an error that
names the field, not a setting silently ignored.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from tickd.scheduler.domains import DEFAULT_DOMAIN, DOMAIN_PATTERN, DOMAIN_RULE
from tickd.scheduler.jobspec import (
    MAX_GRACE_SECONDS,
    MAX_INTERVAL_SECONDS,
    MAX_JITTER_SECONDS,
    MAX_RETRIES,
    MIN_INTERVAL_SECONDS,
    MIN_TIMEOUT_SECONDS,
    NAME_PATTERN,
)
from tickd.scheduler.keys import KEY_PATTERN, KEY_RULE, MAX_CONCURRENCY_LIMIT
from tickd.scheduler.model import (
    MAX_REDRIVE_ATTEMPTS,
    MAX_REDRIVE_BACKOFF_SECONDS,
    MAX_SHARDS,
    DeadLetter,
    MisfirePolicy,
    Status,
)

PriorityName = Literal["critical", "high", "normal", "low"]


# Years 1970 to 8999: far enough from the ends of the calendar that a fire time, a preview or a
# backfill window computed from the date cannot overflow.
YEARS = "(19[7-9][0-9]|[2-8][0-9]{3})"
DATE_TIME_PATTERN = f"^{YEARS}-"
_RFC3339 = re.compile(
    YEARS
    + r"-([0-9]{2}-[0-9]{2})[Tt]([0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]+))?"
    + r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _rfc3339(value: object) -> object:
    """What the document promises and no more: pydantic alone would also take a number or a
    numeric string for a Unix timestamp, or a date without a time."""
    if isinstance(value, datetime):
        return value
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            "must be an RFC 3339 date-time with an offset, in the years 1970 to 8999, "
            "e.g. 2026-03-02T09:00:00Z"
        )
    year, day, time, fraction, offset = match.groups()
    micros = f".{fraction[:6]:0<6}" if fraction else ""
    try:
        return datetime.fromisoformat(f"{year}-{day}T{time}{micros}{offset.upper()}")
    except ValueError as exc:
        raise ValueError(f"not a valid date-time: {exc}") from None


# Every date-time a client sends.
Rfc3339 = Annotated[
    AwareDatetime,
    BeforeValidator(_rfc3339),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": DATE_TIME_PATTERN}),
]


def integral(value: object) -> object:
    # Bodies are read strictly (no "5" or true for a number), but 5.0 is an integer in JSON.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# The integers of a body (the bounds come first, or the document loses them).
Retries = Annotated[int, Field(ge=0, le=MAX_RETRIES), BeforeValidator(integral)]
Count = Annotated[int, Field(ge=1, le=100), BeforeValidator(integral)]
Shards = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_SHARDS,
        description="Each occurrence runs as this many executions (ctx.shard 0 to shards - 1); "
        "it succeeds when every shard has. At most the handler's concurrency limit.",
    ),
    BeforeValidator(integral),
]
MANAGED_BY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,99}$"
ManagedBy = Annotated[
    str,
    Field(
        pattern=MANAGED_BY_PATTERN,
        description="Who keeps the definition: `tickd apply` marks the jobs it makes with "
        "their file (`file:jobs.toml`) or its --owner, and prunes only those; null: made by "
        "hand; a system job takes none",
    ),
]

DOMAIN_DESCRIPTION = f"The team or tenant the job belongs to, a label: {DOMAIN_RULE}"
Domain = Annotated[
    str, Field(pattern=DOMAIN_PATTERN, description=DOMAIN_DESCRIPTION, examples=["payments"])
]
KEY_DESCRIPTION = (
    "A concurrency key: at most concurrency_limit runs of the jobs naming it in flight at once, "
    f"across all instances; the others wait, holding no worker. {KEY_RULE}; with a "
    "concurrency_limit, and not on a sharded job"
)
LIMIT_DESCRIPTION = (
    "The most runs of the jobs naming concurrency_key in flight at once, each job's own: a run "
    f"starts while fewer than its job's limit are running; 1 to {MAX_CONCURRENCY_LIMIT}"
)
ConcurrencyKey = Annotated[
    str,
    Field(pattern=KEY_PATTERN, description=KEY_DESCRIPTION, examples=["endpoint:api.vendor.com"]),
]
ConcurrencyLimit = Annotated[
    int, Field(ge=1, le=MAX_CONCURRENCY_LIMIT, description=LIMIT_DESCRIPTION, examples=[5])
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CronScheduleIn(Strict):
    kind: Literal["cron"]
    expr: str = Field(min_length=1, max_length=200, examples=["0 */5 * * * *"])
    timezone: str = Field(default="UTC", max_length=64, examples=["Europe/Berlin"])


class IntervalScheduleIn(Strict):
    kind: Literal["interval"]
    every_seconds: float = Field(
        ge=MIN_INTERVAL_SECONDS, le=MAX_INTERVAL_SECONDS, description="At least one second"
    )


class OnceScheduleIn(Strict):
    kind: Literal["once"]
    at: Rfc3339


ScheduleIn = Annotated[
    CronScheduleIn | IntervalScheduleIn | OnceScheduleIn, Field(discriminator="kind")
]


class MisfireIn(Strict):
    policy: MisfirePolicy = MisfirePolicy.COALESCE
    grace_seconds: float = Field(default=60.0, ge=0, le=MAX_GRACE_SECONDS)


class RedriveIn(Strict):
    """Re-drive the job's dead letters automatically: at most `max_attempts` times per
    occurrence, the first `backoff_seconds` after the failure, the wait doubling each time."""

    max_attempts: Annotated[int, Field(ge=1, le=MAX_REDRIVE_ATTEMPTS), BeforeValidator(integral)]
    backoff_seconds: float = Field(gt=0, le=MAX_REDRIVE_BACKOFF_SECONDS)


class JobCreate(Strict):
    name: str = Field(pattern=NAME_PATTERN, examples=["nightly-report"])
    handler: str = Field(min_length=1, max_length=200, examples=["webhook"])
    schedule: ScheduleIn
    params: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True
    timeout_seconds: float = Field(default=60.0, ge=MIN_TIMEOUT_SECONDS)
    max_retries: Retries = 0
    priority: PriorityName = "normal"
    misfire: MisfireIn = Field(default_factory=MisfireIn)
    jitter_seconds: float = Field(default=0.0, ge=0, le=MAX_JITTER_SECONDS)
    redrive: RedriveIn | None = Field(default=None, description="None: re-driven by hand only")
    shards: Shards = 1
    managed_by: ManagedBy | None = None
    domain: Domain = DEFAULT_DOMAIN
    concurrency_key: ConcurrencyKey | None = None
    concurrency_limit: ConcurrencyLimit | None = None


class JobPatch(Strict):
    """Only the fields given change; `params` is replaced whole."""

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    handler: str | None = Field(default=None, min_length=1, max_length=200)
    schedule: ScheduleIn | None = None
    params: dict[str, Any] | None = None
    enabled: bool | None = None
    timeout_seconds: float | None = Field(default=None, ge=MIN_TIMEOUT_SECONDS)
    max_retries: Retries | None = None
    priority: PriorityName | None = None
    misfire: MisfireIn | None = None
    jitter_seconds: float | None = Field(default=None, ge=0, le=MAX_JITTER_SECONDS)
    redrive: RedriveIn | None = Field(default=None, description="null removes the policy")
    shards: Shards | None = None
    managed_by: ManagedBy | None = None
    domain: Domain | None = None
    # null removes the key; the limit goes with it.
    concurrency_key: ConcurrencyKey | None = None
    concurrency_limit: ConcurrencyLimit | None = None


class LeaseOut(BaseModel):
    owner: str
    token: int
    until: datetime


class LastExecutionOut(BaseModel):
    execution_id: str
    status: Status
    finished_at: datetime
    error: str | None = None


class JobOut(BaseModel):
    id: str
    name: str
    handler: str
    schedule: CronScheduleIn | IntervalScheduleIn | OnceScheduleIn
    params: dict[str, Any] = Field(description="Secret values are shown as ***")
    enabled: bool
    next_run_at: datetime | None
    timeout_seconds: float
    max_retries: int
    priority: PriorityName
    misfire: MisfireIn
    jitter_seconds: float
    lease: LeaseOut | None
    revision: int = Field(description="Also the ETag; send it as If-Match to update safely")
    consecutive_failures: int
    paused_reason: str | None
    last_execution: LastExecutionOut | None
    system: bool
    redrive: RedriveIn | None = None
    shards: int = 1
    managed_by: str | None = None
    # A default, so that this client reads the jobs of a daemon from before domains.
    domain: str = Field(default=DEFAULT_DOMAIN, description=DOMAIN_DESCRIPTION)
    concurrency_key: str | None = Field(default=None, description=KEY_DESCRIPTION)
    concurrency_limit: int | None = Field(default=None, description=LIMIT_DESCRIPTION)
    created_at: datetime
    updated_at: datetime


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page")


class ErrorOut(BaseModel):
    type: str
    message: str


class ExecutionOut(BaseModel):
    id: str
    job_id: str
    job_name: str
    handler: str
    scheduled_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: float | None
    status: Status
    attempts: int
    error: ErrorOut | None
    result: dict[str, Any] | None
    owner: str | None
    token: int | None
    idempotency_key: str
    dead_letter: DeadLetter | None = Field(
        default=None, description="Set when the run failed for good: see /v1/dead-letters"
    )
    occurrence: str = Field(
        description="The occurrence this run is of (job id and scheduled_at): its shards and "
        "its re-runs share it"
    )
    shard: int = Field(default=0, description="Which shard of its occurrence, from 0")
    shards: int = Field(default=1, description="How many shards its occurrence has")
    requested: str | None = Field(
        default=None,
        description="How the run was asked for (trigger, retry, backfill, redrive); null for "
        "an occurrence of the job's schedule",
    )


class ExecutionPage(BaseModel):
    items: list[ExecutionOut]
    next_cursor: str | None


class RunRequestOut(BaseModel):
    id: str
    job_id: str
    scheduled_at: datetime
    reason: str
    not_before: datetime
    created_at: datetime
    shard: int | None = Field(default=None, description="Set when it re-runs one shard alone")


class ChangeOut(BaseModel):
    id: str
    job_id: str
    job_name: str
    at: datetime
    actor: str
    action: str
    changes: dict[str, Any] = Field(description='field -> {"from": before, "to": after}')


class ChangePage(BaseModel):
    items: list[ChangeOut]
    next_cursor: str | None


class HandlerOut(BaseModel):
    name: str
    origin: str
    params_schema: dict[str, Any] | None
    secret_params: list[str]
    max_concurrency: int | None


class HandlerList(BaseModel):
    items: list[HandlerOut]


class PreviewRequest(Strict):
    schedule: ScheduleIn
    name: str = Field(
        default="preview",
        pattern=NAME_PATTERN,
        description="The job name `H` fields hash; the same name, the same times",
    )
    count: Count = 10
    after: Rfc3339 | None = Field(default=None, description="Default: now")


class FireTime(BaseModel):
    at: datetime = Field(description="UTC")
    local: str = Field(description="Wall-clock time in the schedule's timezone, with its offset")
    dst_transition: bool = Field(
        description="The zone's clocks change between the previous fire time (or `after`) and "
        "this one"
    )


class PreviewOut(BaseModel):
    times: list[FireTime]


class BackfillRequest(Strict):
    start: Rfc3339
    end: Rfc3339
    dry_run: bool = True
    per_second: float = Field(
        default=1.0, ge=0.001, le=100, description="Rate limit of the runs (runs a second)"
    )


class TriggerRequest(Strict):
    """A trigger takes no options yet: `{}` or no body."""


class BackfillOut(BaseModel):
    dry_run: bool
    occurrences: list[datetime] = Field(description="Occurrences that will run (or would)")
    already_run: list[datetime] = Field(description="Occurrences left out: they have executions")
    truncated: bool


class Problem(BaseModel):
    """RFC 9457 problem details; `errors` names each field at fault."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    errors: list[dict[str, str]] = Field(default_factory=list)


class Health(BaseModel):
    status: str


class EventRelay(BaseModel):
    """The outbox relay: informative only, events are off the runs' critical path."""

    state: str = Field(description="ok, or retrying (the publisher or the store is failing)")
    backlog: int = Field(description="Events written, not yet delivered")
    oldest_unsent_age_seconds: float | None
    last_error: str | None


class MailDelivery(BaseModel):
    """The mail server as the last sends found it: informative only, mail is off the runs'
    path (the alert scans keep what a failed send leaves, and try again)."""

    state: str = Field(description="unknown (nothing sent yet), ok, or failing")
    last_error: str | None
    failing_since: datetime | None


class Readiness(BaseModel):
    ready: bool
    problems: dict[str, str]
    events: EventRelay | None = Field(
        default=None, description="The event relay's state; it never makes the instance unready"
    )
    mail: MailDelivery | None = Field(
        default=None, description="The mail server's state; it never makes the instance unready"
    )


def of_domain(description: str = "Only those of the jobs of this domain") -> Any:
    """A list's `domain` filter: what belongs to that domain only (a run: its job's domain)."""
    return Field(default=None, pattern=DOMAIN_PATTERN, description=description)


class PageQuery(Strict):
    limit: int = Field(default=50, ge=1, le=500)
    cursor: str | None = Field(default=None, max_length=500)


class WriteQuery(Strict):
    dry_run: bool = Field(
        default=False,
        description="Run every check of the write and answer as it would (the job as it would "
        "be, or the same problem), changing nothing: no job, no history entry, no event",
    )


class JobListQuery(PageQuery):
    handler: str | None = Field(default=None, max_length=200)
    domain: str | None = of_domain("Only the jobs of this domain")
    enabled: bool | None = None
    name_prefix: str | None = Field(default=None, max_length=200)
    next_run_from: Rfc3339 | None = None
    next_run_to: Rfc3339 | None = None


SINCE = "Runs scheduled at or after this time"
UNTIL = "Runs scheduled before this time; must be after since"


class ExecutionListQuery(PageQuery):
    status: Status | None = None
    handler: str | None = Field(default=None, max_length=200)
    domain: str | None = of_domain()
    job_id: str | None = Field(default=None, max_length=64)
    since: Rfc3339 | None = Field(default=None, description=SINCE)
    until: Rfc3339 | None = Field(default=None, description=UNTIL)


class JobExecutionQuery(PageQuery):
    status: Status | None = None
    since: Rfc3339 | None = Field(default=None, description=SINCE)
    until: Rfc3339 | None = Field(default=None, description=UNTIL)


class RunningQuery(Strict):
    domain: str | None = of_domain()


class JobPreviewQuery(Strict):
    count: int = Field(default=10, ge=1, le=100)
    after: Rfc3339 | None = Field(default=None, description="Default: now")


class CancelRequestBody(Strict):
    """A cancel takes an optional reason: `{"reason": "..."}`, `{}` or no body."""

    reason: str = Field(default="", max_length=500, description="Why, kept with the record")


class CancelOut(BaseModel):
    execution_id: str
    requested_by: str = Field(description="The name of the token that asked")
    requested_at: datetime
    reason: str
    interrupts: str = Field(
        description="When the run stops: an async handler at once (it sees CancelledError), "
        "a sync handler when it returns or reaches its deadline (a thread cannot be "
        "interrupted), a queued run before it starts"
    )


class RunningOut(BaseModel):
    id: str
    job_id: str
    job_name: str
    handler: str
    instance: str | None = Field(description="The instance running it (the record's owner)")
    attempts: int
    scheduled_at: datetime
    started_at: datetime | None
    age_seconds: float = Field(description="Since it started (or was recorded), by the server")
    shard: int
    shards: int
    cancel_requested_by: str | None = None
    cancel_requested_at: datetime | None = None


class RunningPage(BaseModel):
    items: list[RunningOut]


class InstanceOut(BaseModel):
    id: str
    last_beat_at: datetime = Field(description="Its last heartbeat, as its own clock wrote it")
    running: int = Field(
        description="How many executions it holds running (of its domains, for a token limited "
        "to domains)"
    )
    # Defaults, so that this client reads the page of a daemon from before these fields.
    version: str | None = Field(
        default=None,
        description="The tickd version it runs, as it said at its last heartbeat; null from an "
        "instance that has not said (a release that does not)",
    )
    started_at: datetime | None = Field(
        default=None, description="When it started, by its own clock; null as for `version`"
    )
    partitions: int | None = Field(
        default=None,
        description="How many partitions of the due queue it holds: it reads due jobs only in "
        "those (0: none yet, or it is leaving; null from a daemon without partitions)",
    )
    runs_in_flight: int | None = Field(
        default=None,
        description="The runs it has claimed and not yet ended (armed, recorded, queued or "
        "running), as it said at its last heartbeat; null as for `version`, and for a token "
        "limited to domains (the count is of every domain's)",
    )


class InstancePage(BaseModel):
    items: list[InstanceOut]
