"""The job store's views on SQLite: the API's jobs list (search, filters, sort, keyset pages, true
totals) and the dashboard's overview (a window's executions aggregated by SQL, what needs
attention grouped by job), each read through an index, never by loading every row."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tickd.scheduler.codec import exact_micros, micros
from tickd.scheduler.model import DeadLetter, ExecutionError, Job, Status
from tickd.scheduler.ports.backends import (
    Attention,
    ExecutionStats,
    JobOrder,
    JobSearch,
    JobTrouble,
)
from tickd.scheduler.store.kit.sqlite import read_stopped
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.executions import in_domains
from tickd.scheduler.store.sqlite.rows import Row, from_micros, job_from_row
from tickd.scheduler.store.sqlite.schema import FREE
from tickd.scheduler.store.views import (
    MICROS,
    PROBLEM_STATUSES,
    TroubleRow,
    bucket_count,
    group_by_job,
    lag_percentiles,
)

LAST_STATUS = "json_extract(last_execution, '$.status')"
# No index leads with `enabled`: a boolean narrows little, and SQLite's planner would take one
# for the dispatcher's due query (`enabled = 1 AND ...`) over that query's own partial indexes.
VIEW_INDEXES = f"""
CREATE INDEX IF NOT EXISTS jobs_by_handler ON jobs (handler, name);
CREATE INDEX IF NOT EXISTS jobs_by_domain ON jobs (domain, name);
CREATE INDEX IF NOT EXISTS jobs_by_next_run ON jobs (next_run_at, name);
CREATE INDEX IF NOT EXISTS jobs_by_last_status ON jobs ({LAST_STATUS}, name);
CREATE INDEX IF NOT EXISTS jobs_failing ON jobs (consecutive_failures DESC, name)
    WHERE consecutive_failures > 0;
"""
LIKE_ESCAPE = "\\"
PROBLEMS = f"({', '.join(repr(str(s)) for s in PROBLEM_STATUSES)})"


def like_pattern(text: str) -> str:
    """`text` anywhere, its own % and _ taken literally."""
    escaped = text.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2).replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_filters(search: JobSearch) -> tuple[list[str], list[Any]]:
    """The search's filters (not its cursor) as SQL conditions and their arguments."""
    conditions: list[tuple[str, Any]] = [
        ("handler = ?", search.handler),
        ("domain = ?", search.domain),
        ("enabled = ?", None if search.enabled is None else int(search.enabled)),
        ("name >= ? AND name < ? || char(1114111)", search.name_prefix),
        ("next_run_at >= ?", micros(search.next_run_from)),
        ("next_run_at < ?", micros(search.next_run_to)),
    ]
    where = [condition for condition, value in conditions if value is not None]
    args: list[Any] = []
    for condition, value in conditions:
        if value is not None:
            args += [value] * condition.count("?")
    if search.text:
        where.append("(name LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\')")
        args += [like_pattern(search.text)] * 2
    if search.last_status:
        statuses = sorted(str(status) for status in search.last_status)
        where.append(f"{LAST_STATUS} IN ({', '.join('?' * len(statuses))})")
        args += statuses
    if search.domains is not None:
        where.append(f"domain IN ({', '.join('?' * len(search.domains))})")
        args += sorted(search.domains)
    return where, args


