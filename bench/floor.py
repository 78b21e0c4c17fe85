"""The bare floor of a store: the batched store calls of N runs, no engine around them.

Per batch (100 on SQLite, 40 on FerretDB, its safe bulk size): the due query and the claim (one
statement on PostgreSQL, which claims as it reads, as the engine does), the executions recorded
as running, and their ends (write_ends: executions final, jobs
advanced, leases cleared). What the engine does beyond this (lock, planning, workers, metrics,
events, logs, and the ticks' other queries) is the engine's cost; this is the ceiling.

Round trips are counted too: MongoDB commands through pymongo's command monitoring, PostgreSQL
transactions from the server's own statistics (pg_stat_database.xact_commit), SQLite
transactions (one store call, one trip to the store's thread) and statements (the sqlite3 trace
callback: each execution of a statement, every row of an executemany). On SQLite the counted run
is a second run, since a Python callback per statement slows the floor it would be counting.

    python -m bench.floor --stack embedded|real|postgresql --jobs 30000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import monitoring

from bench.stack import STACKS, Stack, embedded_stack, postgresql_transactions
from bench.trial import insert_jobs
from tickd.scheduler.model import Execution, ExecutionSummary, IntervalSchedule, Job, Status
from tickd.scheduler.ports.backends import Advance, Claim, LeaseTerms, RunEnd, Store
from tickd.scheduler.store import open_store
from tickd.scheduler.store.sqlite import SQLiteStore


class CommandCounter(monitoring.CommandListener):
    """Every command pymongo sends while `counting` (registered once, for every client)."""

    def __init__(self) -> None:
        self.counting = False
        self.commands: Counter[str] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.counting:
            self.commands[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


COMMANDS = CommandCounter()
monitoring.register(COMMANDS)


def due_jobs(count: int, now: datetime, prefix: str) -> list[Job]:
    return [
        Job(
            name=f"{prefix}-{i:06}",
            handler="noop",
            schedule=IntervalSchedule(every_seconds=3600),
            next_run_at=now - timedelta(seconds=1),
        )
        for i in range(count)
    ]


async def store_floor(store: Store, count: int, batch: int) -> float:
    """The store calls of `count` runs, batched as the dispatcher batches them, no engine.

    Returns the seconds they took (the jobs are written before the clock starts)."""
    now = datetime.now(UTC)
    await store.insert_missing_jobs(due_jobs(count, now, "floor"))
    started = time.perf_counter()
    await floor_calls(store, now, batch)
    return time.perf_counter() - started


async def floor_calls(
    store: Store,
    now: datetime,
    batch: int,
    spent: dict[str, float] | None = None,
    deadline: float = float("inf"),
) -> int:
    """Runs every due job through the store calls of a run, or as many as fit before
    `deadline` (time.perf_counter()); returns how many ran. `spent` gets the seconds of each
    kind of call."""
    spent = {} if spent is None else spent
    runs = 0
    while time.perf_counter() < deadline:
        clock = time.perf_counter()
        claimed = await _due_and_claimed(store, now, batch, spent, clock)
        clock = time.perf_counter()
        if not claimed:
            return runs
        running = [_running(j, now) for j in claimed]
        await store.insert_executions(running)
        clock = _lap(spent, "record", clock)
        done = [
            replace(r, status=Status.SUCCESS, finished_at=now, duration_ms=0.0) for r in running
        ]
        await store.write_ends([RunEnd(d, _advance(d, now)) for d in done])
        _lap(spent, "finish", clock)
        runs += len(done)
    return runs


async def _due_and_claimed(
    store: Store, now: datetime, batch: int, spent: dict[str, float], clock: float
) -> list[Job]:
    """The due jobs claimed: in one call where the store claims as it reads (as the engine
    does), else read, then claimed."""
    lease = LeaseTerms(owner="floor", margin_seconds=60.0)
    claimed = await store.claim_due_jobs(now, now, batch, lease=lease)
    if claimed is not None:
        _lap(spent, "due_and_claim", clock)
        return claimed
    jobs = await store.due_jobs(now, batch)
    clock = _lap(spent, "due", clock)
    if not jobs:
        return []
    claims = [
        Claim(
            job_id=j.id,
            revision=j.revision,
            next_run_at=j.next_run_at or now,
            owner="floor",
            until=now + timedelta(minutes=1),
        )
        for j in jobs
    ]
    claimed = await store.claim_jobs(claims, now)
    _lap(spent, "claim", clock)
    return claimed


def _lap(spent: dict[str, float], step: str, since: float) -> float:
    now = time.perf_counter()
    spent[step] = spent.get(step, 0.0) + now - since
    return now


def _running(job: Job, now: datetime) -> Execution:
    assert job.lease is not None
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=now,
        status=Status.RUNNING,
        started_at=now,
        owner="floor",
        token=job.lease.token,
    )


def _advance(execution: Execution, now: datetime) -> Advance:
    return Advance(
        revision=1,
        next_run_at=now + timedelta(hours=1),
        enabled=True,
        consecutive_failures=0,
        paused_reason=None,
        last_execution=ExecutionSummary(
            execution_id=execution.id, status=Status.SUCCESS, finished_at=now
        ),
    )


async def _timed(
    stack: Stack, count: int, spent: dict[str, float], limit_seconds: float
) -> tuple[int, float, dict[str, int]]:
    """Runs done (all `count`, unless `limit_seconds` ran out first), the seconds they took,
    and the round trips counted (MongoDB and PostgreSQL: free there)."""
    now = datetime.now(UTC)
    await insert_jobs(stack, due_jobs(count, now, "floor"))
    store = open_store(stack.store_url)
    await store.open()
    try:
        COMMANDS.commands.clear()
        COMMANDS.counting = True
        committed = await postgresql_transactions(stack)
        started = time.perf_counter()
        deadline = started + limit_seconds
        runs = await floor_calls(store, now, stack.floor_batch, spent, deadline)
        seconds = time.perf_counter() - started
    finally:
        COMMANDS.counting = False
        await store.close()
    if committed is not None:
        after = await postgresql_transactions(stack)
        COMMANDS.commands["transactions"] = (after or 0) - committed
    return runs, seconds, dict(COMMANDS.commands)


async def _sqlite_counted(stack: Stack, count: int) -> dict[str, int]:
    """SQLite's round trips for `count` runs, in a run of their own."""
    now = datetime.now(UTC)
    await insert_jobs(stack, due_jobs(count, now, "counted"))
    store = SQLiteStore(stack.store_url)
    await store.open()
    counts: Counter[str] = Counter()
    trip = store._in_thread

    async def counted_trip(fn: Any, *, at_once: bool = False) -> Any:
        counts["transactions"] += 1
        return await trip(fn, at_once=at_once)

    def trace(db: Any) -> None:
        db.set_trace_callback(lambda _sql: counts.update(("statements",)))

    try:
        await store._in_thread(trace)
        if store._loop_db is not None:
            trace(store._loop_db)
        store._in_thread = counted_trip  # type: ignore[method-assign]
        await floor_calls(store, now, stack.floor_batch)
    finally:
        await store.close()
    return dict(counts)


