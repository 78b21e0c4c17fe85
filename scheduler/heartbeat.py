"""Instances say they are alive every few seconds; the leases of one that has gone quiet are
ended at once, so its runs are given back within seconds of a crash instead of when their
timeouts would have run out (a minute for a job of 30 seconds, a day for a long one)."""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler.clock import Clock
from scheduler.lock import lock_key, shard_lock_key
from scheduler.ports import Lock, Store, StoreError


class Heartbeat:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        instance: str,
        *,
        lock: Lock,
        every_seconds: float,
        lapse_seconds: float,
    ) -> None:
        self._store = store
        self._lock = lock
        self._clock = clock
        self._instance = instance
        self._every = timedelta(seconds=every_seconds)
        self._lapse = timedelta(seconds=lapse_seconds)
        self._last: datetime | None = None
        # Since when this instance has beaten without a gap. Others are judged only once it has
        # for a whole lapse: after a store outage every instance's last beat is old, and the
        # first back must not take the others, alive all along, for dead.
        self._beating_since: datetime | None = None

    async def beat_if_due(self) -> int:
        """Beat, and end the leases of the instances that lapsed, every few seconds: returns
        how many leases ended (the next reap gives their runs back)."""
        now = self._clock.now()
        if self._last is not None and now - self._last < self._every:
            return 0
        return await self.beat(now)

    async def beat(self, now: datetime) -> int:
        try:
            await self._store.beat(self._instance, now)
        except StoreError:
            self._beating_since = None
            raise
        if self._beating_since is None or self._last is None or now - self._last > self._lapse:
            self._beating_since = now
        self._last = now
        if now - self._beating_since < self._lapse:
            return 0
        ended = await self._store.expire_lapsed_leases(now - self._lapse, now, self._instance)
        # The dead instance's locks on those jobs would outlive it by the runs' whole timeout
        # (a lock lives through the run's timeout), and no one else could run them meanwhile.
        await self._lock.break_many(
            [lock_key(job) if shard is None else shard_lock_key(job, shard) for job, shard in ended]
        )
        return len(ended)