def _where(conditions: Sequence[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def page_reads(search: JobSearch) -> list[tuple[str, list[Any]]]:
    """The reads of a page, in turn, each ending in `LIMIT ?`: by name, one; by next run, the
    scheduled jobs after the cursor, then those with no next run, by name."""
    where, args = search_filters(search)
    after = search.after_name
    if search.order is JobOrder.NAME:
        cursor = ["name > ?"] if after is not None else []
        sql = f"SELECT * FROM jobs{_where([*where, *cursor])} ORDER BY name LIMIT ?"
        return [(sql, [*args, *([after] if after is not None else [])])]
    if after is not None and search.after_next_run_at is None:
        # The previous page ended among the unscheduled.
        unscheduled = f"SELECT * FROM jobs{_where([*where, 'next_run_at IS NULL', 'name > ?'])}"
        return [(unscheduled + " ORDER BY name LIMIT ?", [*args, after])]
    last = f"SELECT * FROM jobs{_where([*where, 'next_run_at IS NULL'])} ORDER BY name LIMIT ?"
    scheduled = ["next_run_at IS NOT NULL"]
    scheduled_args: list[Any] = []
    if after is not None:
        scheduled.append("(next_run_at, name) > (?, ?)")
        scheduled_args = [micros(search.after_next_run_at), after]
    first = f"SELECT * FROM jobs{_where([*where, *scheduled])} ORDER BY next_run_at, name LIMIT ?"
    return [(first, [*args, *scheduled_args]), (last, args)]


def _read_pages(
    db: sqlite3.Connection, reads: Sequence[tuple[str, list[Any]]], limit: int
) -> list[sqlite3.Row]:
    rows: list[sqlite3.Row] = []
    for sql, args in reads:
        if len(rows) >= limit:
            break
        rows += db.execute(sql, (*args, limit - len(rows))).fetchall()
    return rows


# Each occurrence's first start in a bucket (a retry of it starts late by design, and is not fire
# lag), skipped ones left out (they never started). {scope}: the domains' condition, if any.
FIRST_STARTS = """
SELECT max(min(started_at) - scheduled_at, 0) FROM executions
WHERE scheduled_at >= ? AND scheduled_at < ? AND started_at IS NOT NULL AND status != 'skipped'
{scope} GROUP BY job_id, scheduled_at, shard
"""
COUNTS = """
SELECT status, handler, count(*) FROM executions
WHERE scheduled_at >= ? AND scheduled_at < ? {scope} GROUP BY status, handler
"""
# A condition on executions (or jobs) and its arguments, ANDed to a read: ("", []) for none.
Scope = tuple[str, list[Any]]
EVERY_DOMAIN: Scope = ("", [])


def executions_in(domains: frozenset[str] | None) -> Scope:
    """The executions of the jobs in `domains` (None: every execution), as a Scope."""
    if domains is None:
        return EVERY_DOMAIN
    condition, args = in_domains(domains)
    return f"AND {condition}", args


def jobs_in(domains: frozenset[str] | None) -> Scope:
    """The jobs in `domains` (None: every job), as a Scope."""
    if domains is None:
        return EVERY_DOMAIN
    return f"AND domain IN ({', '.join('?' * len(domains))})", sorted(domains)


@dataclass(frozen=True, slots=True)
class Buckets:
    """A window of executions' due times, [start, end) in microseconds, cut in `count` buckets
    of `width`; the last one ends with the window."""

    start: int
    end: int
    width: int
    count: int

    def bounds(self, index: int) -> tuple[int, int]:
        last = index == self.count - 1
        return self.start + index * self.width, self.end if last else self.start + (
            index + 1
        ) * self.width


def window_stats(db: sqlite3.Connection, buckets: Buckets, scope: Scope) -> ExecutionStats:
    """The window's counts, by SQL; its fire lag percentiles from each occurrence's lag, which
    SQL finds (SQLite's window functions take longer to rank them than a sort here does). Read a
    bucket at a time, the newest first: a read stopped at its time limit answers with the
    buckets it counted whole, and says since when it counted."""
    counts: dict[tuple[str, str], int] = {}
    bucket_counts: list[dict[str, int]] = [{} for _ in range(buckets.count)]
    lags: list[list[float]] = [[] for _ in range(buckets.count)]
    counted_since = None
    condition, args = scope
    counts_sql, starts_sql = COUNTS.format(scope=condition), FIRST_STARTS.format(scope=condition)
    for index in reversed(range(buckets.count)):
        bounds = (*buckets.bounds(index), *args)
        try:
            rows = db.execute(counts_sql, bounds).fetchall()
            lags[index] = [lag / MICROS for (lag,) in db.execute(starts_sql, bounds)]
        except sqlite3.OperationalError as exc:
            if not read_stopped(exc):
                raise
            counted_since = from_micros(buckets.bounds(index)[1])
            break
        for status, handler, count in rows:
            counts[(status, handler)] = counts.get((status, handler), 0) + count
            bucket_counts[index][status] = bucket_counts[index].get(status, 0) + count
    return ExecutionStats(
        counts=counts,
        lag=lag_percentiles([lag for bucket_lags in lags for lag in bucket_lags]),
        bucket_counts=bucket_counts,
        bucket_lags=[lag_percentiles(bucket_lags) for bucket_lags in lags],
        counted_since=counted_since,
    )


def _error(text: str | None) -> ExecutionError | None:
    if text is None:
        return None
    doc = json.loads(text)
    return ExecutionError(type=str(doc.get("type", "")), message=str(doc.get("message", "")))


Troubles = tuple[list[JobTrouble], int, int]


def _troubles(db: sqlite3.Connection, where: str, args: Sequence[Any], limit: int) -> Troubles:
    """The jobs with executions matching `where`, newest first, at most `limit`, each with its
    newest distinct errors; and how many executions and jobs match in all."""
    newest = db.execute(
        f"SELECT job_id, max(scheduled_at) AS newest FROM executions WHERE {where} "
        "GROUP BY job_id ORDER BY newest DESC LIMIT ?",
        (*args, limit),
    ).fetchall()
    ids = [row[0] for row in newest]
    rows = []
    if ids:
        # Bare columns beside max(): SQLite takes them from the row holding the max.
        rows = db.execute(
            "SELECT job_id, job_name, handler, status, error, max(scheduled_at), count(*) "
            f"FROM executions WHERE {where} AND job_id IN ({', '.join('?' * len(ids))}) "
            "GROUP BY job_id, status, error",
            (*args, *ids),
        ).fetchall()
    total = db.execute(
        f"SELECT count(*), count(DISTINCT job_id) FROM executions WHERE {where}", args
    ).fetchone()
    return grouped_troubles(rows, limit), int(total[0]), int(total[1])


def grouped_troubles(rows: Sequence[Row], limit: int) -> list[JobTrouble]:
    """Rows of (job id, name, handler, status, error, scheduled at, count) as the jobs' troubles,
    at most `limit` jobs: what both SQL stores' trouble reads return."""
    return group_by_job(
        (
            TroubleRow(
                job_id=row[0],
                job_name=row[1],
                handler=row[2],
                status=Status(row[3]),
                error=_error(row[4]),
                at=_at(row[5]),
                count=int(row[6]),
            )
            for row in rows
        ),
        limit,
    )


def _at(value: int) -> datetime:
    at = from_micros(value)
    assert at is not None
    return at


DEAD = f"dead_letter = '{DeadLetter.OPEN}'"
FAILED = f"status IN {PROBLEMS} AND scheduled_at >= ? AND scheduled_at < ?"
FAILING = "FROM jobs WHERE consecutive_failures > 0"
LATE = f"FROM jobs WHERE {FREE} AND next_run_at < ?"


def read_attention(
    db: sqlite3.Connection,
    window: tuple[int, int],
    late_before: datetime,
    limit: int,
    domains: frozenset[str] | None,
) -> Attention:
    runs, runs_args = executions_in(domains)
    jobs, jobs_args = jobs_in(domains)
    dead_letters, dead_total, dead_jobs = _troubles(db, f"{DEAD} {runs}", runs_args, limit)
    failures, _, failure_jobs = _troubles(db, f"{FAILED} {runs}", [*window, *runs_args], limit)
    failing = f"SELECT * {FAILING} {jobs} ORDER BY consecutive_failures DESC, name LIMIT ?"
    late = f"{LATE} {jobs}"
    before = (exact_micros(late_before), *jobs_args)
    return Attention(
        dead_letters=dead_letters,
        dead_letters_total=dead_total,
        dead_letter_jobs=dead_jobs,
        failures=failures,
        failure_jobs=failure_jobs,
        failing=[job_from_row(row) for row in db.execute(failing, (*jobs_args, limit))],
        failing_total=_count(db, f"{FAILING} {jobs}", jobs_args),
        late=[
            job_from_row(row)
            for row in db.execute(f"SELECT * {late} ORDER BY next_run_at LIMIT ?", (*before, limit))
        ],
        late_total=_count(db, late, before),
    )


def _count(db: sqlite3.Connection, rows: str, args: Sequence[Any]) -> int:
    return int(db.execute(f"SELECT count(*) {rows}", args).fetchone()[0])


class SQLiteViews(SQLiteTables):
    """The jobs list and the overview of SQLiteStore."""

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
        db = super()._connected(db)
        db.executescript(VIEW_INDEXES)
        return db

    async def search_jobs(self, search: JobSearch) -> list[Job]:
        reads = page_reads(search)
        rows = await self._read(lambda db: _read_pages(db, reads, search.limit))
        return [job_from_row(row) for row in rows]

    async def count_jobs(self, search: JobSearch) -> int:
        where, args = search_filters(search)
        sql = f"SELECT count(*) FROM jobs{_where(where)}"
        return int((await self._read(lambda db: db.execute(sql, args).fetchone()))[0])

    async def execution_stats(
        self,
        since: datetime,
        until: datetime,
        bucket_seconds: int,
        *,
        domains: frozenset[str] | None = None,
    ) -> ExecutionStats:
        buckets = Buckets(
            start=exact_micros(since),
            end=exact_micros(until),
            width=bucket_seconds * MICROS,
            count=bucket_count(since, until, bucket_seconds),
        )
        scope = executions_in(domains)
        return await self._read(lambda db: window_stats(db, buckets, scope))

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
        return await self._read(lambda db: read_attention(db, window, late_before, limit, domains))
