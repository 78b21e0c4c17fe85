"""The engine's dispatch on SQLite (the store's DispatchStore role): what is due, claiming it
fenced, recording the runs it starts, giving back and reaping leases. The run requests' and
shards' part of the role is requests.py's."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from tickd.scheduler.codec import (
    micros,
    to_json_ready,
)
from tickd.scheduler.model import Execution, ExecutionError, Job, Priority, Status
from tickd.scheduler.ports.backends import (
    EVERY_DUE,
    Claim,
    DueFilter,
    LeaseTerms,
    RunEnd,
)
from tickd.scheduler.ports.store_engine import CompletionStore
from tickd.scheduler.store.kit.sqlite import AT_ONCE_MAX_ROWS
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import (
    claim_part,
    execution_from_row,
    execution_row,
    job_from_row,
    unclaimed_part,
    with_claim,
)
from tickd.scheduler.store.sqlite.schema import (
    EXECUTION_COLUMNS,
    FREE,
)
from tickd.scheduler.store.sqlite.statements import (
    TAKEABLE_JOB_LEASE,
    abandoned_for_good_in,
    insert_sql,
    takeable_args,
    without_keys,
    write_events,
)

PRIORITIES = f"({', '.join(str(int(p)) for p in Priority)})"


class SQLiteDispatch(SQLiteTables):
    """The dispatch of SQLiteStore."""

    # One process's store: the in-process lock it runs with costs nothing.
    claim_is_the_lock = False
    reads_partitions_in_turn = False

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # The last due query's jobs by id, with their rows: the claim that follows it reads the
        # winners back and decodes only those whose row changed beyond the claim's own columns.
        self._due_read: dict[str, tuple[tuple[Any, ...], Job]] = {}

    async def claim_due_jobs(
        self,
        now: datetime,
        horizon: datetime,
        limit: int,
        *,
        lease: LeaseTerms,
        where: DueFilter = EVERY_DUE,
    ) -> list[Job] | None:
        return None  # read with due_jobs, then claimed with claim_jobs

    async def claim_due_lanes(
        self,
        now: datetime,
        horizon: datetime,
        lanes: Sequence[tuple[int, DueFilter]],
        *,
        lease: LeaseTerms,
    ) -> list[list[Job]] | None:
        return None  # each lane read on its own

    async def due_jobs(self, now: datetime, limit: int, where: DueFilter = EVERY_DUE) -> list[Job]:
        # `where.partitions` and `in_turn` unused: a SQLite file is one process's, which owns
        # them all.
        due = f"SELECT * FROM jobs WHERE {FREE} AND next_run_at <= ?"
        others: tuple[object, ...] = tuple(where.exclude_handlers)  # the arguments after the time
        if where.exclude_handlers:
            due += f" AND handler NOT IN ({','.join('?' * len(where.exclude_handlers))})"
        if where.domains is not None:  # one domain: a seek into jobs_due_by_domain
            due += f" AND domain IN ({','.join('?' * len(where.domains))})"
            others += tuple(where.domains)
        if where.exclude_domains:
            due += f" AND domain NOT IN ({','.join('?' * len(where.exclude_domains))})"
            others += tuple(where.exclude_domains)
        if where.exclude_keys:
            due += f" AND {without_keys(len(where.exclude_keys))}"
            others += tuple(where.exclude_keys)
        # One seek per priority into the due index, in its order: no sort, and jobs not due yet
        # are never read (without the IN, SQLite walks them or sorts every due job).
        by_urgency = f" AND priority IN {PRIORITIES} ORDER BY priority, next_run_at LIMIT ?"
        reads: list[tuple[str, tuple[object, ...]]] = []
        if first := where.first:
            named = f" AND id IN ({','.join('?' * len(first))}) ORDER BY next_run_at LIMIT ?"
            reads.append((due + named, (micros(now), *others, *first)))
            due, others = due + f" AND id NOT IN ({','.join('?' * len(first))})", (*others, *first)
        if where.starved_before is None:
            reads.append((due + by_urgency, (micros(now), *others)))
        else:
            # The starved first, as if more urgent than critical, oldest first; then the others
            # by urgency. Two queries, each walking an index and stopping at its limit: one
            # ORDER BY over both would sort every due job (a burst of 30,000, every tick).
            bound = micros(where.starved_before)
            reads.append((due + " ORDER BY next_run_at LIMIT ?", (bound, *others)))
            newer = due + " AND next_run_at > ?" + by_urgency
            reads.append((newer, (micros(now), *others, bound)))
        rows = await self._run(lambda db: read_due(db, reads, limit), at_once=True)
        return self._decode_due(rows)

    def _decode_due(self, rows: list[sqlite3.Row]) -> list[Job]:
        jobs = [job_from_row(row) for row in rows]
        self._due_read = {job.id: (tuple(row), job) for row, job in zip(rows, jobs, strict=True)}
        return jobs

    def _decode_claimed(self, rows: list[sqlite3.Row]) -> list[Job]:
        """The winners of a claim: a job the due query read, and whose row the claim changed
        only in its lease and fence, is that job with the claim's lease, not decoded again."""
        read, self._due_read = self._due_read, {}
        if not rows:
            return []
        columns = rows[0].keys()  # every row of the batch has the same shape
        unclaimed, claim = unclaimed_part(columns), claim_part(columns)
        claimed = []
        for row in rows:
            values = tuple(row)
            lease = claim(values)
            seen = read.get(lease[0])
            if seen is not None and unclaimed(values) == unclaimed(seen[0]):
                claimed.append(with_claim(seen[1], lease))
            else:
                claimed.append(job_from_row(row))
        return claimed

    async def running_by_key(self, keys: Sequence[str]) -> dict[str, int]:
        if not keys:
            return {}
        # A seek into jobs_keyed_leased for each key.
        sql = (
            "SELECT concurrency_key, COUNT(*) FROM jobs "
            f"WHERE concurrency_key IN ({','.join('?' * len(keys))}) AND lease_token IS NOT NULL "
            "GROUP BY concurrency_key"
        )
        rows = await self._run(lambda db: db.execute(sql, tuple(keys)).fetchall(), at_once=True)
        return {str(key): int(count) for key, count in rows}

    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        if not claims:
            return []
        update = (
            "UPDATE jobs SET lease_owner = ?, lease_until = ?, fence = fence + 1, "
            "lease_token = fence + 1 "
            f"WHERE id = ? AND revision = ? AND next_run_at IS ? AND {FREE}"
        )
        rows = [
            (c.owner, micros(c.until), c.job_id, c.revision, micros(c.next_run_at)) for c in claims
        ]
        ids = [c.job_id for c in claims]
        owner = claims[0].owner
        select = f"SELECT * FROM jobs WHERE lease_owner = ? AND id IN ({','.join('?' * len(ids))})"

        def claim(db: sqlite3.Connection) -> list[sqlite3.Row]:
            db.executemany(update, rows)
            # Read the winners back: the set of rows that now carry our lease.
            return db.execute(select, (owner, *ids)).fetchall()

        return self._decode_claimed(await self._run(claim, at_once=True))

    async def insert_executions(
        self, executions: Sequence[Execution], *, event_source: str | None = None
    ) -> None:
        rows = [execution_row(e) for e in executions]
        sql = insert_sql("executions", EXECUTION_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)

        def insert(db: sqlite3.Connection) -> None:
            db.executemany(sql, rows)
            write_events(db, executions, event_source)

        await self._run(insert, at_once=len(rows) <= AT_ONCE_MAX_ROWS)

    async def give_back(self, leases: Sequence[tuple[str, int]]) -> None:
        sql = (
            "UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_until = NULL "
            "WHERE id = ? AND lease_token = ?"
        )
        if leases:
            await self._run(lambda db: db.executemany(sql, list(leases)))

    async def reap_expired_leases(
        self, now: datetime, *, instance: str | None = None, event_source: str | None = None
    ) -> list[Execution]:
        error = ExecutionError(
            type="LeaseExpired", message="the lease expired before the run ended"
        )
        error_json = json.dumps(to_json_ready({"type": error.type, "message": error.message}))
        at = micros(now)

        def reap(db: sqlite3.Connection) -> tuple[list[sqlite3.Row], list[RunEnd]]:
            expired = db.execute(
                "SELECT id, lease_token FROM jobs WHERE lease_token IS NOT NULL "
                f"AND {TAKEABLE_JOB_LEASE}",
                takeable_args(now, instance) * 2,
            ).fetchall()
            abandoned = []
            for job in expired:
                abandoned += db.execute(
                    "UPDATE executions SET status = ?, finished_at = ?, error = ? "
                    "WHERE job_id = ? AND token = ? AND status = ? RETURNING *",
                    (
                        Status.ABANDONED,
                        at,
                        error_json,
                        job["id"],
                        job["lease_token"],
                        Status.RUNNING,
                    ),
                ).fetchall()
            leases = [(job["id"], job["lease_token"]) for job in expired]
            # Those abandoned past their retries keep their leases until their ends are written.
            given_up = abandoned_for_good_in(db, leases)
            held = {(f.execution.job_id, f.execution.token) for f in given_up}
            db.executemany(
                "UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_until = NULL "
                "WHERE id = ? AND lease_token = ?",
                [lease for lease in leases if lease not in held],
            )
            # outbox: the abandoned executions' events, in this transaction
            write_events(db, [execution_from_row(row) for row in abandoned], event_source)
            return abandoned, given_up

        rows, given_up = await self._run(reap)
        if given_up:
            await cast(CompletionStore, self).write_ends(given_up, event_source=event_source)
        dead = {finish.execution.id: finish.execution for finish in given_up}
        return [dead.get(row["id"], execution_from_row(row)) for row in rows]


def read_due(
    db: sqlite3.Connection, reads: Sequence[tuple[str, tuple[object, ...]]], limit: int
) -> list[sqlite3.Row]:
    """The rows of each read in turn (each ends in `LIMIT ?`; no job in two of them), up to
    `limit`: a later read stops where the earlier ones left off."""
    rows: list[sqlite3.Row] = []
    for sql, args in reads:
        if len(rows) >= limit:
            break
        rows += db.execute(sql, (*args, limit - len(rows))).fetchall()
    return rows
