"""The worker pool: a fixed number of workers fed by a bounded queue, which blocks when full
(backpressure: the dispatcher falls behind the clock instead of piling up work)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

from tickd.scheduler.metrics import Metrics
from tickd.scheduler.run.fired_runs import FiredRuns
from tickd.scheduler.run.runner import Runner, Task

log = logging.getLogger("tickd.engine")


class WorkerPool:
    """A fixed number of workers fed by a bounded queue."""

    def __init__(
        self,
        runner: Runner,
        *,
        workers: int,
        queue_size: int,
        metrics: Metrics,
        fired: FiredRuns | None = None,
    ) -> None:
        self._runner = runner
        self._metrics = metrics
        # Runs fired at their time that wait for a worker, counted with the firing stage.
        self.fired = fired or FiredRuns()
        # Bounded by submit(), not by the queue itself: runs fired at their time are queued
        # beyond the bound (the dispatcher recorded only what the workers will soon start), in
        # one go rather than one hand-over between the dispatcher and a worker each.
        self._queue: asyncio.Queue[Task] = asyncio.Queue()
        self._queue_size = queue_size
        self._space = asyncio.Event()  # a worker took a run from the queue
        self._size = workers
        self._workers: list[asyncio.Task[None]] = []
        self.busy = 0
        self.slot_freed = asyncio.Event()  # a task ended
        # Room for a batch worth its round trips: half of what the pool holds.
        self.worthwhile_batch = max(1, (workers + queue_size) // 2)
        self.room_freed = asyncio.Event()  # there is room for such a batch
        self.inflight: Counter[str] = Counter()  # by handler: queued or running
        self._running: dict[str, str] = {}  # execution id -> job name, for the watchdog
        # Jobs started since the watchdog last asked: a run may start, block the loop and end
        # between two of its wake-ups, and it must still be named.
        self._started_since_asked: set[str] = set()
        self._in_flight: dict[str, Task] = {}  # by execution id: queued or running
        # How fast the workers take runs while every one is busy and runs wait for them:
        # seconds between two starts, smoothed; None until measured. Only between two starts
        # that each found the other workers busy and left runs waiting: neither idle workers
        # taking a batch at once nor an idle spell is the pace the pool keeps.
        self.start_interval: float | None = None
        self._last_start: float | None = None  # when the last such start was

    def start(self) -> None:
        # Read when scraped: setting it as each run starts and ends took a lock twice a run.
        self._metrics.busy_workers.set_function(lambda: self.busy)
        self._workers = [
            asyncio.create_task(self._work(), name=f"worker-{i}") for i in range(self._size)
        ]

    def running_jobs(self) -> list[str]:
        """The names of the jobs whose runs the workers are on now, or started since the last
        call (the watchdog's, which is the only caller)."""
        started, self._started_since_asked = self._started_since_asked, set()
        return sorted(started.union(self._running.values()))

    def in_flight(self) -> list[Task]:
        """The tasks queued or running."""
        return list(self._in_flight.values())

    def free_slots(self) -> int:
        idle = self._size - self.busy
        return max(0, idle + self._queue_size - self._queue.qsize())

    async def submit(self, task: Task) -> None:
        """Queue a run; blocks while the queue is full."""
        self._admit(task)
        while self._queue.qsize() >= self._queue_size:
            self._space.clear()
            await self._space.wait()
        self._queue.put_nowait(task)

    def submit_fired(self, task: Task) -> None:
        """Queue a run fired at its time, at once: the dispatcher fired only as many as the
        workers will start within a moment (Firing.room)."""
        self._admit(task)
        self.fired.queued()
        self._queue.put_nowait(task)

    def _admit(self, task: Task) -> None:
        self.inflight[task.job.handler] += 1
        self._in_flight[task.execution.id] = task

    async def join(self) -> None:
        """Until every task submitted has run and its end is written."""
        await self._queue.join()
        await self._runner.settled()

    def take_queued(self) -> list[Task]:
        """Empty the queue of tasks no worker has started (for shutdown)."""
        tasks = []
        while not self._queue.empty():
            tasks.append(self._queue.get_nowait())
            self._space.set()
            self._dequeued(tasks[-1])
            self._queue.task_done()
            self._done(tasks[-1])
        return tasks

    async def stop(self, grace_seconds: float) -> None:
        """Let running tasks finish within the grace period, then cancel the rest."""
        running = [w for w in self._workers if not w.done()]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=grace_seconds)
        for worker in running:
            worker.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            task = await self._queue.get()
            self._space.set()
            self._dequeued(task)
            self._started()
            self.busy += 1
            self._running[task.execution.id] = task.job.name
            self._started_since_asked.add(task.job.name)
            try:
                await self._runner.run(task)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours must not take a worker down with it
                log.exception("worker.task_crashed")
            finally:
                del self._running[task.execution.id]
                self.busy -= 1
                self._queue.task_done()
                self._done(task)

    def starts_within(self, seconds: float) -> int:
        """About how many waiting runs the workers will have started `seconds` from now."""
        if self.start_interval is None:
            return 0
        return int(seconds / max(self.start_interval, 1e-6))

    def _started(self) -> None:
        """A worker took a run (before it counts as busy)."""
        if self.busy < self._size - 1 or self._queue.empty():
            self._last_start = None
            return
        now = time.monotonic()
        if self._last_start is not None:
            gap = now - self._last_start
            known = self.start_interval
            self.start_interval = gap if known is None else 0.8 * known + 0.2 * gap
        self._last_start = now

    def _dequeued(self, task: Task) -> None:
        if task.fired:
            self.fired.started()

    def _done(self, task: Task) -> None:
        self.inflight[task.job.handler] -= 1
        self._in_flight.pop(task.execution.id, None)
        self.slot_freed.set()
        if self.free_slots() >= self.worthwhile_batch:
            self.room_freed.set()
