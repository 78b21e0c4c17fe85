"""This instance's share of the due queue's partitions (scheduler/partitions.py), kept after
each heartbeat: from the live instances it computes the partitions it should own, frees those it
should not (it stops reading them first), and takes the others once their owner has let them go
or been forgotten as dead. The fetcher reads only the partitions held.

A partition is freed only between the dispatcher's fetches: one that read it may still claim
there, and its claims must be in the store before the next owner takes the partition and counts
the runs in flight of the keys that live in it (admission/key_limits.py). The dispatcher holds
`claiming` from a fetch's read to its claim; `keep` frees under it.

An instance that cannot beat must stop reading before anyone can take its partitions: the others
take them only once its heartbeat record is forgotten, a whole heartbeat timeout after its last
beat changed, so what it holds is read for half that timeout after its last successful keep, and
not after. Job leases and fencing tokens stay the safety net: an instance that read a partition
it lost can at worst claim a free job there, and never finish or advance a run it does not hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence

from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.partitions import owned_by
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import PartitionStore

log = logging.getLogger("tickd.engine")


class PartitionKeeper:
    def __init__(
        self,
        store: PartitionStore,
        clock: Clock,
        instance: str,
        *,
        hold_seconds: float,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._instance = instance
        self._hold = hold_seconds
        self._metrics = metrics
        # Partition -> its epoch when taken. None until the first keep: an instance that never
        # kept (a drain, a test) reads every partition.
        self._held: dict[int, int] | None = None
        self._kept_at: float | None = None  # monotonic time of the last successful keep
        self._waiting = False  # some partition it should hold is still another's
        # Held by the dispatcher from a fetch's read to its claim: partitions are freed outside.
        self.claiming = asyncio.Lock()

    @property
    def count(self) -> int:
        return self._store.partition_count

    def held(self) -> dict[int, int]:
        """The partitions held, with their epochs."""
        return dict(self._held or {})

    def waiting(self) -> bool:
        """Whether some partition it should hold was still another's at the last keep."""
        return self._waiting

    def readable(self) -> Sequence[int] | None:
        """The partitions to read due jobs in, None for all of them: all before the first keep
        and while every one is held; none once the last keep is older than the hold."""
        if self._held is None:
            return None
        assert self._kept_at is not None
        if self._clock.monotonic() - self._kept_at > self._hold:
            return ()
        if len(self._held) == self.count:
            return None
        return sorted(self._held)

    async def keep(self, live: Iterable[str]) -> None:
        """Free what this instance should no longer own, then take (or keep) what it should,
        given the instances alive (as the heartbeat last read them, just after a beat)."""
        started = self._clock.monotonic()
        wanted = owned_by(self._instance, self.count, live)
        if self._still_held(wanted, started):
            self._kept_at = started
            return
        held = self._held or {}
        freed = sorted(held.keys() - wanted)
        if freed:
            async with self.claiming:
                self._held = {part: epoch for part, epoch in held.items() if part in wanted}
                await self._store.release_partitions(self._instance, freed)
        taken = await self._store.take_partitions(self._instance, sorted(wanted))
        gained = sorted(taken.keys() - held.keys())
        lost = sorted(held.keys() - taken.keys() - set(freed))  # taken by another meanwhile
        self._held, self._kept_at = taken, started
        self._waiting = bool(wanted - taken.keys())
        if freed or gained or lost:
            log_event(
                log,
                "partitions.moved",
                held=len(taken),
                freed=len(freed),
                taken=len(gained),
                lost=len(lost),
                waiting_for=len(wanted - taken.keys()),
            )
        self._count(freed=len(freed) + len(lost), taken=len(gained))

    def _still_held(self, wanted: set[int], now: float) -> bool:
        """Whether the last keep holds all of `wanted` and is within the hold: then no one can
        have taken any since, and the store need not be asked. Others take a partition held
        only once its holder's record is forgotten, a whole heartbeat timeout after its beat
        last changed, and this instance beat then and again now, less than the hold apart."""
        if self._held is None or self._kept_at is None:
            return False
        return self._held.keys() == wanted and now - self._kept_at <= self._hold

    async def leave(self) -> None:
        """Free every partition held (a graceful stop): the others take them at their next beat."""
        held, self._held = self._held or {}, {}
        if held:
            await self._store.release_partitions(self._instance, sorted(held))
        self._count(freed=len(held), taken=0)

    def _count(self, *, freed: int, taken: int) -> None:
        if self._metrics is None:
            return
        held = self._held or {}
        self._metrics.partitions_owned.set(len(held))
        self._metrics.partition_epoch.set(max(held.values(), default=0))
        if freed:
            self._metrics.partition_moves.labels("freed").inc(freed)
        if taken:
            self._metrics.partition_moves.labels("taken").inc(taken)
