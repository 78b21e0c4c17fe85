"""Fair share and caps between domains, in the fetch. While everything due fits in a fetch, one
read takes it all, whatever the domains. Once a fetch comes back full (more is due than it took),
the next ones read each busy domain's head apart, a lane each, as much as its turn allows
(all in one statement where the store claims them at once: PostgreSQL): deficit round robin.
Each fetch adds to a busy domain's credit its weight's share of the fetch; what its read takes
is spent; a domain whose read finds less than it asked for has nothing more due, leaves the
lanes and loses its credit, so its share goes to the others at the next fetch.
Under saturation the domains then get runs in proportion to their weights, whatever the fetch's
size.

A fetch reads MAX_LANES busy domains at most, those owed most. Every domain not busy shares
one more lane, "the others", read for a tenth of the fetch beside its share: that is where a
domain's work first shows up behind another's burst; a domain seen there has a lane of its own
from the next fetch. While the others' lane finds nothing, it is read every OTHERS_EVERY, not
at each fetch, or less often where a read of it is slow: it takes at most OTHERS_TIME_SHARE of
the fetcher's time.

Within a lane the store's order holds (critical first); the lanes' runs are then merged by
priority, then by turn (a run's place in its lane over its domain's weight).

A domain's cap on runs in flight (max_running) is split between the instances by the partitions
each holds (at least one each): an instance's runs of the domain, armed, recorded, queued or
running, stay within its part; a domain at its part is read by no lane until runs end."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from tickd.scheduler.domain_settings import DEFAULT_WEIGHT
from tickd.scheduler.logs import log_event
from tickd.scheduler.model import Job
from tickd.scheduler.partitions import Partitions
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.ports.store_api import DomainStore

log = logging.getLogger("tickd.engine")


class Run(Protocol):
    """A run as the fetch holds it (run/ledger.py's DueRun): its job, and how many runs it
    starts (a sharded occurrence none: its shards are taken one by one)."""

    @property
    def job(self) -> Job: ...

    @property
    def width(self) -> int: ...


R = TypeVar("R", bound=Run)

# While the others' lane finds nothing, it is read this often: each read is a round trip that,
# in a burst of one domain, almost always finds none. A new domain waits this much at most...
OTHERS_EVERY = timedelta(seconds=0.25)
# ...where a read takes less than this share of the wait. FerretDB decodes every free job for it
# (no index serves "not these domains"): about a second in a burst of 3,000, which read every
# 0.25 s would leave the store little time for the runs.
OTHERS_TIME_SHARE = 0.1
# At most this many busy domains are read apart in one fetch, those owed most: where each read
# is a statement (SQLite, MongoDB; PostgreSQL claims every lane in one), a hundred busy domains
# would make a fetch of 100 a hundred reads of one. The others wait for a later fetch with their
# credit kept, so the shares hold over fetches.
MAX_LANES = 10
# The domains' weights are read again this often while the lanes are in use.
WEIGHTS_EVERY = timedelta(seconds=10)


@dataclass(frozen=True, slots=True)
class LaneRead:
    """One read of a fetch: a busy domain's head (`domain`), or, with `domain` None, the head
    of every domain not read apart."""

    domain: str | None
    limit: int
    domains: list[str] | None  # the store's filters
    exclude_domains: list[str]
    # The others' lane, which mostly finds none: read in one statement, never partition by
    # partition (in turn), which would read every partition held to find that out.
    probe: bool = False


class DomainWeights:
    """Each domain's weight and cap on runs in flight, as its settings in the store say (the
    defaults without a record), read again every WEIGHTS_EVERY while asked for. A read that
    fails keeps the last known."""

    def __init__(self, store: DomainStore) -> None:
        self._store = store
        self._weights: dict[str, int] = {}
        self.caps: dict[str, int] = {}  # max_running, of the domains that have one
        self._read_at: datetime | None = None

    def of(self, domain: str | None) -> int:
        return DEFAULT_WEIGHT if domain is None else self._weights.get(domain, DEFAULT_WEIGHT)

    async def refresh_if_due(self, now: datetime) -> None:
        if self._read_at is not None and now < self._read_at + WEIGHTS_EVERY:
            return
        self._read_at = now
        try:
            records = await self._store.list_domains()
        except StoreError as exc:
            log_event(log, "lanes.weights_unread", level=logging.WARNING, error=str(exc))
            return
        self._weights = {record.name: record.weight for record in records}
        self.caps = {r.name: r.max_running for r in records if r.max_running is not None}


class DomainCaps:
    """Each domain's cap on runs in flight, this instance's part of it: in proportion to the
    partitions it holds (all, without partitions), at least one while it holds any."""

    def __init__(self, weights: DomainWeights, partitions: Partitions | None) -> None:
        self._weights = weights
        self._partitions = partitions

    def part(self, domain: str) -> int | None:
        cap = self._weights.caps.get(domain)
        if cap is None or self._partitions is None:
            return cap
        held = self._partitions.readable()
        if held is None:
            return cap
        return max(1, math.floor(cap * len(held) / self._partitions.count)) if held else 0

    def capped(self, busy: Counter[str]) -> list[str]:
        """The domains with no room left, given how many runs of each are `busy`."""
        return [d for d in self._weights.caps if busy[d] >= (self.part(d) or 0)]

    def within(self, runs: Sequence[R], busy: Counter[str]) -> list[R]:
        """The runs their domains have room for."""
        taken: Counter[str] = Counter()
        kept: list[R] = []
        for run in runs:
            domain = run.job.domain
            part = self.part(domain)
            if part is None or busy[domain] + taken[domain] + run.width <= part:
                taken[domain] += run.width
                kept.append(run)
        return kept


class Lanes:
    """The busy domains' credit, and the reads of each fetch under saturation."""

    def __init__(self, weights: DomainWeights) -> None:
        self.weights = weights
        self._credit: dict[str, float] = {}  # the busy domains, each read apart
        self._others_empty_at: datetime | None = None  # when the others' lane last found none
        self._others_every = OTHERS_EVERY  # how often it is read while it finds none

    def seen(self, jobs: Iterable[Job]) -> None:
        """Domains with work due: each gets a lane of its own."""
        for job in jobs:
            self._credit.setdefault(job.domain, 0.0)

    def read_all(self, jobs: Sequence[Job], now: datetime, *, seconds: float = 0.0) -> None:
        """What a read of every domain at once found, in `seconds`: the domains with work due
        get lanes. That read looked at every domain's head, as the others' lane would: where
        it was slow (ten times its time is longer than OTHERS_EVERY), the others' lane waits as
        if it had just been read; otherwise it is read at the next fetch, as it would be."""
        self.seen(jobs)
        slow = timedelta(seconds=seconds / OTHERS_TIME_SHARE)
        if slow > OTHERS_EVERY:
            self._others_empty_at, self._others_every = now, slow

    def clear(self) -> None:
        """Everything due was taken: no domain is busy."""
        self._credit.clear()
        self._others_empty_at = None

    def reads(self, limit: int, now: datetime, *, capped: Sequence[str] = ()) -> list[LaneRead]:
        """The reads of a fetch of `limit` runs (and one, for the others' lane); the `capped`
        domains (at their cap of runs in flight) are read in none."""
        busy = [domain for domain in self._credit if domain not in capped]
        total = sum(self.weights.of(domain) for domain in busy)
        for domain in busy:
            self._credit[domain] += limit * self.weights.of(domain) / total
        owed = sorted(busy, key=self._credit.__getitem__, reverse=True)[:MAX_LANES]
        asked = {domain: int(self._credit[domain]) for domain in owed}
        if owed and not any(asked.values()):
            # Shares of less than a run each (a small fetch, many lanes): the lane owed most
            # goes, and owes the difference.
            asked[owed[0]] = 1
        reads, left = [], limit
        for domain in owed:
            if (n := min(asked[domain], left)) > 0:
                reads.append(LaneRead(domain, n, [domain], []))
                left -= n
        if self._others_due(now):
            # Beyond the fetch's limit (the runs beyond the room go back): enough to find a
            # few domains with work due, each with a lane of its own from the next fetch.
            probe = max(1, limit // MAX_LANES)
            reads.append(LaneRead(None, probe, None, [*busy, *capped], probe=True))
        return reads

    def took(
        self, read: LaneRead, jobs: Sequence[Job], now: datetime, *, seconds: float = 0.0
    ) -> None:
        """What a read found, in `seconds`: its runs are spent from its lane's credit; a lane
        that found less than it asked for has nothing more due now."""
        if read.domain is None:
            self._others_empty_at = None if jobs else now
            slow = timedelta(seconds=seconds / OTHERS_TIME_SHARE)
            self._others_every = max(OTHERS_EVERY, slow)
            self.seen(jobs)
        elif len(jobs) < read.limit:
            self._credit.pop(read.domain, None)
        else:
            self._credit[read.domain] -= len(jobs)

    def merged(self, taken: Sequence[tuple[LaneRead, Sequence[Job]]]) -> list[Job]:
        """The lanes' jobs as one batch: by priority, then by turn (a job's place in its lane
        over its domain's weight), so that a batch cut short still shares by weight."""
        turns = [
            (job.priority, (place + 1) / self.weights.of(read.domain), n, job)
            for n, (read, jobs) in enumerate(taken)
            for place, job in enumerate(jobs)
        ]
        turns.sort(key=lambda turn: turn[:3])
        return [job for *_, job in turns]

    def _others_due(self, now: datetime) -> bool:
        empty_at = self._others_empty_at
        return empty_at is None or not empty_at <= now < empty_at + self._others_every
