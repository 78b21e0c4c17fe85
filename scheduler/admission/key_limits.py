"""Each concurrency key's runs within its limit (scheduler/keys.py), admitted at the fetch.

Only the owner of a key's partition reads the key's jobs and run requests, so one instance
admits every run of the key, one fetch after another. It counts the key's runs in flight from
the leases held in the store, which include a previous owner's runs still going after a
partition moved, and keeps of the runs read as many as the limit leaves room for, in their
order; the others wait in the store, holding no worker. A key found at its limit is left out of
the reads until a count at a fetch's start finds room again: its backlog then costs the other
keys nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol, TypeVar

from tickd.scheduler.model import Job
from tickd.scheduler.ports.store_engine import DispatchStore


class Run(Protocol):
    """A run as the fetch holds it (run/ledger.py's DueRun)."""

    @property
    def job(self) -> Job: ...

    @property
    def claimed(self) -> bool:
        """Its job was claimed as it was read: its lease is among those the store counts."""


R = TypeVar("R", bound=Run)


class KeyLimits:
    def __init__(self, store: DispatchStore) -> None:
        self._store = store
        # The keys at their limit at the last count, each with the limit it was found at.
        self._full: dict[str, int] = {}
        # The leases held of the keys counted at this fetch's start.
        self._counted: dict[str, int] = {}

    async def still_full(self) -> list[str]:
        """The keys the reads leave out: those full at the last count and full still (one
        store read, while any was full). A key one of whose runs ended is read again."""
        self._counted = {}
        if self._full:
            leased = await self._store.running_by_key(sorted(self._full))
            self._counted = {key: leased.get(key, 0) for key in self._full}
            self._full = {k: n for k, n in self._full.items() if self._counted[k] >= n}
        return sorted(self._full)

    async def within(self, runs: Sequence[R]) -> list[R]:
        """The runs their keys have room for, in their order (a store read when they name a
        key not counted at the fetch's start)."""
        keyed = {key: job.concurrency_limit for job in _jobs(runs) if (key := job.concurrency_key)}
        # Each key's runs in flight besides those of this fetch: counted at its start, before
        # its reads claimed any; or now, less the runs its reads claimed.
        before = dict(self._counted)
        if uncounted := sorted(keyed.keys() - before.keys()):
            leased = await self._store.running_by_key(uncounted)
            claimed = Counter(run.job.concurrency_key for run in runs if run.claimed)
            before |= {key: leased.get(key, 0) - claimed[key] for key in uncounted}
        running = Counter({key: before.get(key, 0) for key in keyed})
        kept: list[R] = []
        for run in runs:
            key, limit = run.job.concurrency_key, run.job.concurrency_limit
            if key is None or limit is None:
                kept.append(run)
            elif running[key] < limit:
                running[key] += 1
                kept.append(run)
            else:
                self._full[key] = limit
        # A key its runs just filled is left out of the next read too, unless a run of it ends
        # before (the count at that fetch's start says).
        self._full |= {key: n for key, n in keyed.items() if n and running[key] >= n}
        return kept


def _jobs(runs: Sequence[Run]) -> list[Job]:
    return [run.job for run in runs]
