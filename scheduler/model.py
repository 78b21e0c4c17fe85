"""The data model shared by every part of tickd: jobs, their schedules and their executions.

Objects are frozen and validated at construction, so a Job or an Execution that exists is a valid
one; changes go through ``dataclasses.replace``. All datetimes are timezone-aware UTC.
"""

from __future__ import annotations

import enum
import functools
import random
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from tickd.scheduler.domains import DEFAULT_DOMAIN, DOMAIN_RULE, is_domain_name
from tickd.scheduler.keys import key_problem


class Priority(enum.IntEnum):
    """Lower value runs first: the due query orders by priority, then by next_run_at."""

    CRITICAL = 0
    HIGH = 1
    NORMAL = 2
    LOW = 3

    @classmethod
    def parse(cls, value: str | int | Priority) -> Priority:
        if isinstance(value, Priority):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.upper()]
        except KeyError:
            names = ", ".join(p.name.lower() for p in cls)
            raise ValueError(f"unknown priority {value!r} (expected one of {names})") from None


class Status(enum.StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    ABANDONED = "abandoned"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"  # someone asked for it to stop (CancelRequest): not retried

    @property
    def is_failure(self) -> bool:
        return self in (Status.FAILED, Status.TIMEOUT)


class DeadLetter(enum.StrEnum):
    """Where an occurrence that failed for good stands. Only `open` ones are unhandled (the
    gauge counts them); `open` and `redriving` ones are never pruned."""

    OPEN = "open"  # failed or timed out after its last retry; nobody has acted on it yet
    REDRIVING = "redriving"  # a re-drive of its occurrence is queued or running
    REDRIVEN = "redriven"  # a later run of its occurrence ended (that run tells how)
    DISCARDED = "discarded"  # ops gave up on it

    @property
    def unhandled(self) -> bool:
        return self in (DeadLetter.OPEN, DeadLetter.REDRIVING)


class MisfirePolicy(enum.StrEnum):
    """What to do with occurrences that were missed by more than the grace period."""

    COALESCE = "coalesce"  # run once for all of them, then carry on from now
    RUN_ALL = "run_all"  # run every missed occurrence, one after the other
    SKIP = "skip"  # run none of them; each leaves a `skipped` execution


class ValidationError(ValueError):
    """Bad input: names the field at fault so that a user can fix it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def utcnow() -> datetime:
    return datetime.now(UTC)


_last_id_time = 0
# Not a secret (ids and lock tokens are shown and logged); os.urandom for each id was a system
# call per id, several a run. Seeded from os.urandom, so processes started at once differ.
_id_bits = random.Random()


def new_id() -> str:
    """32 hex digits that sort by creation time (nanoseconds, then 64 random bits), as MongoDB's
    ObjectIds do: listings of executions of one instant still come in the order they were made."""
    global _last_id_time
    _last_id_time = max(time.time_ns(), _last_id_time + 1)
    return f"{_last_id_time:016x}{_id_bits.getrandbits(64):016x}"


def require_utc(name: str, value: datetime | None) -> None:
    if value is not None and value.utcoffset() is None:
        raise ValidationError(name, "must be timezone-aware")


@dataclass(frozen=True, kw_only=True, slots=True)
class CronSchedule:
    """Six fields, seconds first; five fields mean seconds = 0. `H` picks a stable value per job."""

    expr: str
    timezone: str = "UTC"
    kind: Literal["cron"] = "cron"


@dataclass(frozen=True, kw_only=True, slots=True)
class IntervalSchedule:
    every_seconds: float
    kind: Literal["interval"] = "interval"

    def __post_init__(self) -> None:
        if not self.every_seconds > 0:
            raise ValidationError("schedule.every_seconds", "must be greater than 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class OnceSchedule:
    at: datetime
    kind: Literal["once"] = "once"

    def __post_init__(self) -> None:
        require_utc("schedule.at", self.at)


Schedule = CronSchedule | IntervalSchedule | OnceSchedule


@dataclass(frozen=True, kw_only=True, slots=True)
class Misfire:
    policy: MisfirePolicy = MisfirePolicy.COALESCE
    # An occurrence this late or less is simply run late, whatever the policy.
    grace_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.grace_seconds < 0:
            raise ValidationError("misfire.grace_seconds", "must not be negative")


# Bounds of a re-drive policy: with the delay doubling, 20 re-drives of a day's backoff would
# take years; the delay itself stops doubling at a week.
MAX_REDRIVE_ATTEMPTS = 20
MAX_REDRIVE_BACKOFF_SECONDS = 86400.0
MAX_REDRIVE_DELAY_SECONDS = 7 * 86400.0
# A sharded occurrence is this many executions at most: each takes a worker and a record.
MAX_SHARDS = 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class RedrivePolicy:
    """Re-drive an occurrence that failed for good (a dead letter) up to `max_attempts` times,
    each a run request `backoff_seconds` after the last failure, the wait doubling each time."""

    max_attempts: int
    backoff_seconds: float

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= MAX_REDRIVE_ATTEMPTS:
            raise ValidationError(
                "redrive.max_attempts", f"must be between 1 and {MAX_REDRIVE_ATTEMPTS}"
            )
        if not 0 < self.backoff_seconds <= MAX_REDRIVE_BACKOFF_SECONDS:
            raise ValidationError(
                "redrive.backoff_seconds",
                f"must be greater than 0 and at most {MAX_REDRIVE_BACKOFF_SECONDS:g}",
            )

    def delay_seconds(self, redrive: int) -> float:
        """The wait before the `redrive`-th re-drive (1 for the first)."""
        return float(min(self.backoff_seconds * 2 ** (redrive - 1), MAX_REDRIVE_DELAY_SECONDS))


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """Held by the instance running a job; `token` fences every write of that run."""

    owner: str
    token: int
    until: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionSummary:
    execution_id: str
    status: Status
    finished_at: datetime
    error: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    id: str = field(default_factory=new_id)
    name: str
    handler: str
    schedule: Schedule
    params: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    next_run_at: datetime | None = None
    timeout_seconds: float = 60.0
    max_retries: int = 0
    priority: Priority = Priority.NORMAL
    misfire: Misfire = field(default_factory=Misfire)
    # Bounded random delay added to each fire time, to flatten bursts at :00.
    jitter_seconds: float = 0.0
    lease: Lease | None = None
    # Highest fencing token handed out for this job; a claim takes fence + 1.
    fence: int = 0
    # Bumped by every change of the definition; a claim only succeeds on the revision it read.
    revision: int = 1
    consecutive_failures: int = 0
    paused_reason: str | None = None
    last_execution: ExecutionSummary | None = None
    system: bool = False
    # Re-drive this job's dead letters automatically (None: only when ops ask).
    redrive: RedrivePolicy | None = None
    # Each occurrence runs as this many executions (shards 0..shards-1), all of which must
    # succeed for the occurrence to; 1 is a plain job.
    shards: int = 1
    # Who keeps the definition (`tickd apply` marks the jobs it makes); None: made by hand.
    managed_by: str | None = None
    # The team or tenant the job belongs to (scheduler/domains.py).
    domain: str = DEFAULT_DOMAIN
    # At most the limit's runs of the jobs naming the key in flight at once (scheduler/keys.py).
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise ValidationError("name", "must not be empty")
        if not self.handler:
            raise ValidationError("handler", "must not be empty")
        if not self.timeout_seconds > 0:
            raise ValidationError("timeout_seconds", "must be greater than 0")
        if self.max_retries < 0:
            raise ValidationError("max_retries", "must not be negative")
        if self.jitter_seconds < 0:
            raise ValidationError("jitter_seconds", "must not be negative")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValidationError("shards", f"must be from 1 to {MAX_SHARDS}")
        if not is_domain_name(self.domain):
            raise ValidationError("domain", f"must be {DOMAIN_RULE}")
        if problem := key_problem(self.concurrency_key, self.concurrency_limit, self.shards):
            raise ValidationError(*problem)
        require_utc("next_run_at", self.next_run_at)


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionError:
    type: str
    message: str
    # Where the handler raised, its secrets masked; None when it did not raise (a timeout, a
    # bad result). Kept in the execution record, never in its events.
    traceback: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    """One call of a run's handler, as its run page shows it."""

    number: int  # 1 for the first
    started_at: datetime
    finished_at: datetime
    error: ExecutionError | None = None
    # How long the run waited before the next attempt; None after the last.
    backoff_seconds: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LogLine:
    """A line a run's handler logged through `ctx.logger`, as its run page shows it: masked,
    cut to a bounded length (plugin/contexts.py)."""

    at: datetime
    level: str  # INFO, WARNING...
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelRequest:
    """Someone asked for a running or queued execution to stop. The instance running it finds
    the request within a tick and cancels its handler; the first request for a run stands."""

    execution_id: str
    requested_by: str
    requested_at: datetime
    reason: str = ""

    @property
    def message(self) -> str:
        """The cancelled run's error message: who asked, and why if they said."""
        who = f"cancelled by {self.requested_by}"
        return f"{who}: {self.reason}" if self.reason else who


@dataclass(frozen=True, kw_only=True, slots=True)
class Execution:
    id: str = field(default_factory=new_id)
    job_id: str
    job_name: str
    handler: str
    scheduled_at: datetime
    status: Status
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None
    attempts: int = 0
    error: ExecutionError | None = None
    result: dict[str, Any] | None = None
    owner: str | None = None
    token: int | None = None
    # Set when the run failed for good: the occurrence is a dead letter (see DeadLetter).
    dead_letter: DeadLetter | None = None
    # Which shard of its occurrence this run is, of how many (0 of 1: a plain run).
    shard: int = 0
    shards: int = 1
    # How the run was asked for (trigger, retry, backfill, redrive); None: an occurrence of its
    # schedule. Only a scheduled occurrence's first start counts as fire lag.
    requested: str | None = None
    # Every attempt, when there was more than one; a run of one attempt is its own record
    # (started_at, finished_at, error).
    attempt_log: tuple[Attempt, ...] = ()
    # What its handler logged, the first lines of it (plugin/contexts.py bounds them).
    log: tuple[LogLine, ...] = ()

    @property
    def occurrence(self) -> str:
        """The occurrence this run is of: every shard of it, and every re-run, shares it."""
        return f"{self.job_id}:{_iso(self.scheduled_at)}"

    @property
    def idempotency_key(self) -> str:
        """Stable across the attempts (and retries) of one occurrence of one job, or of one
        shard of it."""
        if self.shards == 1:
            return self.occurrence
        return f"{self.occurrence}:shard-{self.shard}"

    def ended(
        self,
        *,
        status: Status,
        started_at: datetime,
        finished_at: datetime,
        duration_ms: float,
        attempts: int,
        error: ExecutionError | None,
        result: dict[str, Any] | None,
        attempt_log: tuple[Attempt, ...] = (),
        log: tuple[LogLine, ...] = (),
    ) -> Execution:
        """This run as it ended: `started_at` is when its handler started, no longer when the
        run was recorded."""
        return replace(
            self,
            status=status,
            started_at=started_at,
            finished_at=finished_at,
            duration_ms=duration_ms,
            attempts=attempts,
            error=error,
            result=result,
            attempt_log=attempt_log,
            log=log,
        )

    def summary(self) -> ExecutionSummary:
        """What a job (or a shard's entry) keeps of its last run, once the run has ended."""
        assert self.finished_at is not None
        return ExecutionSummary(
            execution_id=self.id,
            status=self.status,
            finished_at=self.finished_at,
            error=self.error.message if self.error else None,
        )


def _iso(at: datetime) -> str:
    # Only UTC is kept: 13:00+01:00 equals 12:00 UTC, and would be read back as the other.
    return _utc_iso(at) if at.tzinfo is UTC else at.isoformat()


# The runs of one instant share its time: its text (the idempotency key's) is made once, not
# once a run.
@functools.lru_cache(maxsize=256)
def _utc_iso(at: datetime) -> str:
    return at.isoformat()
