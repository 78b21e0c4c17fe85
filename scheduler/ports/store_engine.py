"""The store's roles the engine's own loops call: the dispatch, the runs and their ends, the
heartbeat, the outbox relay, housekeeping. Part of the store's contract (scheduler/ports/store.py,
Store), each method documented once, here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from tickd.scheduler.model import Execution, Job
from tickd.scheduler.ports.due_filter import EVERY_DUE, DueFilter
from tickd.scheduler.ports.store_values import (
    Advance,
    Backlog,
    Claim,
    InstanceStatus,
    InstanceView,
    LeaseTerms,
    OutboxBacklog,
    OutboxEvent,
    PartitionOwner,
    Retention,
    RunEnd,
    RunRequest,
)


class DispatchStore(Protocol):
    """The engine's dispatch: what is due, claiming it (fenced), recording the runs it starts,
    giving back what never starts, and reaping the leases of runs that died."""

    # True when two instances' claims of one job can never both win, whatever the timing (the
    # store locks the row while it compares and sets): the lease is then the run's lock, and the
    # run path takes none from the lock service. False where a claim's compare and its set can
    # interleave with another's (FerretDB), or where the store is one process's alone.
    claim_is_the_lock: bool

    @property
    def reads_partitions_in_turn(self) -> bool:
        """True where `due_jobs` with `in_turn` (DueFilter) reads the partitions given one at a
        time, in their order, and stops once it has its limit (FerretDB): every partition
        before the last it took a job from then had no more due."""

    async def due_jobs(self, now: datetime, limit: int, where: DueFilter = EVERY_DUE) -> list[Job]:
        """Enabled jobs with next_run_at <= now and no lease, most urgent (priority, then
        next_run_at) first, as `where` selects and orders them (DueFilter). Each job at most
        once. A job whose lease is held (live or expired) is not due: an expired lease is
        first reaped by `reap_expired_leases`."""

    async def claim_due_jobs(
        self,
        now: datetime,
        horizon: datetime,
        limit: int,
        *,
        lease: LeaseTerms,
        where: DueFilter = EVERY_DUE,
    ) -> list[Job] | None:
        """`due_jobs(horizon, limit, where)` and their claims at once, where the store can read
        and claim in one step: the jobs as claimed, in due_jobs' order. A job another claimer
        holds at that moment is passed over and does not count against `limit`, so two
        instances take two heads of the queue, not one. Offered only where the claim is the
        lock (`claim_is_the_lock`): no lock is taken between a read and its claim. None where
        the store does not offer it: it reads with due_jobs, then claims with claim_jobs."""

    async def claim_due_lanes(
        self,
        now: datetime,
        horizon: datetime,
        lanes: Sequence[tuple[int, DueFilter]],
        *,
        lease: LeaseTerms,
    ) -> list[list[Job]] | None:
        """Several `claim_due_jobs` in one round trip, where the store can: for each lane (its
        limit and its filter), its jobs as claimed, in its order. The lanes' filters select
        disjoint jobs (each busy domain's head, and the others'). Offered where
        `claim_due_jobs` is; None where the store does not offer it: the caller then reads
        each lane on its own."""

    async def due_run_requests(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        exclude_domains: Sequence[str] = (),
        exclude_keys: Sequence[str] = (),
        instance: str | None = None,
        partitions: Sequence[int] | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        """Up to `limit` requests whose not_before has passed, of jobs with no lease and whose
        handler is not among `exclude_handlers` (those at their concurrency limit) nor domain
        among `exclude_domains` (those at their cap of runs in flight) nor concurrency key
        among `exclude_keys` (those at their limit), each with its job as it is now; ordered by
        not_before, then id. The requests left out are left out before the limit applies. A job
        with several due requests appears once for each.

        With `partitions` (None: all), the requests of a job naming a concurrency key are read
        only where its partition (its key's) is among them, so that the key's owner alone
        admits its runs; those of the jobs naming none are read whatever the partitions. SQLite,
        one process's, reads them all.

        Shard entries are due too, while their job's lease is still their occurrence's: those
        not ended and not leased, or whose lease may be taken over (its instance died: the shard
        runs again alone). A lease may be taken over by the caller, `instance`, under the rule
        of `reap_expired_leases`: ended (`end_leases`), or expired by `now` and held by
        `instance` itself or by an owner with no heartbeat record."""

    async def running_by_key(self, keys: Sequence[str]) -> dict[str, int]:
        """For each of `keys`, how many jobs naming it as their concurrency key hold a lease now
        (live or expired: until it is given back, reaped or ended), in one round trip; a key
        none holds is absent. No keys: {}, without a round trip. The owner of a key's partition
        counts the key's runs in flight by it, those of a previous owner's runs too
        (scheduler/keys.py)."""

    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        """Compare-and-set a batch: each job takes its claim's lease and fencing token only if its
        revision and next_run_at are still those the claim read and it has no lease.

        Returns the jobs won, as they are after the claim. Losers are left untouched."""

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
        (RunEnd.request_id), or its occurrence's shards do (start_occurrence): should its
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

    async def give_back(self, leases: Sequence[tuple[str, int]]) -> None:
        """Clear these leases, (job id, token), where the token still holds one, and change
        nothing else: runs claimed ahead of their time that never started (a shutdown), whose
        occurrences then run as if never claimed. One round trip for the batch."""

    async def give_back_shards(self, shards: Sequence[tuple[RunRequest, int]]) -> None:
        """Clear these shard entries' leases, (entry, token), where the token still holds one:
        claimed shards that never started, due again at once. One round trip for the batch."""

    async def insert_executions(
        self, executions: Sequence[Execution], *, event_source: str | None = None
    ) -> None:
        """Record executions (running ones, or skipped ones already final) in one batch. An
        execution whose id is stored already is left as stored (idempotent). With `event_source`,
        their events go to the outbox with them (see Store)."""

    async def start_occurrence(
        self, job_id: str, token: int, until: datetime, shards: Sequence[RunRequest]
    ) -> bool:
        """Hand a claimed sharded occurrence to its shards: while `token` still holds the job's
        lease, the lease becomes the occurrence's (owner OCCURRENCE_OWNER, expiring at `until`),
        the entries of any earlier occurrence of the job are dropped and `shards` (one entry a
        shard, `occurrence` = token) are queued; a request the occurrence was claimed for (taken
        by `token`) is the shards' now, and leaves the queue. False, and nothing written,
        otherwise."""

    async def reap_expired_leases(
        self, now: datetime, *, instance: str | None = None, event_source: str | None = None
    ) -> list[Execution]:
        """Clear the job leases that may be taken over and mark the execution each guarded
        `abandoned` (error LeaseExpired). The job keeps its next_run_at, so it runs again, within
        its retries: the store counts how many times each occurrence (the job and scheduled_at
        of a plain run) was abandoned so since it last ended for good, and the run that takes
        the count past the job's max_retries + 1 attempts is written as the end
        `dead_letters.abandoned_for_good` gives it, as write_ends writes a run's end (a
        dead letter, or re-driven by the job's policy; its schedule moved on, a requested
        run's request off the queue): its occurrence does not run again. A graceful shutdown's
        abandoned runs (error Shutdown) do not count. Returns those executions, as written.
        With `event_source`, their `abandoned` events go to the outbox with them. A reap that
        stops before a dead letter is written leaves its lease held: the next reap ends it.

        A lease may be taken over when it was ended (`end_leases`: its instance was found dead),
        or when its expiry is before `now` and its owner is the caller, `instance` (its own
        clock wrote the expiry), or has no heartbeat record (no instance, or one that never
        beat). `now` is the caller's clock: the leases of another instance that beats are never
        judged by it, since the two clocks may be apart by any amount (NTP step, restored VM);
        that instance reaps them itself, or they are ended once its beats stop. A sharded
        occurrence's lease (OCCURRENCE_OWNER, no instance's) is judged by time only while none
        of its shard entries holds a lease the caller may not take over: the occurrence lives
        while a shard of it runs on another instance that beats."""


class CompletionStore(Protocol):
    """The engine's runs as they go on and end: keeping their leases, writing their ends, and
    ending a sharded occurrence once its shards have."""

    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        """Move a held lease's expiry; False if the token no longer holds it (fenced off)."""

    async def renew_shard_lease(
        self, shard: RunRequest, token: int, until: datetime, now: datetime
    ) -> bool:
        """Move a shard entry's lease expiry while `token` holds it, and push back its
        occurrence's lease as a claim does; False if the token no longer holds it."""

    async def write_ends(
        self, finishes: Sequence[RunEnd], *, event_source: str | None = None
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
        `event_source`, each final execution's event goes to the outbox with it (see
        Store)."""

    async def occurrence_shards(self, job_id: str, occurrence: int) -> list[RunRequest]:
        """The shard entries of an occurrence in progress (to tell whether every one ended)."""

    async def end_occurrence(self, job_id: str, occurrence: int, advance: Advance) -> bool:
        """End an occurrence whose shards have all ended: while `occurrence` still holds the
        job's lease, apply the advance (as write_ends does) and clear the lease, then drop
        its entries. False, and nothing changed, otherwise (it ended already: two last shards
        racing end it once)."""


class InstanceStore(Protocol):
    """The instances' heartbeats, and the leases of the instances found dead
    (scheduler/maintenance/heartbeat.py)."""

    async def beat(
        self, instance: str, now: datetime, status: InstanceStatus | None = None
    ) -> dict[str, datetime]:
        """Say that `instance` is alive at `now` (its heartbeat), and how it is (`status`;
        without, the last one stands). Answers every instance's last beat, this one's included,
        as `instances` would: each beat of the heartbeat reads them, so a store answers them in
        the same round trip where it can."""

    async def instance_views(self) -> list[InstanceView]:
        """Every instance that beat and was not forgotten, by id, as ops see it."""

    async def instances(self) -> dict[str, datetime]:
        """Every instance that beat and was not forgotten, with its last beat as its own clock
        wrote it: one cheap read. Only whether a beat changes means anything to another
        instance (see scheduler/maintenance/heartbeat.py): clocks differ."""

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


class PartitionStore(Protocol):
    """The partitions of the due queue and their owners (scheduler/maintenance/partitions.py).
    Every job is in partition `job_partition(job, partition_count)`: its concurrency key's,
    or its own (scheduler/partitions.py)."""

    # How many partitions an open that creates the store makes (set before the open).
    new_partition_count: int
    # How many partitions the store has: fixed when it was created, read at open.
    partition_count: int

    async def partition_owners(self) -> list[PartitionOwner]:
        """Every partition, by number, with its owner and epoch."""

    async def take_partitions(self, instance: str, parts: Sequence[int]) -> dict[int, int]:
        """Take for `instance` those of `parts` that are free, its own already, or held by an
        instance with no heartbeat record (forgotten as dead); a change of owner raises the
        partition's epoch. Returns the epoch of each of `parts` that `instance` holds after
        the call (one held by a live instance stays with it)."""

    async def release_partitions(self, instance: str, parts: Sequence[int]) -> None:
        """Free those of `parts` that `instance` holds."""


class OutboxStore(Protocol):
    """The outbox's events as the relay delivers them (scheduler/maintenance/relay.py); the
    writes of an execution's state put them there (see Store)."""

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


class HousekeepingStore(Protocol):
    """Off the hot path: the counts behind the gauges, and pruning what retention no longer
    keeps (scheduler/maintenance/retention.py, scheduler/maintenance/backlog.py)."""

    async def due_backlog(
        self,
        now: datetime,
        *,
        partitions: Sequence[int] | None = None,
        domains: frozenset[str] | None = None,
    ) -> Backlog:
        """How many jobs `due_jobs` could return now, without a limit, and the earliest
        next_run_at among them, in `partitions` as `due_jobs` reads them (None: in all) and in
        `domains` (None: in all): read every few seconds for the gauges, never per tick."""

    async def count_dead_letters(self) -> dict[tuple[str, str], int]:
        """Open (unhandled) dead letters by handler and their job's domain ("" for a deleted
        job's); pairs with none are left out."""

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
