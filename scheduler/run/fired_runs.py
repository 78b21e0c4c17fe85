"""The runs fired at their time that no worker has started yet, counted in one place.

Jobs due at one instant are fired together, and their starts are what the user waits for. Three
parts make way for them: the firing stage (scheduler/run/arm.py) counts the runs it releases from
the moment it decides to, the pool counts them from their queueing until a worker takes them,
and the finisher (scheduler/run/write.py) writes no batch of ends while any waits, for a moment
at most. They share this count rather than ask one another.
"""

from __future__ import annotations

import asyncio


class FiredRuns:
    def __init__(self) -> None:
        self._coming = 0  # released by the firing stage, not queued yet
        self._queued = 0  # queued for a worker, not started yet
        self.queued_started = asyncio.Event()  # no fired run waits in the queue
        self.queued_started.set()
        self._drained = asyncio.Event()  # the queue's fired runs all started, lately

    def waiting(self) -> int:
        """Fired runs not started: coming to the queue, or in it."""
        return self._coming + self._queued

    def in_queue(self) -> int:
        return self._queued

    def coming(self, count: int) -> None:
        """`count` runs are released, to be queued once recorded."""
        self._coming += count

    def none_coming(self) -> None:
        """The released runs not queued went back to wait (not recorded, say)."""
        self._coming = 0

    def queued(self) -> None:
        self._coming = max(0, self._coming - 1)
        self._queued += 1
        self.queued_started.clear()

    def started(self) -> None:
        """A worker took a fired run from the queue."""
        self._queued -= 1
        if not self._queued:
            self.queued_started.set()
            self._drained.set()

    async def next_drained(self) -> None:
        """Until the fired runs queued next have all started (those coming are queued first)."""
        self._drained.clear()
        await self._drained.wait()
