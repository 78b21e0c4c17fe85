"""The ports of tickd: every contract between the engine and a backend, documented once, here.

Each port has an embedded backend (fresh checkout, no services) and a production one; a URL in the
configuration picks it (see the ``open_*`` factory in each port's package). Methods take batches
where the caller has a batch: one round trip per batch, never one per job.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any, Protocol

from tickd.scheduler.clock import Clock
from tickd.scheduler.model import (
    DeadLetter,
    Execution,
    ExecutionError,
    ExecutionSummary,
    Job,
    Lease,
    Status,
)

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
class Finish:
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


@dataclass(frozen=True, kw_only=True, slots=True)
class JobQuery:
    """Ordered by name; `after_name` is the name of the last job of the previous page."""

    handler: str | None = None
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
    enabled: bool | None = None
    name_prefix: str | None = None
    next_run_from: datetime | None = None  # next_run_at >= this
    next_run_to: datetime | None = None  # next_run_at < this
    last_status: frozenset[Status] = frozenset()  # the status of its last run is one of these
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
    its fire lag. Skipped occurrences never started: they have no lag."""

    counts: dict[tuple[str, str], int]
    lag: LagPercentiles
    bucket_counts: list[dict[str, int]]
    bucket_lags: list[LagPercentiles]


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


class Store(Protocol):
    """Jobs, their executions, their history and the runs asked of them.

    The same on every backend, and pinned by tests/contract/test_store.py:
    - Every failure is a StoreError (a driver's exception never escapes); `transient` says
      whether the same call may succeed later (connection lost, database busy) or never will
      (a constraint, a document the database cannot hold).
    - Times go in and come out exactly, to the microsecond, in UTC.
    - Writes that the engine may replay after a lost connection (inserting executions and run
      requests) are idempotent by id: a duplicate is left as stored, and nothing is raised.
    - Each method is one round trip for its whole batch, or a small fixed number of them.
    - Only what a method says is atomic is atomic; on FerretDB a filtered update is not, which
      is why the lock keeps instances apart there (scheduler/store/mongodb.py).

    The outbox (durable events). Given an `event_source` (the instance id), the three writes of an
    execution's state (insert_executions, finish_executions, reap_expired_leases) write each
    execution's CloudEvent (scheduler/events `execution_event`) to the outbox with it; the relay
    (scheduler/relay.py) publishes them and marks them sent. An event's `id` is
    `<execution id>:<status>`, so writing one twice (a replayed batch) stores it once, and a
    consumer deduplicates redeliveries by it. On SQLite the events are in the same transaction as
    the executions. On MongoDB (FerretDB has no transactions) they are written by the command
    right BEFORE the executions': a crash in between leaves an event whose execution write never
    happened (the run is then retried or reaped, and a later event of the execution tells what
    became of it), never an execution change without its event: at least once, never lost.
    """

    async def open(self) -> None:
        """Connect and create the schema and the indexes the due and history queries need."""

    async def close(self) -> None:
        """Close what this store opened (never a client it was handed)."""

    async def ping(self) -> None:
        """Raise StoreError unless the store answers."""

    async def insert_job(self, job: Job, change: JobChange | None = None) -> None:
        """Add a job, and its history entry with it; DuplicateJobName if its name is taken."""

    async def replace_job(
        self, job: Job, expected_revision: int, change: JobChange, *, read: Job | None = None
    ) -> Job | None:
        """Write a job's definition (not its lease, fence or run state) if its revision is still
        `expected_revision`; the stored revision becomes expected_revision + 1. Returns the job
        as stored, or None if it changed meanwhile or is gone. DuplicateJobName on a taken name.

        With `read` (the job as the caller read it), the fields a run's end also moves
        (SCHEDULE_STATE) are written only where `job` changes them: a run's end does not bump
        the revision, and what it wrote since the read must not be put back (the occurrence it
        ran would be due again)."""

    async def insert_missing_jobs(self, jobs: Sequence[Job]) -> list[Job]:
        """Add the jobs whose names are not taken yet, leave the others as they are (seeding).

        Returns the jobs that were added."""

    async def get_job(self, job_id: str) -> Job | None:
        """The job as stored now (lease and run state included); None if there is none."""

    async def get_job_by_name(self, name: str) -> Job | None:
        """The job of that exact name (names are unique); None if there is none."""

    async def list_jobs(self, query: JobQuery | None = None) -> list[Job]:
        """Jobs ordered by name, filtered and paged by the query."""

    async def delete_job(
        self, job_id: str, change: JobChange | None = None, *, expected_revision: int | None = None
    ) -> bool:
        """Remove a job (its executions and history stay), and with it its pending run requests;
        False if there was none. With `expected_revision`, only if the job is still at that
        revision (compare-and-set, as replace_job): False, and nothing removed, otherwise."""

    async def list_changes(
        self, job_id: str, *, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[JobChange]:
        """A job's history, newest first; `before` is the (at, id) of the previous page's last."""

    async def record_change(self, change: JobChange) -> None:
        """A history entry for an action that does not change the job (trigger, retry...)."""

    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        """Queue runs outside the schedule, in one batch. A request whose id is queued already
        is left as it is (idempotent)."""

    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        """Whether a run of this occurrence is queued and not yet taken."""

    async def count_pending_requests(self, job_id: str, *, reason: str) -> int:
        """How many of a job's requests for this reason (trigger...) are queued, not yet taken."""

    async def due_run_requests(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        instance: str | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        """Up to `limit` requests whose not_before has passed, of jobs with no lease and whose
        handler is not among `exclude_handlers` (those at their concurrency limit), each with
        its job as it is now; ordered by not_before, then id. The requests left out are left out
        before the limit applies. A job with several due requests appears once for each.

        Shard entries are due too, while their job's lease is still their occurrence's: those
        not ended and not leased, or whose lease may be taken over (its instance died: the shard
        runs again alone). A lease may be taken over by the caller, `instance`, under the rule
        of `reap_expired_leases`: ended (`end_leases`), or expired by `now` and held by
        `instance` itself or by an owner with no heartbeat record."""

    async def claim_run_requests(
        self,
        requests: Sequence[RunRequest],
        claims: Sequence[Claim],
        now: datetime,
        *,
        event_source: str | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        """Claim each request's job (claims[i] goes with requests[i]) and, for each job won,
        mark its request taken by the job's new token, in one batch. Returns the pairs won. A
        request no longer queued (another instance ran it since it was read) wins nothing, and
        its job is let go. A taken request stays queued until its run's end takes it off
        (Finish.request_id), or its occurrence's shards do (start_occurrence): should its
        instance die, it is due again as soon as the job's lease is reaped, and nothing asked
        for is lost. It does not count as pending while its run holds the job.

        A shard entry is claimed instead: compare-and-set on the entry as the due query read it
        (its fence and lease), while its job's lease is still its occurrence's. The entry takes
        its own lease (owner and until from its claim) and token (its fence + 1) and stays
        queued; it is returned with them, with its job. A lease it had (expired) is taken over:
        the execution that lease guarded becomes `abandoned` (its event, with `event_source`,
        goes to the outbox). The occurrence's lease on the job is pushed back to outlive the
        shard's by as long again (until + (until - now)), time to take the shard over should
        its instance die."""

    async def start_occurrence(
        self, job_id: str, token: int, until: datetime, shards: Sequence[RunRequest]
    ) -> bool:
        """Hand a claimed sharded occurrence to its shards: while `token` still holds the job's
        lease, the lease becomes the occurrence's (owner OCCURRENCE_OWNER, expiring at `until`),
        the entries of any earlier occurrence of the job are dropped and `shards` (one entry a
        shard, `occurrence` = token) are queued; a request the occurrence was claimed for (taken
        by `token`) is the shards' now, and leaves the queue. False, and nothing written,
        otherwise."""

    async def renew_shard_lease(
        self, shard: RunRequest, token: int, until: datetime, now: datetime
    ) -> bool:
        """Move a shard entry's lease expiry while `token` holds it, and push back its
        occurrence's lease as a claim does; False if the token no longer holds it."""

    async def give_back_shards(self, shards: Sequence[tuple[RunRequest, int]]) -> None:
        """Clear these shard entries' leases, (entry, token), where the token still holds one:
        claimed shards that never started, due again at once. One round trip for the batch."""

    async def occurrence_shards(self, job_id: str, occurrence: int) -> list[RunRequest]:
        """The shard entries of an occurrence in progress (to tell whether every one ended)."""

    async def end_occurrence(self, job_id: str, occurrence: int, advance: Advance) -> bool:
        """End an occurrence whose shards have all ended: while `occurrence` still holds the
        job's lease, apply the advance (as finish_executions does) and clear the lease, then drop
        its entries. False, and nothing changed, otherwise (it ended already: two last shards
        racing end it once)."""

    async def executions_at(self, job_id: str, scheduled_ats: Sequence[datetime]) -> set[datetime]:
        """Which of these occurrences of a job already have an execution or a run request."""

    async def due_jobs(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        starved_before: datetime | None = None,
        first: Sequence[str] = (),
    ) -> list[Job]:
        """Enabled jobs with next_run_at <= now and no lease, most urgent first.

        Most urgent: priority, then next_run_at; but with `starved_before`, the jobs due since
        before then come first, oldest first, whatever their priority (so that under a
        sustained backlog every priority is taken within a bound). Before all of them, those
        of the jobs named in `first` that are due (the jobs whose runs a crash stranded: they
        have waited longest of all). Each job at most once. A job whose lease is held (live or
        expired) is not due: an expired lease is first reaped by `reap_expired_leases`."""

    async def due_backlog(self, now: datetime) -> Backlog:
        """How many jobs `due_jobs` could return now, without a limit, and the earliest
        next_run_at among them: read every few seconds for the gauges, never per tick."""

    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        """Compare-and-set a batch: each job takes its claim's lease and fencing token only if its
        revision and next_run_at are still those the claim read and it has no lease.

        Returns the jobs won, as they are after the claim. Losers are left untouched."""

    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        """Move a held lease's expiry; False if the token no longer holds it (fenced off)."""

    async def insert_executions(
        self, executions: Sequence[Execution], *, event_source: str | None = None
    ) -> None:
        """Record executions (running ones, or skipped ones already final) in one batch. An
        execution whose id is stored already is left as stored (idempotent). With `event_source`,
        their events go to the outbox with them (see the class)."""

    async def finish_executions(
        self, finishes: Sequence[Finish], *, event_source: str | None = None
    ) -> list[bool]:
        """End a batch of runs: write each execution's final state; then, for each whose job's
        lease token is still the execution's, apply its `advance` (None leaves the schedule as
        it is, so the occurrence runs again) and clear the lease. Returns, for each in order,
        whether its advance applied (False: the run had been fenced off). The executions are
        written before the jobs, so a crash in between leaves a lease to reap, never a job
        moved on without its record. A few round trips for the whole batch.

        A `shard` finish touches neither the job nor its lease: applied while the execution's
        token still holds its entry's lease, it clears that lease and, unless the run was
        abandoned (then the shard is due again, to run alone), marks the entry `ended`.

        With the executions, whether or not the run was fenced off, each `settles` finish marks
        its occurrence's other open or redriving dead letters of the same shard redriven. Each
        `redrive` of a run whose lease still held is queued (idempotent by request id) with its
        history entry: a run fenced off queues none, since its occurrence is another
        instance's now, and a re-drive would run it again. With
        `event_source`, each final execution's event goes to the outbox with it (see the
        class)."""

    async def beat(self, instance: str, now: datetime) -> None:
        """Say that `instance` is alive at `now` (its heartbeat)."""

    async def instances(self) -> dict[str, datetime]:
        """Every instance that beat and was not forgotten, with its last beat as its own clock
        wrote it: one cheap read. Only whether a beat changes means anything to another
        instance (see scheduler/heartbeat.py): clocks differ."""

    async def end_leases(self, owners: Sequence[str]) -> list[tuple[str, int | None]]:
        """End the leases these instances (found dead) hold, on jobs and on shard entries:
        their expiry becomes ENDED_LEASE_UNTIL, so the next reap, on any instance and whatever
        its clock, gives their runs back at once instead of when their timeout would have run
        out. Returns what the leases ended by this call were on, as (job id, shard) pairs, shard
        None for a job's own lease: the dead instances hold their locks too. A paused instance
        that comes back finds its tokens stale."""

    async def forget_instances(self, beats: Mapping[str, datetime]) -> None:
        """Delete the heartbeat records of these instances (found dead, their leases ended),
        each only while its beat is still the one given: one that beat again meanwhile (a
        paused process come back) stays. Keeps `instances` to the living and the newly dead."""

    async def give_back(self, leases: Sequence[tuple[str, int]]) -> None:
        """Clear these leases, (job id, token), where the token still holds one, and change
        nothing else: runs claimed ahead of their time that never started (a shutdown), whose
        occurrences then run as if never claimed. One round trip for the batch."""

    async def reap_expired_leases(
        self, now: datetime, *, instance: str | None = None, event_source: str | None = None
    ) -> list[Execution]:
        """Clear the job leases that may be taken over and mark the execution each guarded
        `abandoned`. The job keeps its next_run_at, so it runs again. Returns those executions.
        With `event_source`, their `abandoned` events go to the outbox with them.

        A lease may be taken over when it was ended (`end_leases`: its instance was found dead),
        or when its expiry is before `now` and its owner is the caller, `instance` (its own
        clock wrote the expiry), or has no heartbeat record (no instance, or one that never
        beat). `now` is the caller's clock: the leases of another instance that beats are never
        judged by it, since the two clocks may be apart by any amount (NTP step, restored VM);
        that instance reaps them itself, or they are ended once its beats stop. A sharded
        occurrence's lease (OCCURRENCE_OWNER, no instance's) is judged by time only while none
        of its shard entries holds a lease the caller may not take over: the occurrence lives
        while a shard of it runs on another instance that beats."""

    async def get_execution(self, execution_id: str) -> Execution | None:
        """The execution as stored now; None if there is none."""

    # -- the outbox (read by the relay, scheduler/relay.py) ---------------------------------------

    async def unsent_events(self, limit: int) -> list[OutboxEvent]:
        """Up to `limit` events not yet marked sent, oldest first (in the order they were
        written: a job's events in the order of its executions' changes)."""

    async def mark_events_sent(self, event_ids: Sequence[str], now: datetime) -> None:
        """Mark these events delivered at `now`, in one batch; unknown ids are ignored."""

    async def prune_sent_events(self, before: datetime, *, limit: int) -> int:
        """Delete at most `limit` events marked sent before `before`; returns how many. Unsent
        events are never pruned. A store may keep some up to a minute longer (MongoDB prunes by
        the minute they were sent in, which FerretDB can look up without reading the rest)."""

    async def outbox_backlog(self) -> OutboxBacklog:
        """How many events are unsent, and when the oldest of them was written."""

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        """Newest first (by scheduled_at, then id)."""

    # -- dead letters and retention (off the hot path) --------------------------------------------

    async def mark_dead_letters(
        self, execution_ids: Sequence[str], *, states: Sequence[DeadLetter], to: DeadLetter
    ) -> set[str]:
        """Compare-and-set: move each of these executions whose dead letter is in one of
        `states` to `to`. Returns the ids moved: of two callers racing on one dead letter (two
        re-drives), one wins, so an occurrence is never re-driven twice by one action. On
        FerretDB a filtered update is not atomic (see the class), so there the lock of the
        run, not this, keeps two runs of one job apart."""

    async def count_dead_letters(self) -> dict[str, int]:
        """Open (unhandled) dead letters by handler; handlers with none are left out."""

    async def prune_executions(self, retention: Retention, now: datetime, *, limit: int) -> int:
        """Delete at most `limit` executions that `retention` no longer keeps; returns how many.
        Never a running execution, an unhandled dead letter (open or redriving), nor the
        newest execution of a job (by scheduled_at, then id): what a job last did stays.
        A store may leave some for a later call (MongoDB reads by the hour and the minute runs
        finished in, which FerretDB can look up without reading the rest: an execution it
        kept as a job's newest or a dead letter is looked at again once the cutoff has moved
        on to the next hour, and it counts a run toward its job's bound a minute or two after the
        run finished)."""

    async def prune_changes(self, before: datetime, *, limit: int) -> int:
        """Delete at most `limit` history entries made before `before`, never a job's newest
        entry; returns how many."""

    # -- views: the API's jobs list and the dashboard's overview (off the hot path) -------------

    async def search_jobs(self, search: JobSearch) -> list[Job]:
        """A page of jobs: those the search's filters keep, in its order, after its cursor, at
        most `limit`; read through an index in that order, never every job."""

    async def count_jobs(self, search: JobSearch) -> int:
        """How many jobs the search's filters keep, whatever its cursor and limit."""

    async def execution_stats(
        self, since: datetime, until: datetime, bucket_seconds: int
    ) -> ExecutionStats:
        """Every execution due in [since, until), aggregated (see ExecutionStats)."""

    async def attention(
        self, since: datetime, until: datetime, late_before: datetime, *, limit: int
    ) -> Attention:
        """What needs ops now, grouped by job (see Attention); failures are those due in
        [since, until)."""


class Lock(Protocol):
    """Mutual exclusion per job across instances: SET key token NX PX ttl, released by token."""

    async def acquire_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        """Try every key at once, each with its own time to live in seconds; returns the keys now
        held with `token`. Raises LockUnavailable when the lock service cannot be reached."""

    async def extend(self, key: str, token: str, ttl_seconds: float) -> bool:
        """Push back the expiry of a key still held with `token`."""

    async def extend_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        """Push back the expiry of every key still held with `token`, each to its own time to
        live in seconds, in one round trip; returns the keys extended."""

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        """Release the keys still held with `token`; others are left alone."""

    async def break_many(self, keys: Sequence[str]) -> None:
        """Free the keys whoever holds them: only for keys whose holder is known dead (its
        heartbeat lapsed), which would otherwise keep them for the whole run's timeout."""

    async def ping(self) -> None:
        """Raise LockUnavailable unless the lock service answers."""

    async def close(self) -> None: ...


class LockUnavailable(Exception):
    """The lock service cannot be reached: no run may start (fail closed)."""


CloudEvent = dict[str, Any]


class EventPublisher(Protocol):
    """Execution events, CloudEvents 1.0 structured JSON, keyed by job id."""

    # False for a publisher that drops everything (none://): then no event is even written to
    # the outbox, and runs cost nothing for events.
    keeps_events: bool

    def publish(self, event: CloudEvent) -> None:
        """Hand an event over without blocking; never raises (an outage is counted, not fatal)."""

    async def publish_confirmed(
        self, events: Sequence[CloudEvent], *, timeout_seconds: float
    ) -> list[bool]:
        """Publish events in order (each keyed by its job id) and wait, at most the timeout, for
        their delivery: for each, whether the backend confirmed it. Never raises; an event not
        confirmed may still arrive later (the relay publishes it again: at least once)."""

    async def close(self, timeout_seconds: float) -> None:
        """Deliver what is pending within the deadline, then let go."""


class Mailer(Protocol):
    async def send(self, message: EmailMessage) -> None:
        """Deliver one message; raises MailError (with `transient`) when it could not."""

    async def close(self) -> None: ...


class MailError(Exception):
    def __init__(self, message: str, *, transient: bool, recipient_refused: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        # The receiving side refused the address itself, for good (a 5xx at RCPT, or a 5.1.x /
        # 5.2.x mailbox status): a hard bounce, as opposed to a refused login or message.
        self.recipient_refused = recipient_refused


@dataclass(frozen=True, kw_only=True)
class Ports:
    """The backends one engine runs on, opened and closed together by the daemon."""

    store: Store
    lock: Lock
    events: EventPublisher
    mailer: Mailer
    clock: Clock
