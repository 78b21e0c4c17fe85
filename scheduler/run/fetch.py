"""What the dispatcher fetches, and how much: run requests first, then the jobs falling due
before the lookahead horizon, most urgent first, as many as the pool and the timers have room
for. Behind the clock (more due now than the pool could take), it fetches only what is due
until it has caught up; under a backlog, the jobs waiting longest go first."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.ports.store_engine import DispatchStore
from tickd.scheduler.run.arm import Firing
from tickd.scheduler.run.due import DueRun, one_per_job
from tickd.scheduler.run.handler_limits import HandlerLimits
from tickd.scheduler.run.pool import WorkerPool


@dataclass(frozen=True, slots=True)
class Fetched:
    read: int  # due jobs and requests read
    runs: list[DueRun]  # of those, the runs to claim
    full: bool  # the fetch hit its limit: more may be due


class Fetcher:
    def __init__(
        self,
        *,
        settings: Settings,
        store: DispatchStore,
        pool: WorkerPool,
        firing: Firing,
        limits: HandlerLimits,
    ) -> None:
        self._settings = settings
        self._store = store
        self._pool = pool
        self._firing = firing
        self._limits = limits
        self._backlogged = False  # the last fetch was full: more was due than it took
        # More was due now than the pool had room for: fetch only what is due until caught up.
        self._behind = False
        # Jobs whose runs this instance gave back after a crash (reaped): fetched before anything
        # else due, for they have waited longest.
        self._given_back: set[str] = set()

    def give_back(self, job_ids: list[str]) -> None:
        self._given_back.update(job_ids)

    def busy(self) -> Counter[str]:
        """Runs of each handler queued, running, staged or armed."""
        return self._pool.inflight + self._firing.by_handler()

    async def fetch(self, now: datetime) -> Fetched | None:
        """The runs to claim now; None when there is no room for any."""
        start_room = self.start_room()
        limit = min(self._settings.batch_size, self.room())
        if limit == 0:
            return None
        looking_ahead = not self._behind
        fetched = await self._due(now, limit, looking_ahead=looking_ahead)
        full = len(fetched) == limit
        if not looking_ahead:
            self._behind = False  # caught up once a fetch of what is due has room to spare
        runs = self._within_start_room(one_per_job(fetched), now, start_room, full=full)
        self._backlogged = full
        return Fetched(read=len(fetched), runs=runs, full=full)

    def _starved_before(self, now: datetime) -> datetime | None:
        """Only under a backlog (the last fetch was full) can a job starve: then the jobs due
        for longer than the bound go first. Otherwise everything due is taken anyway."""
        if not self._backlogged:
            return None
        return now - timedelta(seconds=self._settings.starvation_bound_seconds)

    def start_room(self) -> int:
        """Room in the pool, less what is armed or staged: they join the queue at their time."""
        return max(0, self._pool.free_slots() - self._firing.held())

    def room(self) -> int:
        """What fetches may take: room in the pool for runs due now, and while nothing due
        now waits for that room, room among the timers for runs falling due later. Runs armed
        ahead need no worker until they fire, so a second's worth of jobs due at the same
        instant is claimed before that instant, not in batches of the pool's room after it
        (1,000 jobs every second: the last started hundreds of milliseconds late)."""
        arm_room = 0
        # Armed runs due to be recorded and waiting for room in the pool go first, before
        # claims ahead, which on a slow store take the dispatcher seconds (the workers would
        # idle).
        if not self._behind and not self._firing.armed_due():
            arm_room = max(0, self._settings.lookahead_limit - len(self._firing.timers))
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

    async def _due(self, now: datetime, limit: int, *, looking_ahead: bool) -> list[DueRun]:
        """Run requests (trigger, retry, backfill) first: someone asked for them explicitly.
        Then the jobs falling due before the lookahead horizon (or due now, when behind), most
        urgent first."""
        store = self._store
        saturated = self._limits.saturated(self.busy())
        requested = await store.due_run_requests(
            now, limit, exclude_handlers=saturated, instance=self._settings.instance_id
        )
        runs = [DueRun(job, request) for request, job in requested]
        if len(runs) < limit:
            ahead = self._settings.lookahead_seconds if looking_ahead else 0.0
            horizon = now + timedelta(seconds=ahead)
            room = limit - len(runs)
            first = sorted(self._given_back)[:room]
            jobs = await store.due_jobs(
                horizon,
                room,
                exclude_handlers=saturated,
                starved_before=self._starved_before(now),
                first=first,
            )
            # Those due are fetched (the fetch has room for every one asked); the others are not
            # due any more (run elsewhere, paused, deleted): either way, done with.
            self._given_back.difference_update(first)
            runs += [DueRun(job) for job in jobs]
        return runs
