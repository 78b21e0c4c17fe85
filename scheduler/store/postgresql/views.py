"""The job store's views on PostgreSQL: the API's jobs list (search, filters, sort, keyset pages,
true totals) and the dashboard's overview (a window's executions aggregated by SQL, what needs
attention grouped by job), each read through an index, never by loading every row.

The overview's reads run in one read-only snapshot under `statement_timeout` (READ_SECONDS, as
SQLite's reads): a read past it is stopped by the server and fails saying so, whole, instead of
answering in part as SQLite's bucket-by-bucket read does, since here a window is two statements,
not one a bucket."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from tickd.scheduler.codec import exact_micros, micros
from tickd.scheduler.model import DeadLetter, Job
from tickd.scheduler.ports.backends import (
    Attention,
    ExecutionStats,
    JobOrder,
    JobSearch,
    JobTrouble,
)
from tickd.scheduler.store.kit.sqlite import READ_SECONDS
from tickd.scheduler.store.postgresql.base import Args, PostgresTables, Tx
from tickd.scheduler.store.postgresql.executions import in_domains
from tickd.scheduler.store.postgresql.statements import job_filters
from tickd.scheduler.store.sqlite.rows import Row, job_from_row
from tickd.scheduler.store.sqlite.views import grouped_troubles, like_pattern
from tickd.scheduler.store.views import (
    MICROS,
    PROBLEM_STATUSES,
    bucket_count,
    lag_percentiles,
)

T = TypeVar("T")

FREE = "enabled = 1 AND lease_token IS NULL"
LAST_STATUS = "((last_execution::jsonb) ->> 'status')"
PROBLEMS = [str(s) for s in PROBLEM_STATUSES]


def search_filters(args: Args, search: JobSearch) -> list[str]:
    """The search's filters (not its cursor) as SQL conditions."""
    where = job_filters(args, search)
    if search.text:
        # ILIKE under COLLATE "C" folds ASCII letters only, as SQLite's LIKE does.
        pattern = args(like_pattern(search.text), "text")
        where.append(f"(name ILIKE {pattern} ESCAPE '\\' OR id ILIKE {pattern} ESCAPE '\\')")
    if search.last_status:
        statuses = sorted(str(status) for status in search.last_status)
        where.append(f"{LAST_STATUS} = ANY ({args(statuses, 'text[]')})")
    if search.domains is not None:
        where.append(f"domain = ANY ({args(sorted(search.domains), 'text[]')})")
    return where


