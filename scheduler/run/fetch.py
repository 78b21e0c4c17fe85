"""The fetch stage: what the dispatcher claims next, and how much. Run requests first, then the
jobs falling due before the lookahead horizon, most urgent first, as many as the workers and
the timers have room for (counted in the ledger), each handler within its concurrency limit,
each domain within its cap and each concurrency key within its limit
(scheduler/admission/key_limits.py).
Behind the clock (more due now than the workers could take), it fetches only what is due until
it has caught up; under a backlog, the jobs waiting longest go first, the run requests are
read every REQUESTS_EVERY, not at each fetch, and the domains share the fetch by weight
(scheduler/admission/fair_share.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickd.scheduler.admission.fair_share import DomainCaps, DomainWeights, LaneRead, Lanes
from tickd.scheduler.admission.key_limits import KeyLimits
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.partitions import Partitions, PartitionTurns
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import DueFilter, LeaseTerms
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_api import DomainStore
from tickd.scheduler.ports.store_engine import DispatchStore
from tickd.scheduler.run.ledger import DueRun, Ledger, one_per_job

# Under a backlog (full fetches back to back, dozens a second) the run requests are read this
# often, not at each fetch: each read is a round trip that almost always finds none. A request
# waits this much longer at most behind a burst; otherwise every fetch reads them.
REQUESTS_EVERY = timedelta(seconds=0.25)


@dataclass(frozen=True, slots=True)
class Skipped:
    """What a fetch's reads leave out: the handlers at their concurrency limit, the keys at
    theirs, the domains at their cap of runs in flight."""

    handlers: list[str]
    keys: list[str]
    domains: list[str]


@dataclass(frozen=True, slots=True)
class Fetched:
    read: int  # due jobs and requests read
    runs: list[DueRun]  # of those, the runs to claim: one per job, within their handlers' limits
    full: bool  # the fetch hit its limit: more may be due
    left: list[DueRun]  # runs claimed as they were read and not taken: their leases go back


class Fetcher:
    def __init__(
        self,
        *,
        settings: Settings,
        store: DispatchStore,
        domains: DomainStore,
        ledger: Ledger,
        registry: HandlerRegistry,
        clock: Clock,
        partitions: Partitions | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock  # times the reads that look at every domain
        # The partitions this instance reads due jobs in (without: all), in their turn.
        quiet = timedelta(seconds=settings.tick_seconds)
        in_turn = store.reads_partitions_in_turn
        self._turns = (
            None if partitions is None else PartitionTurns(partitions, in_turn=in_turn, quiet=quiet)
        )
        self._store = store
        self._ledger = ledger
        # Under a backlog, each busy domain's head is read apart, for its share of the fetch;
        # a domain at its cap of runs in flight is not read.
        weights = DomainWeights(domains)
        self._lanes = Lanes(weights)
        self._caps = DomainCaps(weights, partitions)
        # Each concurrency key's runs within its limit, admitted by the key's partition owner.
        self._keys = KeyLimits(store)
        self._partitions = partitions
        # Each handler's concurrency limit, as the handler declares it or the settings override.
        self._limits = HandlerLimits(settings, registry)
        # What the workers hold: each worker's run, and the queue before them.
        self._capacity = settings.workers + settings.effective_queue_size
        self._backlogged = False  # the last fetch was full: more was due than it took
        # More was due now than the pool had room for: fetch only what is due until caught up.
        self._behind = False
        # Jobs whose runs this instance gave back after a crash (reaped): fetched before anything
        # else due, for they have waited longest.
        self._given_back: set[str] = set()
        self._requests_read_at: datetime | None = None  # when a read last found none
        # Where the store claims jobs as it reads them, the leases it gives: as Claimer's.
        self._lease = LeaseTerms(
            owner=settings.instance_id, margin_seconds=settings.lease_margin_seconds
        )

    def give_back(self, job_ids: list[str]) -> None:
        self._given_back.update(job_ids)

    async def fetch(self, now: datetime, *, armed_due: bool) -> Fetched | None:
        """The runs to claim now; None when there is no room for any. `armed_due`: armed runs
        are due to be recorded and wait for room on the workers (they go first)."""
        start_room = self.start_room()
        limit = min(self._settings.batch_size, self.room(armed_due=armed_due))
        if limit == 0:
            return None
        looking_ahead = not self._behind
        fetched, full = await self._due(now, limit, looking_ahead=looking_ahead)
        if not looking_ahead:
            self._behind = False  # caught up once a fetch of what is due has room to spare
        runs = self._within_start_room(one_per_job(fetched), now, start_room, full=full)
        runs = self._limits.within(runs, self._ledger.busy())
        runs = self._caps.within(runs, self._ledger.busy_domains())
        runs = await self._keys.within(runs)
        self._backlogged = full
        taken = {id(run) for run in runs}
        left = [run for run in fetched if run.claimed and id(run) not in taken]
        return Fetched(read=len(fetched), runs=runs, full=full, left=left)

    def _starved_before(self, now: datetime) -> datetime | None:
        """Only under a backlog (the last fetch was full) can a job starve: then the jobs due
        for longer than the bound go first. Otherwise everything due is taken anyway."""
        if not self._backlogged:
            return None
        return now - timedelta(seconds=self._settings.starvation_bound_seconds)

    def start_room(self) -> int:
        """Room on the workers, less what is armed or recorded ahead: they join the queue at
        their time."""
        return max(0, self._capacity - self._ledger.waiting_for_workers())

    def room(self, *, armed_due: bool) -> int:
        """What fetches may take: room in the pool for runs due now, and while nothing due
        now waits for that room, room among the timers for runs falling due later. Runs armed
        ahead need no worker until they fire, so a second's worth of jobs due at the same
        instant is claimed before that instant, not in batches of the pool's room after it
        (1,000 jobs every second: the last started hundreds of milliseconds late)."""
        arm_room = 0
        # Armed runs due to be recorded and waiting for room in the pool go first, before
        # claims ahead, which on a slow store take the dispatcher seconds (the workers would
        # idle).
        if not self._behind and not armed_due:
            arm_room = max(0, self._settings.lookahead_limit - self._ledger.armed_count())
        return self.start_room() + arm_room

    def _within_start_room(
        self, runs: list[DueRun], now: datetime, room: int, *, full: bool
    ) -> list[DueRun]:
        """The runs due now that the pool has room for, and every run falling due later (the
        fetch's limit bounds those). Runs due now beyond the room are left unclaimed: the
        dispatcher is behind, and fetches only what is due until it has caught up. It is behind
        too when a full fetch's runs due now took all the room: more are likely due."""
        kept: list[DueRun] = []
        due_now = 0
        for run in runs:
            if run.starts_at(now) > now:
                kept.append(run)
            elif due_now < room:
                kept.append(run)
                due_now += 1
            else:
                self._behind = True
        if full and due_now and due_now == room:
            self._behind = True
        return kept

    async def _due(
        self, now: datetime, limit: int, *, looking_ahead: bool
    ) -> tuple[list[DueRun], bool]:
        """Run requests (trigger, retry, backfill) first: someone asked for them explicitly.
        Then the jobs falling due before the lookahead horizon (or due now, when behind), most
        urgent first; under a backlog, each busy domain's for its share. Also whether more may
        be due than was read."""
        await self._lanes.weights.refresh_if_due(now)
        skip = Skipped(
            handlers=self._limits.saturated(self._ledger.busy()),
            keys=await self._keys.still_full(),
            domains=self._caps.capped(self._ledger.busy_domains()),
        )
        runs = await self._requested(now, limit, skip)
        if len(runs) == limit:
            return runs, True
        ahead = self._settings.lookahead_seconds if looking_ahead else 0.0
        horizon = now + timedelta(seconds=ahead)
        room = limit - len(runs)
        first = sorted(self._given_back)[:room]
        # With requests in hand the jobs are only read: a job claimed here would fail its
        # request's claim.
        claim = not runs
        if self._backlogged and not first:
            jobs, full = await self._due_in_lanes(now, horizon, room, skip, claim)
        else:
            everyone = LaneRead(None, room, None, skip.domains)
            started = self._clock.monotonic()
            jobs = await self._due_jobs(now, horizon, skip, first, everyone, claim=claim)
            seconds = self._clock.monotonic() - started
            full = len(jobs) == room
            self._lanes.read_all([run.job for run in jobs], now, seconds=seconds)
        if not full:
            self._lanes.clear()
        # Those due are fetched (the fetch has room for every one asked); the others are not
        # due any more (run elsewhere, paused, deleted): either way, done with.
        self._given_back.difference_update(first)
        return runs + jobs, full

    async def _due_in_lanes(
        self,
        now: datetime,
        horizon: datetime,
        limit: int,
        skip: Skipped,
        claim: bool,
    ) -> tuple[list[DueRun], bool]:
        """The busy domains' heads, each read apart for its share of `limit` (all in one round
        trip where the store claims them at once); more may be due when any read found all it
        asked for."""
        reads = self._lanes.reads(limit, now, capped=skip.domains)
        taken = await self._claimed_in_lanes(now, horizon, skip, reads) if claim else None
        if taken is None:
            taken = []
            for read in reads:
                started = self._clock.monotonic()
                runs = await self._due_jobs(now, horizon, skip, [], read, claim=claim)
                seconds = self._clock.monotonic() - started
                self._lanes.took(read, [run.job for run in runs], now, seconds=seconds)
                taken.append((read, runs))
        by_job = {run.job.id: run for _, runs in taken for run in runs}
        merged = self._lanes.merged([(read, [run.job for run in runs]) for read, runs in taken])
        full = any(len(runs) == read.limit for read, runs in taken)
        return [by_job[job.id] for job in merged], full

    async def _claimed_in_lanes(
        self, now: datetime, horizon: datetime, skip: Skipped, reads: list[LaneRead]
    ) -> list[tuple[LaneRead, list[DueRun]]] | None:
        """Every lane read and claimed in one round trip, where the store can (None where it
        cannot, or where there is one lane: its own claim is the simpler statement); each lane
        is taken to have spent the round trip's time."""
        if len(reads) < 2:
            return None
        lanes = [(read.limit, self._where(now, skip, [], read)) for read in reads]
        started = self._clock.monotonic()
        claimed = await self._store.claim_due_lanes(now, horizon, lanes, lease=self._lease)
        if claimed is None:
            return None
        seconds = self._clock.monotonic() - started
        for read, jobs in zip(reads, claimed, strict=True):
            self._lanes.took(read, jobs, now, seconds=seconds)
        return [
            (read, [DueRun(job, claimed=True) for job in jobs])
            for read, jobs in zip(reads, claimed, strict=True)
        ]

    async def _requested(self, now: datetime, limit: int, skip: Skipped) -> list[DueRun]:
        """The run requests due, read at each fetch but under a backlog: then every
        REQUESTS_EVERY, or at once while the last read found some. A keyed job's only in the
        partitions this instance holds: its key's owner admits them."""
        last = self._requests_read_at
        if self._backlogged and last is not None and last <= now < last + REQUESTS_EVERY:
            return []
        requested = await self._store.due_run_requests(
            now,
            limit,
            exclude_handlers=skip.handlers,
            exclude_domains=skip.domains,
            exclude_keys=skip.keys,
            partitions=self._partitions.readable() if self._partitions else None,
            instance=self._settings.instance_id,
        )
        self._requests_read_at = None if requested else now
        return [DueRun(job, request) for request, job in requested]

    async def _due_jobs(
        self,
        now: datetime,
        horizon: datetime,
        skip: Skipped,
        first: list[str],
        read: LaneRead,
        *,
        claim: bool,
    ) -> list[DueRun]:
        """Up to `read.limit` jobs due by `horizon` in `read`'s domains, claimed as they are read
        where the store can."""
        store, limit, turns, lane = self._store, read.limit, self._turns, read.domain
        where = self._where(now, skip, first, read)
        if claim:
            claimed = await store.claim_due_jobs(
                now, horizon, limit, lease=self._lease, where=where
            )
            if claimed is not None:
                return [DueRun(job, claimed=True) for job in claimed]
        jobs = await store.due_jobs(horizon, limit, where)
        # A lane's read tells which partitions it passed hold no more of its domain's jobs; a
        # read of every domain but the capped ones tells nothing of theirs.
        whole_lane = lane is not None or not read.exclude_domains
        if turns and where.in_turn and len(jobs) == limit and whole_lane:
            turns.read(where.partitions, jobs, now, lane=lane)
        return [DueRun(job) for job in jobs]

    def _where(self, now: datetime, skip: Skipped, first: list[str], read: LaneRead) -> DueFilter:
        """The filter of `read`: its partitions in the order to read them (None: all)."""
        turns, backlogged, lane = self._turns, self._backlogged, read.domain
        order = turns.order(now, backlogged=backlogged, lane=lane) if turns else None
        in_turn = turns is not None and turns.in_turn(backlogged=backlogged) and not read.probe
        return DueFilter(
            exclude_handlers=skip.handlers,
            exclude_keys=skip.keys,
            starved_before=self._starved_before(now),
            first=first,
            partitions=order,
            in_turn=in_turn,
            domains=read.domains,
            exclude_domains=read.exclude_domains,
        )


class HandlerLimits:
    """Each handler's concurrency limit: at most that many of its runs armed, recorded, queued
    or running at once (the ledger counts them), as the handler declares it (`max_concurrency`)
    or the settings override it."""

    def __init__(self, settings: Settings, registry: HandlerRegistry) -> None:
        self.settings = settings
        self.registry = registry

    def limit(self, handler: str) -> int | None:
        if handler in self.settings.handler_concurrency:
            return self.settings.handler_concurrency[handler]
        registered = self.registry.get(handler)
        return registered.handler.max_concurrency if registered else None

    def saturated(self, busy: Counter[str]) -> list[str]:
        """The handlers with no room left, given how many runs of each are `busy`."""
        return [
            handler
            for handler in busy
            if (limit := self.limit(handler)) is not None and busy[handler] >= limit
        ]

    def within(self, runs: Sequence[DueRun], busy: Counter[str]) -> list[DueRun]:
        """The runs their handlers have room for. A sharded run counts as many runs as it has
        shards; one wider than the limit itself (the limit lowered since the job was checked)
        goes when the handler is idle."""
        taken: Counter[str] = Counter()
        kept = []
        for run in runs:
            handler = run.job.handler
            limit = self.limit(handler)
            now_busy = busy[handler] + taken[handler]
            wider = limit is not None and run.width > limit
            if limit is None or now_busy + run.width <= limit or (wider and now_busy == 0):
                taken[handler] += run.width
                kept.append(run)
        return kept
