"""One retention pass on FerretDB: how long pruning executions takes over a realistic backlog.

Fills a database of its own with `--executions` finished executions over `--jobs` jobs, spread
evenly over `--days` days up to now (half the jobs run three times as often as the other half, so
that a bound per job has something to prune), then times one housekeeping pass of executions
as scheduler/maintenance/retention.py runs it (batches of BATCH_SIZE, at most
MAX_BATCHES_PER_PASS) for each retention in turn, on a fresh copy of the data each: `--keep-days`
days (no count bound), then `--keep-per-job` per job (no age bound). Per pass: its wall time,
what it deleted, and its slowest store call and its slowest round trip (one over the client's
5 s socket timeout fails the pass: "retention.failed").
The first pass after the store opens, the next (a minute later), then passes a minute apart until
the backlog is gone (`passes_to_catch_up`, the first two included), and one more: `steady_pass`.

    python -m bench.retention [--executions 50000] [--jobs 500] [--days 3]
                              [--keep-days 1] [--keep-per-job 100]
                              [--mongodb-url mongodb://127.0.0.1:27017/]

It uses only the Store API, so the same file times another checkout's store (PYTHONPATH=that
checkout). Prints one JSON line per pass. Measured, never asserted. Needs FerretDB
(`make services`); drops its database afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pymongo import AsyncMongoClient, monitoring

from tickd.scheduler.maintenance.retention import BATCH_SIZE, MAX_BATCHES_PER_PASS
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports.backends import Retention, StoreError
from tickd.scheduler.store.mongodb import MongoStore

INSERT_BATCH = 1000


class SlowestCommand(monitoring.CommandListener):
    """The longest round trip (command) since the last reset: what the socket timeout bounds."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.seconds = max(self.seconds, event.duration_micros / 1e6)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.seconds = max(self.seconds, event.duration_micros / 1e6)


SLOWEST = SlowestCommand()
MAX_CATCH_UP_PASSES = 10


def executions(total: int, jobs: int, days: int, now: datetime) -> Iterator[Execution]:
    """`total` runs over `jobs` jobs: the even-numbered jobs three times as often as the odd."""
    weights = [3 if i % 2 == 0 else 1 for i in range(jobs)]
    per_weight = total / sum(weights)
    span = timedelta(days=days)
    for i, weight in enumerate(weights):
        runs = round(per_weight * weight)
        step = span / runs
        offset = step * (i / jobs)  # the jobs' runs interleaved, not all at one instant
        for n in range(runs):
            at = now - span + offset + step * n
            yield Execution(
                job_id=f"job-{i:04}",
                job_name=f"job {i}",
                handler="noop",
                scheduled_at=at,
                started_at=at,
                finished_at=at + timedelta(seconds=1),
                duration_ms=1000,
                status=Status.SUCCESS,
                attempts=1,
            )


async def fill(store: MongoStore, args: argparse.Namespace, now: datetime) -> int:
    batch: list[Execution] = []
    written = 0
    for execution in executions(args.executions, args.jobs, args.days, now):
        batch.append(execution)
        if len(batch) == INSERT_BATCH:
            await store.insert_executions(batch)
            written += len(batch)
            batch = []
    await store.insert_executions(batch)
    return written + len(batch)


async def one_pass(store: MongoStore, retention: Retention, now: datetime) -> dict[str, Any]:
    """As Housekeeper._in_batches: batches until one deletes fewer than BATCH_SIZE."""
    deleted, slowest, failed = 0, 0.0, None
    SLOWEST.seconds = 0.0
    started = time.perf_counter()
    for _ in range(MAX_BATCHES_PER_PASS):
        call = time.perf_counter()
        try:
            count = await store.prune_executions(retention, now, limit=BATCH_SIZE)
        except StoreError as exc:  # what the housekeeper logs as retention.failed
            failed = str(exc)
            break
        finally:
            slowest = max(slowest, time.perf_counter() - call)
        deleted += count
        if count < BATCH_SIZE:
            break
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "deleted": deleted,
        "slowest_call_s": round(slowest, 2),
        "slowest_round_trip_s": round(SLOWEST.seconds, 2),
        "failed": failed,
    }


def url_of(base: str, database: str) -> str:
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def measure(args: argparse.Namespace, retention: Retention, label: str) -> dict[str, Any]:
    name = f"tickd_bench_retention_{uuid.uuid4().hex[:8]}"
    admin: AsyncMongoClient[Any] = AsyncMongoClient(args.mongodb_url)
    now = datetime.now(UTC).replace(microsecond=0)
    try:
        store = MongoStore(url_of(args.mongodb_url, name))
        await store.open()
        try:
            filled_at = time.perf_counter()
            written = await fill(store, args, now)
            fill_s = time.perf_counter() - filled_at
        finally:
            await store.close()
        # Reopened, as a daemon starting on an existing database: the open's own work is timed.
        store = MongoStore(url_of(args.mongodb_url, name))
        opened_at = time.perf_counter()
        await store.open()
        open_s = time.perf_counter() - opened_at
        try:
            first = await one_pass(store, retention, now)
            second = await one_pass(store, retention, now + timedelta(minutes=1))
            caught_up = await until_caught_up(store, retention, now + timedelta(minutes=2), second)
        finally:
            await store.close()
    finally:
        await admin.drop_database(name)
        await admin.close()
    return {
        "retention": label,
        "executions": written,
        "fill_s": round(fill_s, 1),
        "open_s": round(open_s, 2),
        "first_pass": first,
        "next_pass": second,
        **caught_up,
    }


async def until_caught_up(
    store: MongoStore, retention: Retention, now: datetime, last: dict[str, Any]
) -> dict[str, Any]:
    """Passes a minute apart until one finds less than a pass's worth, then one more: what a
    pass costs once the backlog is gone (a minute's worth of work, here none)."""
    passes = 2  # the first and the next (`last`)
    full = BATCH_SIZE * MAX_BATCHES_PER_PASS
    while passes < MAX_CATCH_UP_PASSES and not last["failed"] and last["deleted"] >= full:
        last = await one_pass(store, retention, now)
        now += timedelta(minutes=1)
        passes += 1
    caught_up = None if last["failed"] else passes
    return {"passes_to_catch_up": caught_up, "steady_pass": await one_pass(store, retention, now)}


async def main(args: argparse.Namespace) -> None:
    monitoring.register(SLOWEST)  # for the clients created from here on
    cases = [
        (Retention(days=args.keep_days, max_per_job=0), f"{args.keep_days} day(s)"),
        (Retention(days=0, max_per_job=args.keep_per_job), f"{args.keep_per_job} per job"),
    ]
    for retention, label in cases:
        print(json.dumps(await measure(args, retention, label)), flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=50_000)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--keep-days", type=int, default=1)
    parser.add_argument("--keep-per-job", type=int, default=100)
    parser.add_argument("--mongodb-url", default="mongodb://127.0.0.1:27017/")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
