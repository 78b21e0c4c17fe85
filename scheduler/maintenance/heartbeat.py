"""Instances say they are alive every few seconds; the leases of one that has gone quiet are
ended at once, so its runs are given back within seconds of a crash instead of when their
timeouts would have run out (a minute for a job of 30 seconds, a day for a long one).

Quiet is observed, never computed from the beats' times: each instance's beat is written by its
own wall clock, which may be ahead or behind this one's by any amount (skewed, or stepped by
NTP or a restored VM). So each instance watches the others' beats and notes, on its own
monotonic clock, when it last saw each change; one whose beat has not changed for a whole lapse
of that time is dead, whatever the clocks say.

After each beat the instance keeps its share of the due queue's partitions (partitions.py) from
the instances alive then; each beat also says how the instance is (version, start, runs in
flight), for ops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.lock import lock_key, shard_lock_key
from tickd.scheduler.logs import log_event
from tickd.scheduler.maintenance.partitions import PartitionKeeper
from tickd.scheduler.metrics import Metrics, tickd_version
from tickd.scheduler.ports.backends import (
    InstanceStatus,
    Lock,
    LockUnavailable,
    Ports,
    StoreError,
)
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import InstanceStore
from tickd.scheduler.run.ledger import Ledger

log = logging.getLogger("tickd.engine")


def instance_heartbeat(
    settings: Settings, ports: Ports, lock: Lock, metrics: Metrics, ledger: Ledger, /
) -> Heartbeat:
    """The heartbeat of the instance `settings` describe, keeping its share of the partitions.
    It holds them for half the heartbeat timeout after its last beat: the others take them
    only a whole timeout after it."""
    lapse, store, clock = settings.heartbeat_timeout_seconds, ports.store, ports.clock
    partitions = PartitionKeeper(
        store, clock, settings.instance_id, hold_seconds=lapse / 2, metrics=metrics
    )
    return Heartbeat(
        store,
        clock,
        settings.instance_id,
        lock=lock,
        every_seconds=settings.heartbeat_seconds,
        lapse_seconds=lapse,
        partitions=partitions,
        ledger=ledger,
    )


class Heartbeat:
    def __init__(
        self,
        store: InstanceStore,
        clock: Clock,
        instance: str,
        *,
        lock: Lock,
        every_seconds: float,
        lapse_seconds: float,
        partitions: PartitionKeeper,
        ledger: Ledger | None = None,
    ) -> None:
        self._store = store
        # Each beat says how this instance is: its version, its start, its runs in flight.
        self._ledger = ledger
        self._started_at = clock.now()
        self.partitions = partitions  # kept after each beat
        self._live: set[str] = {instance}  # the instances alive at the last beat
        self._lock = lock
        self._clock = clock
        self._instance = instance
        self._every = every_seconds
        self._lapse = lapse_seconds
        # Monotonic times from here on: a step of the wall clock must neither stop the beats
        # nor hurry the judgement of others.
        self._last: float | None = None
        # Since when this instance has beaten without a gap. Others are judged only once it has
        # for a whole lapse: after a store outage no instance's beat has changed for a while,
        # and the first back must not take the others, alive all along, for dead.
        self._beating_since: float | None = None
        # Each other instance's beat as last read, and when it was first read so.
        self._seen: dict[str, tuple[datetime, float]] = {}
        # Set when another instance's leases were ended: the dispatcher reaps its runs at once
        # and takes them over (whoever acts on it clears it).
        self.lapsed = asyncio.Event()

    async def run(self, stop: asyncio.Event, *, pause_seconds: float) -> None:
        """Beat until `stop` is set, as a task of its own: a dispatcher that waits (for room in
        a full pool, for a slow store) must not look dead to the other instances while its runs
        go on. An outage is logged once; the dispatcher reports the store's state. Then leave:
        `stop` is set once the last run has ended."""
        failing = False
        while not stop.is_set():
            try:
                if await self.beat_if_due():
                    self.lapsed.set()
                failing = False
            except (StoreError, LockUnavailable, OSError) as exc:
                if not failing:
                    log_event(log, "heartbeat.failed", level=logging.WARNING, error=str(exc))
                failing = True
            except Exception:  # a bug of ours must not stop the beats for good
                log.exception("heartbeat.unexpected_error")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause_seconds)
        with contextlib.suppress(StoreError, OSError):  # else the others wait for its lapse
            await self.leave()

    async def beat_if_due(self) -> int:
        """Beat, and end the leases of the instances that lapsed, every few seconds: returns
        how many leases ended (the next reap gives their runs back). Between beats, while
        partitions it should hold are still another's, it tries to take them again at each
        call: their holder frees them at its own beat, and they are taken within a pause of
        that, not a whole beat later. It beats early, too, once another instance has been
        silent for a lapse: the dead are judged, and their partitions taken, within a pause of
        their lapse, not up to a beat after it."""
        real = self._clock.monotonic()
        if self._last is not None and real - self._last < self._every:
            if self._dead_by(real):
                return await self.beat(self._clock.now())
            if self.partitions.waiting():
                await self.partitions.keep(self._live)
            return 0
        return await self.beat(self._clock.now())

    async def beat(self, now: datetime) -> int:
        real = self._clock.monotonic()
        try:
            beats = await self._store.beat(self._instance, now, self._status())
        except StoreError:
            self._beating_since = None
            raise
        if self._beating_since is None or self._last is None or real - self._last > self._lapse:
            self._beating_since = real
        self._last = real
        self._watch(beats, real)
        ended = 0 if real - self._beating_since < self._lapse else await self._end_dead(real)
        # The living: those read, less those just forgotten.
        self._live = beats.keys() & {*self._seen, self._instance}
        await self.partitions.keep(self._live)
        return ended

    def _status(self) -> InstanceStatus | None:
        if self._ledger is None:
            return None
        in_flight = len(self._ledger.own_runs())
        return InstanceStatus(tickd_version(), self._started_at, in_flight)

    async def leave(self) -> None:
        """A graceful stop, once the last run has ended and the beats stopped: the partitions
        held are freed and this instance's record deleted, so that the others take its share
        at their next beat, not a heartbeat timeout later."""
        await self.partitions.leave()
        beats = await self._store.instances()
        if self._instance in beats:
            await self._store.forget_instances({self._instance: beats[self._instance]})

    async def _end_dead(self, real: float) -> int:
        """End the leases of the instances dead for a whole lapse, break their locks and forget
        them; returns how many leases ended."""
        dead = self._dead(real)
        if not dead:
            return 0
        ended = await self._store.end_leases(dead)
        # The dead instance's locks on those jobs would outlive it by the runs' whole timeout
        # (a lock lives through the run's timeout), and no one else could run them meanwhile.
        await self._lock.break_many(
            [lock_key(job) if shard is None else shard_lock_key(job, shard) for job, shard in ended]
        )
        # Their records go, or every beat of every instance would read and judge every
        # instance that ever ran (each restart is a new one) for as long as the store lives.
        await self._store.forget_instances({instance: self._seen[instance][0] for instance in dead})
        for instance in dead:
            del self._seen[instance]
        return len(ended)

    def _watch(self, beats: dict[str, datetime], real: float) -> None:
        """Note when each other instance's beat changed; one seen for the first time counts as
        changed now, so a new observer watches a whole lapse before judging anyone. One no
        longer there was forgotten (another instance found it dead and ended its leases)."""
        for instance in self._seen.keys() - beats.keys():
            del self._seen[instance]
        for instance, beat in beats.items():
            seen = self._seen.get(instance)
            if instance != self._instance and (seen is None or seen[0] != beat):
                self._seen[instance] = (beat, real)

    def _dead_by(self, real: float) -> bool:
        """Whether this instance may judge now, and some other's beat, as last read, has not
        changed for a lapse: a live one's changes at every beat of ours, so only the silent
        cost an early beat."""
        judging = self._beating_since is not None and real - self._beating_since >= self._lapse
        return judging and bool(self._dead(real))

    def _dead(self, real: float) -> list[str]:
        """The instances whose beat has not changed for a lapse of our monotonic time `real`."""
        return sorted(
            instance
            for instance, (_, changed) in self._seen.items()
            if real - changed >= self._lapse
        )
