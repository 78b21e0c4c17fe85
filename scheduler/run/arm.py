"""The arming stage: runs claimed ahead of their time wait here, in memory, and start at it.

A run claimed before its time is armed. RECORDED_AHEAD_SECONDS before that time it is fired:
recorded `running`, with the others firing then, in one insert, and staged. At its time it is
released to the workers. A thousand runs due at one instant thus cost that instant their starts
only, not their insert. Fired runs go to the workers beyond the pool's queue bound, since only
as many are fired as the workers will soon start (`room`). The timers fire each run at its
exact time without polling faster (seeds 000 and 001 do the same); the lease taken at the claim
covers the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.run.ledger import RECORDED_AHEAD_SECONDS, DueRun, Ledger, Task
from tickd.scheduler.run.pool import WorkerPool
from tickd.scheduler.run.record import Recorder

# Runs fired at one instant are recorded this many batches to an insert (the first batch
# alone, so that it starts at once): few hand-overs to the store's thread, none too long.
FIRED_BATCHES_AN_INSERT = 10

Held = tuple[DueRun, str]  # a claimed run and the token of its locks


@dataclass(frozen=True, slots=True)
class Fired:
    released: int  # runs released to the workers at their time
    sharded: int  # occurrences handed to their shards, which are due at once


class Arming:
    def __init__(
        self,
        *,
        settings: Settings,
        clock: Clock,
        ledger: Ledger,
        recorder: Recorder,
        pool: WorkerPool,
        metrics: Metrics,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._ledger = ledger
        self._recorder = recorder
        self._pool = pool
        self._metrics = metrics
        self.timers: Timers[Held] = Timers()  # claimed runs waiting to be recorded
        self.staged: Timers[Task] = Timers()  # recorded runs waiting for their time
        self._sharded = 0  # occurrences handed to their shards by the fire under way

    def arm(self, run: DueRun, token: str, now: datetime) -> None:
        self.timers.arm(run.records_at(now), (run, token))
        self._ledger.armed(run)

    def armed_due(self) -> bool:
        """Armed runs are due to be recorded and wait for room in the pool."""
        next_at = self.timers.next_at()
        return next_at is not None and next_at <= self._clock.now()

    def room(self) -> int:
        """How many armed runs may be fired: what the pool has room for, and what its workers
        will have started within RECORDED_AHEAD_SECONDS at the pace they keep, less what is
        staged already. A fired run is recorded `running`; one that waited seconds for a worker
        would say so for seconds, and a crash would find it in flight. The others stay armed,
        due, and fire as room frees."""
        pool = self._pool
        return max(
            0, pool.free_slots() + pool.starts_within(RECORDED_AHEAD_SECONDS) - len(self.staged)
        )

    def until_next(self, now: datetime, *, worthwhile: int) -> float | None:
        """Seconds until the next staged run's time or the next armed run's recording, if any;
        an armed run already due counts only once there is room worth a batch (`worthwhile`),
        as room freed wakes the dispatcher then."""
        waits: list[float] = []
        staged_at = self.staged.next_at()
        if staged_at is not None:
            waits.append((staged_at - now).total_seconds())
        armed_at = self.timers.next_at()
        if armed_at is not None:
            wait = (armed_at - now).total_seconds()
            if wait > 0 or self.room() >= worthwhile:
                waits.append(wait)
        return min(waits, default=None)

    async def fire(self, now: datetime) -> Fired:
        """Record the armed runs whose time to be recorded has come, and release to the workers
        the runs whose time has come."""
        self._sharded = 0
        fired = self.timers.due(now, limit=self.room())
        try:
            released = await self._record_in_parts(fired, now) if fired else 0
            # Recording took time: what fell due meanwhile goes too.
            due = self.staged.due(self._clock.now())
            self._ledger.fired_coming(len(due))
            self._release(due)
            return Fired(released=released + len(due), sharded=self._sharded)
        finally:
            self._ledger.none_coming()  # the fired runs are queued, staged, or armed again

    async def let_fired_start(self) -> None:
        """The runs released at their time start before the dispatcher's next store calls (the
        reaper's, the claims ahead), each a transaction on the loop that they would wait
        behind; for RECORDED_AHEAD_SECONDS at most, so that handlers holding every worker do
        not hold up the claims."""
        if self._ledger.fired_in_queue():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ledger.fired_started.wait(), RECORDED_AHEAD_SECONDS)

    def take_armed(self) -> list[Held]:
        """Every armed run, for giving back (a shutdown, a clock stepped back): let go."""
        held = self.timers.take_all()
        for run, _ in held:
            self._ledger.let_go(run)
        return held

    def take_staged(self) -> list[Task]:
        """Every recorded run waiting for its time (a shutdown): ended as abandoned next."""
        return self.staged.take_all()

    async def _record_in_parts(self, fired: list[Held], now: datetime) -> int:
        """Stage the runs, releasing those already due (fired late, for want of room) as each
        part is recorded: the first batch alone, then ten batches to an insert, so that five
        thousand do not all wait for one large insert. Each part's released runs start before
        the next part's records are made (on the loop's thread, on SQLite). Returns how many
        were released."""
        # Those due now wait for their starts from now on, and ends wait for them.
        self._ledger.fired_coming(sum(1 for run, _ in fired if run.starts_at(now) <= now))
        released = 0
        size = self._settings.batch_size
        starts = [0, *range(size, len(fired), FIRED_BATCHES_AN_INSERT * size)]
        ends = [*starts[1:], len(fired)]
        for begin, end in zip(starts, ends, strict=True):
            tasks = await self._record(fired[begin:end], now, fired[begin:])
            self._metrics.batch_size.observe(len(tasks))
            for task in tasks:
                self.staged.arm(task.execution.started_at or now, task)
                self._ledger.recorded(task.run)
            due = self.staged.due(now)
            released += len(due)
            self._release(due)
            if due and end < len(fired):
                await self.let_fired_start()
        return released

    async def _record(self, held: list[Held], now: datetime, unrecorded: list[Held]) -> list[Task]:
        """Not recorded, so not started: the runs from this batch on are armed again, to fire
        once the store answers."""
        if not held:
            return []
        try:
            recorded = await self._recorder.record(held, now, fired=True)
        except StoreError:
            for run, token in unrecorded:
                self.arm(run, token, now)
            raise
        self._sharded += recorded.sharded
        return recorded.tasks

    def _release(self, tasks: list[Task]) -> None:
        for task in tasks:
            self._pool.submit_fired(task)


T = TypeVar("T")


class Timers(Generic[T]):
    """Items waiting for their time, earliest first."""

    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, T]] = []
        self._order = itertools.count()  # equal times fire in the order they were armed

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, at: datetime, item: T) -> None:
        heapq.heappush(self._heap, (at, next(self._order), item))

    def next_at(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def due(self, now: datetime, limit: int | None = None) -> list[T]:
        """Take every item whose time has come (at most `limit`), earliest first."""
        fired: list[T] = []
        while self._heap and self._heap[0][0] <= now and (limit is None or len(fired) < limit):
            fired.append(heapq.heappop(self._heap)[2])
        return fired

    def take_all(self) -> list[T]:
        items = [item for _, _, item in sorted(self._heap)]
        self._heap.clear()
        return items
