"""The worker pool: a fixed number of workers fed by a bounded queue, which blocks when full
(backpressure: the dispatcher falls behind the clock instead of piling up work)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
from collections import deque

from tickd.scheduler.metrics import Metrics
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.run.execute import Executor
from tickd.scheduler.run.ledger import Ledger, Task

log = logging.getLogger("tickd.engine")

# The pool's pace is worked out from the times of its last runs, this many a worker.
RUNS_TIMED = 4


class WorkerPool:
    """A fixed number of workers fed by a bounded queue."""

    def __init__(
        self,
        *,
        executor: Executor,
        ledger: Ledger,
        workers: int,
        queue_size: int,
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        self._executor = executor
        self._ledger = ledger
        self._metrics = metrics
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
        # How long the last runs kept their workers. A pool kept busy starts about
        # workers / run time runs a second (Little's law), however its starts bunch: runs that
        # end together free their workers together, and the gaps between the starts that follow
        # say nothing of the pace. The median, not the mean: the last runs of a wave wait for
        # their ends to be written, and that wait ends with the write.
        self._run_seconds: deque[float] = deque(maxlen=RUNS_TIMED * workers)
        self._clock = clock

    def start(self) -> None:
        # Read when scraped: setting it as each run starts and ends took a lock twice a run.
        self._metrics.busy_workers.set_function(lambda: self.busy)
        self._workers = [
            asyncio.create_task(self._work(), name=f"worker-{i}") for i in range(self._size)
        ]

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
        workers will start within a moment (Arming.room)."""
        self._admit(task)
        self._queue.put_nowait(task)

    def _admit(self, task: Task) -> None:
        self._ledger.queued(task)

    async def join(self) -> None:
        """Until every task submitted has run (its end handed to the writer)."""
        await self._queue.join()

    def take_queued(self) -> list[Task]:
        """Empty the queue of tasks no worker has started (for shutdown)."""
        tasks = []
        while not self._queue.empty():
            tasks.append(self._queue.get_nowait())
            self._space.set()
            self._ledger.unqueued(tasks[-1])
            self._queue.task_done()
            self._done()
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
            self._ledger.started(task)
            self.busy += 1
            began = self._clock.monotonic()
            try:
                await self._executor.run(task)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours must not take a worker down with it
                log.exception("worker.task_crashed")
            else:
                self._run_seconds.append(self._clock.monotonic() - began)
            finally:
                self._ledger.worker_done(task)
                self.busy -= 1
                self._queue.task_done()
                self._done()

    def starts_within(self, seconds: float) -> int:
        """About how many waiting runs the workers will have started `seconds` from now, at
        the pace they keep while busy; none until a run has ended."""
        if not self._run_seconds:
            return 0
        return int(seconds * self._size / max(statistics.median(self._run_seconds), 1e-6))

    def _done(self) -> None:
        self.slot_freed.set()
        if self.free_slots() >= self.worthwhile_batch:
            self.room_freed.set()
