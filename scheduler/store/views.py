"""What the stores' views (the API's jobs list, the dashboard's overview) share: the nearest-rank
percentile, the grouping of troubled executions by job, and the tally of a window's executions
for a backend that reads them instead of aggregating in its query language."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickd.scheduler.model import ExecutionError, Status
from tickd.scheduler.ports.backends import ExecutionStats, JobTrouble, LagPercentiles

# The distinct (status, error) pairs a trouble group keeps, newest first.
ERRORS_KEPT = 3
# Problem statuses of the overview: what failed, and what never ran.
PROBLEM_STATUSES = (Status.FAILED, Status.TIMEOUT, Status.ABANDONED, Status.SKIPPED)
MICROS = 1_000_000


def nearest_rank(percent: int, count: int) -> int:
    """The 1-based rank of the `percent` percentile among `count` ordered values."""
    return max(1, (percent * count + 99) // 100)


def lag_percentiles(lags: Sequence[float]) -> LagPercentiles:
    if not lags:
        return LagPercentiles(measured=0, p50=None, p99=None)
    ordered = sorted(lags)
    count = len(ordered)
    return LagPercentiles(
        measured=count,
        p50=ordered[nearest_rank(50, count) - 1],
        p99=ordered[nearest_rank(99, count) - 1],
    )


@dataclass(kw_only=True)
class _Group:
    job_id: str
    job_name: str
    handler: str
    count: int = 0
    newest_at: datetime
    errors: list[tuple[Status, ExecutionError | None, datetime]] = field(default_factory=list)

    def add(self, status: Status, error: ExecutionError | None, at: datetime, count: int) -> None:
        self.count += count
        self.newest_at = max(self.newest_at, at)
        seen = {(s, e) for s, e, _ in self.errors}
        if len(self.errors) < ERRORS_KEPT and (status, error) not in seen:
            self.errors.append((status, error, at))

    def trouble(self) -> JobTrouble:
        return JobTrouble(
            job_id=self.job_id,
            job_name=self.job_name,
            handler=self.handler,
            count=self.count,
            newest_at=self.newest_at,
            errors=tuple(self.errors),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TroubleRow:
    """Executions of one job with one (status, error): how many, the newest's time and names."""

    job_id: str
    job_name: str
    handler: str
    status: Status
    error: ExecutionError | None
    at: datetime
    count: int = 1


def group_by_job(rows: Iterable[TroubleRow], limit: int) -> list[JobTrouble]:
    """The rows grouped by job, the job with the newest row first, at most `limit` jobs; rows
    come newest first, so each group's errors are its newest distinct ones."""
    groups: dict[str, _Group] = {}
    for row in sorted(rows, key=lambda r: r.at, reverse=True):
        group = groups.get(row.job_id)
        if group is None:
            group = _Group(
                job_id=row.job_id, job_name=row.job_name, handler=row.handler, newest_at=row.at
            )
            groups[row.job_id] = group
        group.add(row.status, row.error, row.at, row.count)
    ordered = sorted(groups.values(), key=lambda g: g.newest_at, reverse=True)
    return [group.trouble() for group in ordered[:limit]]


@dataclass(kw_only=True)
class ExecutionTally:
    """Executions of [since, since + buckets * bucket_us) added one by one, then the stats."""

    since_us: int
    bucket_us: int
    buckets: int
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    bucket_counts: list[dict[str, int]] = field(default_factory=list)
    # The first start of each occurrence (job, due time, shard) that started.
    first_starts: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bucket_counts = [{} for _ in range(self.buckets)]

    def add(
        self,
        *,
        job_id: str,
        shard: int,
        status: str,
        handler: str,
        due_us: int,
        start_us: int | None,
    ) -> None:
        self.counts[(status, handler)] = self.counts.get((status, handler), 0) + 1
        counts = self.bucket_counts[self._bucket(due_us)]
        counts[status] = counts.get(status, 0) + 1
        if start_us is None or status == Status.SKIPPED:
            return  # a skipped occurrence never started: its "lag" would be the outage
        key = (job_id, due_us, shard)
        self.first_starts[key] = min(self.first_starts.get(key, start_us), start_us)

    def _bucket(self, due_us: int) -> int:
        return min(max((due_us - self.since_us) // self.bucket_us, 0), self.buckets - 1)

    def stats(self) -> ExecutionStats:
        per_bucket: list[list[float]] = [[] for _ in range(self.buckets)]
        for (_, due_us, _), start_us in self.first_starts.items():
            per_bucket[self._bucket(due_us)].append(max(0, start_us - due_us) / MICROS)
        return ExecutionStats(
            counts=self.counts,
            lag=lag_percentiles([lag for lags in per_bucket for lag in lags]),
            bucket_counts=self.bucket_counts,
            bucket_lags=[lag_percentiles(lags) for lags in per_bucket],
        )


def bucket_count(since: datetime, until: datetime, bucket_seconds: int) -> int:
    """Buckets of the window's whole seconds: a window that ends a microsecond past a time (to
    take in what is due right then) has no bucket for that microsecond alone."""
    seconds = (until - since) // timedelta(seconds=1)
    return max(1, math.ceil(seconds / bucket_seconds))
