"""Partitions: every job hashes into one of P partitions (P fixed when the store is created), and
each partition has one owner among the live instances, which alone reads its due jobs. Instances
then read disjoint parts of the due queue instead of all reading its head and racing for it.

Who owns what follows from the live instances alone (rendezvous hashing): every instance ranks
the instances for each partition by a hash of both and takes the partitions it ranks first, so
instances agree without talking, and a join or a leave moves only the partitions of the instance
that came or went (about P / N). Pure functions: the heartbeat (maintenance/partitions.py) applies
them to the instances it reads and to what the store says each partition's owner is.

PartitionTurns is how the fetcher reads its partitions where the store can read them one at a
time (FerretDB, see DispatchStore.due_jobs): so under a backlog, each fetch starting at the
partition the last one stopped in, passing over for a tick the partitions a full fetch found
drained. A burst drains some partitions before others; without that, every fetch would read each
drained partition again (a store command each) before reaching those that still have due jobs.
Each lane of the fetch (a busy domain's head, scheduler/admission/fair_share.py) walks apart.
Otherwise it reads them all at once: one command, as one instance's read of the whole queue."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from tickd.scheduler.model import Job

# Partitions of a new store: 2 to 16 instances get 4 to 32 each, so that a share is a partition's
# worth of jobs at most from another's, and a move is a small part of one instance's work.
DEFAULT_PARTITIONS = 64
# More would only make every heartbeat's assignment and every FerretDB fetch longer.
MAX_PARTITIONS = 4096


def partition_of(job_id: str, count: int) -> int:
    """The partition of a job: CRC-32 of its id, modulo the partition count. Stable across
    processes, versions and languages (zlib's CRC-32 is the IEEE one every language has)."""
    return zlib.crc32(job_id.encode()) % count


def job_partition(job: Job, count: int) -> int:
    """The partition a job lives in: its concurrency key's, when it names one, so that one
    instance (that partition's owner) admits every run of the key (scheduler/keys.py); its
    own otherwise."""
    return partition_of(job.concurrency_key or job.id, count)


def _rank(part: int, instance: str) -> bytes:
    return hashlib.blake2b(f"{part}/{instance}".encode(), digest_size=8).digest()


def _ranked(part: int, instances: list[str]) -> list[str]:
    return sorted(instances, key=lambda instance: _rank(part, instance), reverse=True)


def assignment(count: int, instances: Iterable[str]) -> dict[int, str]:
    """Each partition's owner among `instances`: the highest-ranked by rendezvous hashing, then
    balanced so that shares differ by one at most.

    Plain rendezvous hashing leaves shares uneven (64 partitions on 2 instances: 26 and 38 is
    common). The balancing pass is deterministic too: each partition goes to its best-ranked
    instance that still has room (P // N each, and one more for P % N of them), partitions
    taken in the order of their best rank's strength, so every instance computes the same map,
    and a join or leave still moves few partitions beyond the newcomer's (or leaver's) share."""
    live = sorted(set(instances))
    if not live:
        return {}
    share, extra = divmod(count, len(live))  # `extra` instances own one partition more
    ranked = {part: _ranked(part, live) for part in range(count)}
    order = sorted(range(count), key=lambda p: _rank(p, ranked[p][0]), reverse=True)
    owners: dict[int, str] = {}
    load = dict.fromkeys(live, 0)
    for part in order:
        owner = next(i for i in ranked[part] if load[i] < share or (load[i] == share and extra))
        if load[owner] == share:
            extra -= 1
        owners[part] = owner
        load[owner] += 1
    return owners


def owned_by(instance: str, count: int, instances: Iterable[str]) -> set[int]:
    """The partitions `instance` should own while `instances` are alive (it among them)."""
    owners = assignment(count, {*instances, instance})
    return {part for part, owner in owners.items() if owner == instance}


class Partitions(Protocol):
    """The partitions this instance holds (scheduler/maintenance/partitions.py)."""

    @property
    def count(self) -> int:
        """How many partitions the store has."""

    def readable(self) -> Sequence[int] | None:
        """Those to read due jobs in now; None for all."""


@dataclass
class Walk:
    """Where one lane's reads in turn stand."""

    resume: int | None = None  # the partition its last full read stopped in
    quiet: dict[int, datetime] = field(default_factory=dict)  # drained: passed over until then


class PartitionTurns:
    def __init__(self, partitions: Partitions, *, in_turn: bool, quiet: timedelta) -> None:
        self._partitions = partitions
        self._in_turn = in_turn  # the store reads them one at a time, in the order given
        self._quiet_for = quiet
        # A walk per lane: a domain read apart, or None for a read of every domain. A partition
        # drained of one domain's jobs may still hold another's.
        self._walks: dict[str | None, Walk] = {}

    def in_turn(self, *, backlogged: bool) -> bool:
        """Whether to read the partitions one at a time now: under a backlog, where the store
        can. Otherwise one read of them all costs one command, as it does one instance."""
        return self._in_turn and backlogged

    def order(
        self, now: datetime, *, backlogged: bool, lane: str | None = None
    ) -> list[int] | None:
        """The partitions for `lane` to read now, in order; None for all of them."""
        held = self._partitions.readable()
        if held is None:
            return None
        if not self.in_turn(backlogged=backlogged):
            for walk in self._walks.values():  # caught up; the next backlog starts where it was
                walk.quiet.clear()
            return list(held)
        walk = self._walks.get(lane, Walk())
        start = held.index(walk.resume) if walk.resume in held else 0
        turn = [*held[start:], *held[:start]]
        return [part for part in turn if walk.quiet.get(part, now) <= now]

    def read(
        self,
        order: Sequence[int] | None,
        jobs: Sequence[Job],
        now: datetime,
        *,
        lane: str | None = None,
    ) -> None:
        """Note what a full read of `lane` found in `order`: the store stopped in the last
        partition it took jobs from, and every partition before that which gave none had no
        more of the lane's due."""
        if not order:
            return
        count = self._partitions.count
        gave = {job_partition(job, count) for job in jobs}
        stops = [i for i, part in enumerate(order) if part in gave]
        if not stops:
            return
        walk = self._walks.setdefault(lane, Walk())
        walk.resume = order[stops[-1]]
        until = now + self._quiet_for
        for part in order[: stops[-1]]:
            if part not in gave:
                walk.quiet[part] = until
