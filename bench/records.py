"""What happened, from the execution records in the store (not from the daemon's own account).

A run's fire lag is its handler's start minus the time it was due, as tickd_fire_lag_seconds
defines it; the record holds when the run ended and how long the handler took, so the handler
started at finished_at - duration_ms.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from pymongo import MongoClient

from bench.stack import MONGO_URL, POSTGRESQL_URL, Stack

RAN = ("success", "failed", "timeout")


@dataclass(frozen=True, slots=True)
class Record:
    job_id: str
    job_name: str
    scheduled_at: float  # epoch seconds
    handler_start: float | None  # epoch seconds; None while running or when never started
    finished_at: float | None
    status: str


def read_records(stack: Stack, name_prefix: str) -> list[Record]:
    path = stack.sqlite_path
    if path is not None:
        return _sqlite_records(str(path), name_prefix)
    if stack.postgresql_database is not None:
        return asyncio.run(_postgresql_records(stack.postgresql_database, name_prefix))
    assert stack.mongo_database is not None
    return _mongo_records(stack.mongo_database, name_prefix)


def _sqlite_records(path: str, prefix: str) -> list[Record]:
    sql = (
        "SELECT job_id, job_name, scheduled_at, finished_at, duration_ms, status "
        "FROM executions WHERE job_name >= ? AND job_name < ?"
    )
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as db:
        rows = db.execute(sql, (prefix, prefix + "\uffff")).fetchall()
    return [_record(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]


async def _postgresql_records(database: str, prefix: str) -> list[Record]:
    sql = (
        "SELECT job_id, job_name, scheduled_at, finished_at, duration_ms, status "
        "FROM executions WHERE job_name >= $1 AND job_name < $2"
    )
    connection = await asyncpg.connect(POSTGRESQL_URL + database, timeout=5)
    try:
        rows = await connection.fetch(sql, prefix, prefix + "\uffff")
    finally:
        await connection.close()
    return [_record(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]


def _mongo_records(database: str, prefix: str) -> list[Record]:
    fields = ["job_id", "job_name", "scheduled_at_us", "finished_at_us", "duration_ms", "status"]
    client: MongoClient[dict[str, Any]] = MongoClient(
        MONGO_URL, serverSelectionTimeoutMS=3000, socketTimeoutMS=120_000
    )
    with client:
        found = client[database]["executions"].find(
            {"job_name": {"$gte": prefix, "$lt": prefix + "\uffff"}},
            projection=dict.fromkeys(fields, 1),
            batch_size=5000,
        )
        docs: list[dict[str, Any]] = list(found)
    return [
        _record(
            d["job_id"],
            d["job_name"],
            d["scheduled_at_us"],
            d.get("finished_at_us"),
            d.get("duration_ms"),
            d["status"],
        )
        for d in docs
    ]


def _record(
    job_id: str,
    job_name: str,
    scheduled_us: int,
    finished_us: int | None,
    duration_ms: float | None,
    status: str,
) -> Record:
    finished = None if finished_us is None else finished_us / 1e6
    started = None
    if finished is not None and duration_ms is not None and status in RAN:
        started = finished - duration_ms / 1000
    return Record(job_id, job_name, scheduled_us / 1e6, started, finished, status)


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Nearest rank: the smallest value with at least `fraction` of the values at or below it."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def lag_summary(records: Sequence[Record]) -> dict[str, float | int | None]:
    """Fire lag in milliseconds, of the runs that started."""
    lags = sorted(r.handler_start - r.scheduled_at for r in records if r.handler_start is not None)
    return {
        "runs": len(lags),
        "lag_p50_ms": _ms(percentile(lags, 0.50)),
        "lag_p99_ms": _ms(percentile(lags, 0.99)),
        "lag_max_ms": _ms(lags[-1] if lags else None),
    }


def run_twice(records: Sequence[Record]) -> int:
    """Runs beyond the first of one occurrence of one job."""
    ran = [(r.job_id, r.scheduled_at) for r in records if r.status in RAN]
    return len(ran) - len(set(ran))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
