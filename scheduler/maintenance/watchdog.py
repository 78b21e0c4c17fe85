"""The loop-stall watchdog: a handler that blocks the event loop inside an `async def` (a
`time.sleep`, a CPU-bound loop, a blocking client) stops every run, timer and heartbeat of the
process while it does. Nothing else can see it, since nothing else runs: so a small task asks to
be woken every WATCH_EVERY_SECONDS and measures how late it is. A wake-up later than the
threshold is a stall: counted (`tickd_loop_stalls_total`, `tickd_loop_stall_seconds`) and logged
with the jobs that were running, the blocking one among them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection

from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics

log = logging.getLogger("tickd.watchdog")

WATCH_EVERY_SECONDS = 0.1
# A log line names this many jobs at most (a stall with a thousand runs in flight).
MAX_NAMED_JOBS = 20


class LoopWatchdog:
    def __init__(
        self,
        *,
        threshold_seconds: float,
        metrics: Metrics,
        running_jobs: Callable[[], Collection[str]],
        every_seconds: float = WATCH_EVERY_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold_seconds = threshold_seconds
        self.every_seconds = every_seconds
        self._metrics = metrics
        self._running_jobs = running_jobs
        # Real time, never the clock port: a fake clock cannot be late, only a blocked loop is.
        self._monotonic = monotonic
        self.noticed = asyncio.Event()  # set at each stall (tests wait on it, bounded)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            # Jobs running as it falls asleep: the one that blocks may have ended by the wake-up.
            before = set(self._running_jobs())
            expected_at = self._monotonic() + self.every_seconds
            await asyncio.sleep(self.every_seconds)
            self.woke(expected_at, self._monotonic(), before)

    def woke(self, expected_at: float, woke_at: float, running_before: Collection[str]) -> bool:
        """Whether the wake-up at `woke_at`, asked for `expected_at`, was a stall."""
        late = woke_at - expected_at
        if late < self.threshold_seconds:
            return False
        self._metrics.loop_stalls.inc()
        self._metrics.loop_stall_seconds.observe(late)
        jobs = sorted({*running_before, *self._running_jobs()})
        log_event(
            log,
            "loop.stalled",
            level=logging.ERROR,
            stalled_seconds=round(late, 3),
            threshold_seconds=self.threshold_seconds,
            running_jobs=jobs[:MAX_NAMED_JOBS],
            more_jobs=max(0, len(jobs) - MAX_NAMED_JOBS),
            hint="a handler blocks the event loop: make it sync (it runs in a thread) or await",
        )
        self.noticed.set()
        return True
