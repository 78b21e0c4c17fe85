"""The store's vocabulary: the values its methods take and return, its errors, its constants.

The methods themselves, grouped by the role that calls them, are in scheduler/ports/store.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tickd.scheduler.model import (
    DeadLetter,
    Execution,
    ExecutionError,
    ExecutionSummary,
    Job,
    Lease,
    Status,
)

# An execution's event, CloudEvents 1.0 structured JSON: what the outbox holds and the event
# publisher (scheduler/ports/backends.py, EventPublisher) sends.
CloudEvent = dict[str, Any]

# The owner of a sharded occurrence's lease on its job: no instance, so that no instance's death
# ends it (its shards have leases of their own, on their entries).
OCCURRENCE_OWNER = "(shards)"
# The expiry of a lease that Store.end_leases ended: before any clock's now, so that every
# instance takes it for expired whatever the skew between its clock and the ender's.
ENDED_LEASE_UNTIL = datetime(1970, 1, 1, tzinfo=UTC)


class StoreError(Exception):
    """A store failure; `transient` ones (connection lost, primary stepped down) are retried."""

    transient = True


class UnstorableValue(StoreError):
    """A value the store cannot hold: a key with a NUL byte (BSON), or one FerretDB refuses
    (starting with `$`, holding a `.`). The request is at fault, not the store; `reason` says
    what was refused, without the value."""

    transient = False

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DuplicateJobName(StoreError):
    transient = False

    def __init__(self, name: str) -> None:
        super().__init__(f"a job named {name!r} exists already")
        self.name = name


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """Lease a job to `owner` until `until`, only if it is still as the due query read it.

    The store hands out the fencing token (the job's fence + 1), so two claims can never share one.
    A claim for a run request (`next_run_at` None) does not care when the job is next due.
    """

    job_id: str
    revision: int
    next_run_at: datetime | None
    owner: str
    until: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaseTerms:
    """The leases of jobs claimed as they are read: held by `owner` until each job's time (or
    the claim's, if later), its timeout and `margin_seconds`."""

    owner: str
    margin_seconds: float


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """What an instance says of itself at each beat, for ops (`tickd instances`)."""

    version: str
    started_at: datetime
    runs_in_flight: int  # claimed and not yet ended: armed, recorded, queued or running


@dataclass(frozen=True, slots=True)
class InstanceView:
    """An instance as ops see it: its last beat (by its own clock), what it last said of itself
    (None from an instance that says nothing) and how many partitions it holds."""

    instance: str
    beat_at: datetime
    status: InstanceStatus | None
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionOwner:
    """A partition of the due queue as the store holds it: its owner (None: free) and its epoch,
    which every change of owner raises."""

    part: int
    owner: str | None
    epoch: int


# The fields of a job both ops (replace_job) and a run's end (Advance) write.
SCHEDULE_STATE = ("next_run_at", "enabled", "paused_reason", "consecutive_failures")


def unchanged_state(job: Job, read: Job | None) -> tuple[str, ...]:
    """The SCHEDULE_STATE fields `job` leaves as they were `read` (none without a read)."""
    if read is None:
        return ()
    return tuple(name for name in SCHEDULE_STATE if getattr(job, name) == getattr(read, name))


@dataclass(frozen=True, kw_only=True, slots=True)
class Advance:
    """The job's new state after a run; applied only while the run's lease token still holds.

    The schedule part (next_run_at, enabled, paused_reason) applies only while ops have not
    changed when the job runs: a pause or a new schedule made during the run wins over the
    schedule the run computed from the old definition. With `claimed_next_run_at` (a scheduled
    run's), that is while the job is still enabled and due at the time the run claimed, so an
    edit of anything else (its params, retries, name) still lets the run move the job on:
    otherwise the occurrence that ran would be due again and run twice. Without it (a requested
    run, a sharded occurrence), while the job's revision is still `revision`."""

    revision: int
    next_run_at: datetime | None
    enabled: bool
    consecutive_failures: int
    paused_reason: str | None
    last_execution: ExecutionSummary
    claimed_next_run_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Backlog:
    """Jobs due and free to run (enabled, no lease), and when the longest-waiting fell due."""

    due: int
    oldest_due_at: datetime | None


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A run's end: its execution as final, and the job's new state (None: give the occurrence
    back, as after a shutdown).

    `settles`: the run re-ran its occurrence (a run request), so its end settles the
    occurrence's earlier dead letters of the same shard (open or redriving become redriven).
    `redrive`: the run failed for good and the job's policy re-drives it: queue this request,
    with its history entry.
    `shard`: the run was a shard of an occurrence in progress, under this entry's lease: its end
    is fenced by the entry (the execution's token), not by the job, which it leaves as it is.
    `request_id`: the run request (trigger, retry, re-drive, backfill) the run was, which stayed
    queued while it ran: its end takes it off the queue. Not set for a run abandoned before it
    started (a shutdown), whose request is then due again."""

    execution: Execution
    advance: Advance | None
    settles: bool = False
    redrive: tuple[RunRequest, JobChange] | None = None
    shard: RunRequest | None = None
    request_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OutboxEvent:
    """An execution's event as the outbox holds it until the relay has it delivered: the
    CloudEvent itself (its `id` is stable: `<execution id>:<status>`), the job it is keyed by,
    and when it was written (its own `time`)."""

    id: str
    job_id: str
    event: CloudEvent
    written_at: datetime


@dataclass(frozen=True, slots=True)
class OutboxBacklog:
    """Events not yet delivered, and when the oldest of them was written."""

    unsent: int
    oldest_written_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionQuery:
    """Newest first; `before` is the (scheduled_at, id) of the last row of the previous page."""

    job_id: str | None = None
    status: Status | None = None
    handler: str | None = None
    since: datetime | None = None  # scheduled_at >= since
    until: datetime | None = None  # scheduled_at < until
    before: tuple[datetime, str] | None = None
    limit: int = 100
    dead_letter: DeadLetter | None = None  # only the dead letters in this state
    # Only the executions of jobs in these domains (None: of any); those of a deleted job are in
    # none. Read with the jobs table (SQL) or the domains' job ids (MongoDB), in the same read.
    domains: frozenset[str] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class JobQuery:
    """Ordered by name; `after_name` is the name of the last job of the previous page."""

    handler: str | None = None
    domain: str | None = None  # only the jobs of this domain
    enabled: bool | None = None
    name_prefix: str | None = None
    next_run_from: datetime | None = None  # next_run_at >= this
    next_run_to: datetime | None = None  # next_run_at < this
    after_name: str | None = None
    limit: int = 100


class JobOrder(enum.StrEnum):
    NAME = "name"
    NEXT_RUN = "next_run"  # the soonest first; jobs with no next run last, by name


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSearch:
    """A page of the jobs list, filtered, in `order`, after the previous page's last job: its
    name, and in NEXT_RUN order its next run (`after_next_run_at` None with `after_name` set:
    the previous page ended among the jobs with no next run)."""

    text: str | None = None  # in the name or the id, ignoring ASCII case
    handler: str | None = None
    domain: str | None = None  # only the jobs of this domain
    enabled: bool | None = None
    name_prefix: str | None = None
    next_run_from: datetime | None = None  # next_run_at >= this
    next_run_to: datetime | None = None  # next_run_at < this
    last_status: frozenset[Status] = frozenset()  # the status of its last run is one of these
    domains: frozenset[str] | None = None  # only the jobs of these domains (None: of any)
    order: JobOrder = JobOrder.NAME
    after_name: str | None = None
    after_next_run_at: datetime | None = None
    limit: int = 100


@dataclass(frozen=True, kw_only=True, slots=True)
class LagPercentiles:
    """Fire lag of the occurrences that started: each one's first start minus its due time, in
    seconds, nearest rank (a value that was measured, never one between two)."""

    measured: int
    p50: float | None
    p99: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionStats:
    """Executions due in [since, until), counted whole by the store, never a sample:
    `counts` by (status, handler); per bucket of `bucket_seconds` from `since`, by status, and
    its fire lag. Skipped occurrences never started: they have no lag.

    A store that stops a long read counts the newest buckets first: `counted_since` is then the
    start of the oldest bucket it counted whole (`until` if none), and what is due before it is
    left out of every figure. None: the whole window is counted."""

    counts: dict[tuple[str, str], int]
    lag: LagPercentiles
    bucket_counts: list[dict[str, int]]
    bucket_lags: list[LagPercentiles]
    counted_since: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class JobTrouble:
    """One job's executions of a kind (open dead letters, or failures of a window): how many,
    and the newest few distinct (status, error) of them, newest first."""

    job_id: str
    job_name: str
    handler: str
    count: int
    newest_at: datetime
    errors: tuple[tuple[Status, ExecutionError | None, datetime], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Attention:
    """What needs ops, grouped by job, the most recent first, each list cut at the limit asked
    for, each total whole: open dead letters; failed, timed-out, abandoned and skipped
    executions of the window; jobs whose last runs failed (consecutive_failures > 0), most
    failures first; and jobs free to run but due before `late_before` (most late first)."""

    dead_letters: list[JobTrouble]
    dead_letters_total: int
    dead_letter_jobs: int
    failures: list[JobTrouble]
    failure_jobs: int
    failing: list[Job]
    failing_total: int
    late: list[Job]
    late_total: int


@dataclass(frozen=True, kw_only=True, slots=True)
class JobChange:
    """One entry of a job's history: who did what, when, and the fields it changed."""

    id: str
    job_id: str
    job_name: str
    at: datetime
    actor: str
    action: str  # create, update, pause, resume, delete, trigger, retry, backfill, redrive...
    changes: dict[str, Any]  # field -> {"from": before, "to": after}


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRequest:
    """An occurrence to run outside the schedule (trigger now, retry, backfill); the schedule
    itself does not move. Taken by the dispatcher once `not_before` has passed."""

    id: str
    job_id: str
    scheduled_at: datetime
    reason: str  # trigger, retry, backfill, redrive
    not_before: datetime
    created_at: datetime
    # For an automatic re-drive, which one it is (1 for the first); 0 for any other request.
    redrives: int = 0
    # Set to run one shard of a sharded occurrence alone (a re-drive or retry of that shard),
    # of `shards` as the job had when it failed; None: every shard of the job.
    shard: int | None = None
    shards: int | None = None
    # Set on a shard entry: one shard of a sharded occurrence in progress, which any instance
    # may take (see Store.start_occurrence). `occurrence` is the occurrence's token (its job's
    # lease token while it runs); `revision` the job's revision it was claimed at; `advance_from`
    # where its schedule moves on from once it ends (None: a requested occurrence, which leaves
    # the schedule alone). The entry stays queued until the occurrence ends: `lease` is the
    # instance running it now (its token fences that run alone), `fence` the highest token it
    # handed out, `ended` how its last run ended (then it is not due any more).
    occurrence: int | None = None
    revision: int = 0
    advance_from: datetime | None = None
    lease: Lease | None = None
    fence: int = 0
    ended: ExecutionSummary | None = None
    # The job's next fire time its occurrence was claimed at: the occurrence's end moves the
    # schedule while the job is still due then (Advance.claimed_next_run_at).
    claimed_next_run_at: datetime | None = None


# A shard's fencing tokens are its own range of its job's: above every token the job hands out
# (its fence, far below 2**31), distinct per occurrence and shard, so that (job id, token) still
# names one run: occurrence << 32 | shard << 16, then one more per claim of the shard.
SHARD_TOKEN_OCCURRENCE_SHIFT = 32
SHARD_TOKEN_SHARD_SHIFT = 16


def shard_fence(occurrence: int, shard: int) -> int:
    """The fence a shard entry starts from: its first claim's token is this + 1."""
    return occurrence << SHARD_TOKEN_OCCURRENCE_SHIFT | shard << SHARD_TOKEN_SHARD_SHIFT


@dataclass(frozen=True, kw_only=True, slots=True)
class Retention:
    """What pruning keeps: executions finished within `days` (0: for ever) and each job's
    `max_per_job` newest ones (0: no count bound), for the executions of `handler`, or, with
    `handler` None, of every handler but those in `except_handlers` (they have their own)."""

    days: int
    max_per_job: int
    handler: str | None = None
    except_handlers: tuple[str, ...] = ()
