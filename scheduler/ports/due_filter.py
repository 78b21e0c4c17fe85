"""Which due jobs a read of the due queue takes: the filter the dispatcher hands the store's due
reads (scheduler/ports/store_engine.py, DispatchStore.due_jobs and claim_due_jobs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class DueFilter:
    """Which due jobs a read of the due queue takes (DispatchStore.due_jobs, claim_due_jobs);
    the default, every one. Each field holds in every read the call makes, of the jobs in
    `first` too.

    - `exclude_handlers`: none of those handlers' jobs (those at their concurrency limit).
    - `starved_before`: the jobs due since before then come first, oldest first, whatever
      their priority, so that under a sustained backlog every priority is taken in a bound.
    - `first`: before all the others, those of these jobs that are due (those whose runs a
      crash stranded: they have waited longest of all).
    - `partitions` (None: all): only jobs of those partitions, and those an older tickd wrote
      without one, which every instance reads until an open gives them one, so that
      instances read and claim disjoint shares of the queue; SQLite, one process's, reads
      them all.
    - `in_turn`: a store that reads one partition at a time (`reads_partitions_in_turn`:
      FerretDB, which decodes whatever its filter's equalities select) reads `partitions` in
      the order given and stops once it has its limit: urgency then holds within a partition
      (FerretDB reads the critical and high jobs of them all first). A claim at the read
      (claim_due_jobs) reads every partition given at once.
    - `domains` (None: any): only jobs of those domains; `exclude_domains`: none of those.
      The due queue can then be shared between domains, each busy domain's head read on its
      own and the others' together. A job stored without a domain (by a tickd from before
      domains) is in the default one (DEFAULT_DOMAIN, scheduler/domains.py).
    - `exclude_keys`: no job naming one of those concurrency keys (those at their limit,
      scheduler/keys.py); the jobs naming no key are kept."""

    exclude_handlers: Sequence[str] = ()
    starved_before: datetime | None = None
    first: Sequence[str] = ()
    partitions: Sequence[int] | None = None
    in_turn: bool = False
    domains: Sequence[str] | None = None
    exclude_domains: Sequence[str] = ()
    exclude_keys: Sequence[str] = ()


EVERY_DUE = DueFilter()