def run_floor(stack: Stack, count: int, limit_seconds: float = 600.0) -> dict[str, Any]:
    """The floor on a fresh stack (cleaned up afterwards), stopped after `limit_seconds`."""
    kind = stack.kind
    try:
        spent: dict[str, float] = {}
        runs, seconds, commands = asyncio.run(_timed(stack, count, spent, limit_seconds))
        per_run: dict[str, Any]
        if stack.kind == "embedded":
            stack.cleanup()
            stack = embedded_stack()
            trips = asyncio.run(_sqlite_counted(stack, count))
            per_run = {f"{k}_per_execution": round(v / count, 3) for k, v in trips.items()}
            ops = per_run.get("transactions_per_execution")
        else:
            per_run = {
                "commands_per_execution": round(sum(commands.values()) / max(runs, 1), 3),
                "commands": commands,
            }
            ops = per_run["commands_per_execution"]
    finally:
        stack.cleanup()
    return {
        "stack": kind,
        "jobs": count,
        "batch": stack.floor_batch,
        "executed": runs,
        "timed_out": runs < count,
        "seconds": round(seconds, 2),
        "executions_per_s": round(runs / seconds),
        "store_ops_per_execution": ops,
        "seconds_by_call": {step: round(s, 2) for step, s in spent.items()},
        **per_run,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", choices=tuple(STACKS), default="embedded")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--limit-seconds", type=float, default=600.0)
    args = parser.parse_args()
    stack = STACKS[args.stack]()
    print(json.dumps(run_floor(stack, args.jobs, args.limit_seconds)))


if __name__ == "__main__":
    main()