def _where(conditions: Sequence[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def page_reads(search: JobSearch) -> list[tuple[str, list[Any]]]:
    """The reads of a page, in turn, each ending in `LIMIT $n` with its limit the last argument:
    by name, one; by next run, the scheduled jobs after the cursor, then those with no next run,
    by name."""
    after = search.after_name

    def read(extra: Callable[[Args], list[str]], order: str) -> tuple[str, list[Any]]:
        args = Args()
        where = [*search_filters(args, search), *extra(args)]
        sql = f"SELECT * FROM jobs{_where(where)} ORDER BY {order} LIMIT ${len(args.values) + 1}"
        return sql, args.values

    def after_name(args: Args) -> list[str]:
        return [f"name > {args(after, 'text')}"] if after is not None else []

    if search.order is JobOrder.NAME:
        return [read(after_name, "name")]
    if after is not None and search.after_next_run_at is None:
        # The previous page ended among the unscheduled.
        return [read(lambda args: ["next_run_at IS NULL", *after_name(args)], "name")]

    def scheduled(args: Args) -> list[str]:
        if after is None:
            return ["next_run_at IS NOT NULL"]
        at = args(micros(search.after_next_run_at), "int8")
        return ["next_run_at IS NOT NULL", f"(next_run_at, name) > ({at}, {args(after, 'text')})"]

    return [
        read(scheduled, "next_run_at, name"),
        read(lambda args: ["next_run_at IS NULL"], "name"),
    ]


async def _read_pages(tx: Tx, reads: Sequence[tuple[str, list[Any]]], limit: int) -> list[Row]:
    rows: list[Row] = []
    for sql, args in reads:
        if len(rows) >= limit:
            break
        rows += await tx.fetch(sql, *args, limit - len(rows))
    return rows


# $1 the window's start, $2 its end, $3 a bucket's width, $4 the count of buckets: the last
# bucket ends with the window. {scope}: the domains' condition, if any ($5).
BUCKET = "least((scheduled_at - $1) / $3, $4 - 1)"
COUNTS = f"""
SELECT {BUCKET}, status, handler, count(*) FROM executions
WHERE scheduled_at >= $1 AND scheduled_at < $2 {{scope}} GROUP BY 1, 2, 3
"""
# Each occurrence's first start (a retry of it starts late by design, and is not fire lag),
# skipped ones left out (they never started).
FIRST_STARTS = f"""
SELECT {BUCKET}, greatest(min(started_at) - scheduled_at, 0) FROM executions
WHERE scheduled_at >= $1 AND scheduled_at < $2 AND started_at IS NOT NULL AND status <> 'skipped'
{{scope}} GROUP BY job_id, scheduled_at, shard
"""


def executions_in(args: Args, domains: frozenset[str] | None) -> str:
    """`AND` the executions of the jobs in `domains` (None: nothing, every execution)."""
    return "" if domains is None else f"AND {in_domains(args, domains)}"


def jobs_in(args: Args, domains: frozenset[str] | None) -> str:
    """`AND` the jobs in `domains` (None: nothing, every job)."""
    return "" if domains is None else f"AND domain = ANY ({args(sorted(domains), 'text[]')})"


async def window_stats(
    tx: Tx, window: tuple[int, int, int, int], domains: frozenset[str] | None
) -> ExecutionStats:
    count = window[3]
    counts: dict[tuple[str, str], int] = {}
    bucket_counts: list[dict[str, int]] = [{} for _ in range(count)]
    lags: list[list[float]] = [[] for _ in range(count)]
    args = Args(*window)
    scope = executions_in(args, domains)
    for bucket, status, handler, n in await tx.fetch(COUNTS.format(scope=scope), *args.values):
        counts[(status, handler)] = counts.get((status, handler), 0) + n
        bucket_counts[bucket][status] = bucket_counts[bucket].get(status, 0) + n
    for bucket, lag in await tx.fetch(FIRST_STARTS.format(scope=scope), *args.values):
        lags[bucket].append(lag / MICROS)
    return ExecutionStats(
        counts=counts,
        lag=lag_percentiles([lag for bucket_lags in lags for lag in bucket_lags]),
        bucket_counts=bucket_counts,
        bucket_lags=[lag_percentiles(bucket_lags) for bucket_lags in lags],
        counted_since=None,
    )


Troubles = tuple[list[JobTrouble], int, int]


async def _troubles(tx: Tx, where: str, args: Sequence[Any], limit: int) -> Troubles:
    """The jobs with executions matching `where` (on arguments $1...), newest first, at most
    `limit`, each with its newest distinct errors; and how many executions and jobs match."""
    n = len(args)
    newest = await tx.fetch(
        f"SELECT job_id, max(scheduled_at) AS newest FROM executions WHERE {where} "
        f"GROUP BY job_id ORDER BY newest DESC LIMIT ${n + 1}",
        *args,
        limit,
    )
    ids = [row[0] for row in newest]
    rows: list[Row] = []
    if ids:
        # The name and handler the newest of each group ran under.
        rows = await tx.fetch(
            "SELECT job_id, (array_agg(job_name ORDER BY scheduled_at DESC))[1], "
            "(array_agg(handler ORDER BY scheduled_at DESC))[1], status, error, "
            f"max(scheduled_at), count(*) FROM executions WHERE {where} "
            f"AND job_id = ANY (${n + 1}::text[]) GROUP BY job_id, status, error",
            *args,
            ids,
        )
    total = await tx.fetchrow(
        f"SELECT count(*), count(DISTINCT job_id) FROM executions WHERE {where}", *args
    )
    assert total is not None
    return grouped_troubles(rows, limit), int(total[0]), int(total[1])


DEAD = f"dead_letter = '{DeadLetter.OPEN}'"
FAILED = "status = ANY ($3::text[]) AND scheduled_at >= $1 AND scheduled_at < $2"
FAILING = "FROM jobs WHERE consecutive_failures > 0"
LATE = f"FROM jobs WHERE {FREE} AND next_run_at < $1"


async def read_attention(
    tx: Tx,
    window: tuple[int, int],
    late_before: datetime,
    limit: int,
    domains: frozenset[str] | None,
) -> Attention:
    dead = Args()
    dead_where = f"{DEAD} {executions_in(dead, domains)}"
    dead_letters, dead_total, dead_jobs = await _troubles(tx, dead_where, dead.values, limit)
    failed = Args(*window, PROBLEMS)
    failed_where = f"{FAILED} {executions_in(failed, domains)}"
    failures, _, failure_jobs = await _troubles(tx, failed_where, failed.values, limit)
    failing_args = Args()
    failing_rows = f"{FAILING} {jobs_in(failing_args, domains)}"
    late_args = Args(exact_micros(late_before))
    late_rows = f"{LATE} {jobs_in(late_args, domains)}"
    failing = (
        f"SELECT * {failing_rows} ORDER BY consecutive_failures DESC, name "
        f"LIMIT ${len(failing_args.values) + 1}"
    )
    late = f"SELECT * {late_rows} ORDER BY next_run_at LIMIT ${len(late_args.values) + 1}"
    return Attention(
        dead_letters=dead_letters,
        dead_letters_total=dead_total,
        dead_letter_jobs=dead_jobs,
        failures=failures,
        failure_jobs=failure_jobs,
        failing=[job_from_row(row) for row in await tx.fetch(failing, *failing_args.values, limit)],
        failing_total=int(
            await tx.fetchval(f"SELECT count(*) {failing_rows}", *failing_args.values)
        ),
        late=[job_from_row(row) for row in await tx.fetch(late, *late_args.values, limit)],
        late_total=int(await tx.fetchval(f"SELECT count(*) {late_rows}", *late_args.values)),
    )


class PostgresViews(PostgresTables):
    """The jobs list and the overview of PostgresStore."""

    read_seconds = READ_SECONDS

    async def _limited(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """`fn`, reads, in one snapshot, each statement within `read_seconds`."""

        async def read(tx: Tx) -> T:
            # At least 1 ms: 0 would mean no limit at all.
            timeout = f"{max(1, round(self.read_seconds * 1000))}ms"
            await tx.fetchval("SELECT set_config('statement_timeout', $1, true)", timeout)
            return await fn(tx)

        return await self._run(read, read_only=True)

    async def search_jobs(self, search: JobSearch) -> list[Job]:
        reads = page_reads(search)
        if len(reads) == 1:
            sql, args = reads[0]
            rows = await self._fetch(sql, *args, search.limit)
        else:
            rows = await self._run(lambda tx: _read_pages(tx, reads, search.limit), read_only=True)
        return [job_from_row(row) for row in rows]

    async def count_jobs(self, search: JobSearch) -> int:
        args = Args()
        sql = f"SELECT count(*) FROM jobs{_where(search_filters(args, search))}"
        return int(await self._fetchval(sql, *args.values))

    async def execution_stats(
        self,
        since: datetime,
        until: datetime,
        bucket_seconds: int,
        *,
        domains: frozenset[str] | None = None,
    ) -> ExecutionStats:
        window = (
            exact_micros(since),
            exact_micros(until),
            bucket_seconds * MICROS,
            bucket_count(since, until, bucket_seconds),
        )
        return await self._limited(lambda tx: window_stats(tx, window, domains))

    async def attention(
        self,
        since: datetime,
        until: datetime,
        late_before: datetime,
        *,
        limit: int,
        domains: frozenset[str] | None = None,
    ) -> Attention:
        window = (exact_micros(since), exact_micros(until))
        return await self._limited(
            lambda tx: read_attention(tx, window, late_before, limit, domains)
        )
