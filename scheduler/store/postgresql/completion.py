"""The engine's runs as they end on PostgreSQL (the store's CompletionStore role): keeping their
leases and writing their ends. A batch's ends are one statement (executions, events, requests
off the queue, each job's fenced release and advance); shards' ends, dead letters and re-drives
add a statement each, in one transaction, only to batches that hold them. The shards' part of
the role is requests.py's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.codec import micros
from tickd.scheduler.model import CancelRequest, DeadLetter, Status
from tickd.scheduler.ports.backends import RunEnd
from tickd.scheduler.store.postgresql.base import Args, PostgresTables, Tx
from tickd.scheduler.store.postgresql.statements import (
    CLEAR_LEASE,
    IGNORE,
    REPLACE_EXECUTION,
    insert_events,
    insert_rows,
    record_change_row,
    release_sql,
    release_values,
    upsert_executions,
)
from tickd.scheduler.store.sqlite.rows import Row, execution_row, from_micros, request_row
from tickd.scheduler.store.sqlite.schema import REQUEST_COLUMNS
from tickd.scheduler.store.sqlite.statements import summary_text

UNHANDLED = [str(DeadLetter.OPEN), str(DeadLetter.REDRIVING)]

# The shards' ends on their entries (see Store.write_ends): the lease goes; the entry is ended,
# unless the run was abandoned (then the shard is due again).
SHARD_END_SQL = (
    f"UPDATE run_requests AS q SET {CLEAR_LEASE}, "
    "ended = CASE WHEN s.abandoned = 1 THEN q.ended ELSE s.ended END "
    "FROM unnest($1::text[], $2::int8[], $3::int4[], $4::text[]) WITH ORDINALITY "
    "AS s(job_id, token, abandoned, ended, n) "
    "WHERE q.job_id = s.job_id AND q.lease_token = s.token RETURNING s.n"
)
SETTLE_SQL = (
    "UPDATE executions AS x SET dead_letter = $1 "
    "FROM unnest($2::text[], $3::int8[], $4::int4[], $5::text[]) AS s(job_id, at, shard, id) "
    "WHERE x.job_id = s.job_id AND x.scheduled_at = s.at AND x.shard = s.shard "
    "AND x.id <> s.id AND x.dead_letter = ANY ($6::text[])"
)


def ends_sql(args: Args, finishes: Sequence[RunEnd], event_source: str | None) -> str:
    """The batch's ends in one statement, returning the ordinals (from 1) among the batch's
    job ends (those not of shards) of the releases applied."""
    rows = [execution_row(f.execution) for f in finishes]
    parts = [f"ex AS ({upsert_executions(args, rows, REPLACE_EXECUTION)})"]
    if event_source is not None:
        executions = [f.execution for f in finishes]
        parts.append(f"ev AS ({insert_events(args, executions, event_source)})")
    # Ended requests leave the queue, whether or not the run was fenced off: they ran.
    done = [f.request_id for f in finishes if f.request_id is not None]
    if done:
        parts.append(f"dr AS (DELETE FROM run_requests WHERE id = ANY ({args(done, 'text[]')}))")
    releases = [
        release_values(f.execution.job_id, f.execution.token, f.advance)
        for f in finishes
        if f.shard is None
    ]
    return f"WITH {', '.join(parts)} {release_sql(args, releases)}"


def _applied(finishes: Sequence[RunEnd], jobs: set[int], shards: set[int]) -> list[bool]:
    """Whether each end's release applied, from the ordinals of the job ends and the shard
    ends applied."""
    applied, job_n, shard_n = [], 0, 0
    for finish in finishes:
        if finish.shard is None:
            job_n += 1
            applied.append(job_n in jobs)
        else:
            shard_n += 1
            applied.append(shard_n in shards)
    return applied


async def _end_shards(tx: Tx, finishes: Sequence[RunEnd]) -> set[int]:
    ends = [f.execution for f in finishes if f.shard is not None]
    rows = await tx.fetch(
        SHARD_END_SQL,
        [e.job_id for e in ends],
        [e.token for e in ends],
        [int(e.status is Status.ABANDONED) for e in ends],
        [summary_text(e.summary()) for e in ends],
    )
    return {int(row["n"]) for row in rows}


async def _settle_and_redrive(tx: Tx, finishes: Sequence[RunEnd], applied: Sequence[bool]) -> None:
    settles = [f.execution for f in finishes if f.settles]
    if settles:
        await tx.execute(
            SETTLE_SQL,
            str(DeadLetter.REDRIVEN),
            [e.job_id for e in settles],
            [micros(e.scheduled_at) for e in settles],
            [e.shard for e in settles],
            [e.id for e in settles],
            UNHANDLED,
        )
    # A run fenced off (its lease lapsed, the occurrence is another instance's now) queues no
    # re-drive: that instance runs the occurrence, and a re-drive would run it again. Its dead
    # letter is `open` for ops, not left `redriving` for ever with nothing queued. (A run
    # without a token held no lease to lose.)
    held = [
        released or f.execution.token is None for f, released in zip(finishes, applied, strict=True)
    ]
    redrives = [f.redrive for f, still in zip(finishes, held, strict=True) if f.redrive and still]
    fenced_off = [
        f.execution.id for f, still in zip(finishes, held, strict=True) if f.redrive and not still
    ]
    if fenced_off:
        await tx.execute(
            "UPDATE executions SET dead_letter = $1 WHERE id = ANY ($2::text[])",
            str(DeadLetter.OPEN),
            fenced_off,
        )
    if redrives:
        args = Args()
        rows = [request_row(request) for request, _ in redrives]
        queue = insert_rows(args, "run_requests", REQUEST_COLUMNS, rows, f"{IGNORE} RETURNING id")
        queued = {row["id"] for row in await tx.fetch(queue, *args.values)}
        for request, change in redrives:
            if request.id in queued:
                await record_change_row(tx, change)


class PostgresCompletion(PostgresTables):
    """The completion of PostgresStore."""

    async def cancel_requests(self, execution_ids: Sequence[str]) -> list[CancelRequest]:
        if not execution_ids:
            return []
        sql = "SELECT * FROM cancel_requests WHERE execution_id = ANY ($1::text[])"
        return [_cancel_request(row) for row in await self._fetch(sql, list(execution_ids))]

    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        sql = "UPDATE jobs SET lease_until = $1 WHERE id = $2 AND lease_token = $3"
        return bool(await self._execute(sql, micros(until), job_id, token))

    async def write_ends(
        self, finishes: Sequence[RunEnd], *, event_source: str | None = None
    ) -> list[bool]:
        if not finishes:
            return []

        async def finish(tx: Tx) -> list[bool]:
            return await write_ends_in(tx, finishes, event_source)

        return await (
            self._run(finish) if _more_than_one_statement(finishes) else self._single(finish)
        )


def _more_than_one_statement(finishes: Sequence[RunEnd]) -> bool:
    return any(f.shard is not None or f.settles or f.redrive for f in finishes)


async def write_ends_in(tx: Tx, finishes: Sequence[RunEnd], event_source: str | None) -> list[bool]:
    """CompletionStore.write_ends within the caller's transaction: one statement, and more
    only for ends that end shards, settle dead letters or queue re-drives."""
    args = Args()
    sql = ends_sql(args, finishes, event_source)
    jobs = {int(row["n"]) for row in await tx.fetch(sql, *args.values)}
    if not _more_than_one_statement(finishes):
        return _applied(finishes, jobs, set())
    shards = await _end_shards(tx, finishes) if any(f.shard for f in finishes) else set()
    applied = _applied(finishes, jobs, shards)
    await _settle_and_redrive(tx, finishes, applied)
    return applied


def _cancel_request(row: Row) -> CancelRequest:
    requested_at = from_micros(row["requested_at"])
    assert requested_at is not None
    return CancelRequest(
        execution_id=row["execution_id"],
        requested_by=row["requested_by"],
        reason=row["reason"],
        requested_at=requested_at,
    )
