"""One trial: a fresh stack, jobs written into its store before the daemon starts, the daemon up
before they fall due, then watched (bounded) until the work is done, stopped, and counted from the
execution records. Burst and steady load are both trials; they differ in their jobs and in when
they are done."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.daemon import Daemon, has_metric, metric_sum
from bench.records import Record, read_records
from bench.stack import Stack
from tickd.scheduler.model import Job
from tickd.scheduler.store import open_store

STORE_OPERATIONS = "tickd_store_operations_total"
EXECUTIONS = "tickd_executions_total"
# Jobs per insert_missing_jobs call: one transaction (SQLite) or one insert command (FerretDB).
INSERT_BATCH = 1000
POLL_SECONDS = 0.5
READY_SECONDS = 60.0


async def insert_jobs(stack: Stack, jobs: Sequence[Job]) -> None:
    store = open_store(stack.store_url)
    await store.open()
    try:
        for start in range(0, len(jobs), INSERT_BATCH):
            await store.insert_missing_jobs(jobs[start : start + INSERT_BATCH])
    finally:
        await store.close()


def timed_insert(stack: Stack, jobs: Sequence[Job]) -> float:
    started = time.monotonic()
    asyncio.run(insert_jobs(stack, jobs))
    return time.monotonic() - started


def at(epoch_seconds: float) -> datetime:
    return datetime.fromtimestamp(epoch_seconds, UTC)


@dataclass
class Observed:
    """What the trial saw of the daemon while it ran (the records are read after it stopped)."""

    ready: bool = False
    ready_margin_s: float | None = None  # how long before the jobs fell due the daemon was ready
    finished_seen: float = 0.0  # executions the daemon counted (tickd_executions_total)
    timed_out: bool = False
    store_operations: float | None = None  # during the watch, if the daemon counts them
    peak_rss_mb: float | None = None
    log_tail: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


Done = Callable[[float, float], bool]  # (executions counted so far, seconds since due) -> done?


def watch(
    stack: Stack,
    name: str,
    *,
    due: float,
    done: Done,
    timeout_seconds: float,
    stall_seconds: float,
    log_level: str,
    profile: Path | None = None,
) -> Observed:
    """Start the daemon, wait until `done` (or the timeout, or no progress for `stall_seconds`),
    stop it, read the records of the jobs named `name`-..."""
    seen = Observed()
    with Daemon(stack, name, log_level=log_level) as daemon:
        seen.ready = daemon.wait_ready(READY_SECONDS)
        seen.ready_margin_s = round(due - time.time(), 2) if seen.ready else None
        spy = _profiler(daemon.pid, profile) if (profile and seen.ready) else None
        try:
            if seen.ready:
                before = metric_sum(daemon.metrics(), STORE_OPERATIONS)
                _wait(daemon, seen, due, done, timeout_seconds, stall_seconds)
                text = daemon.metrics()
                after = metric_sum(text, STORE_OPERATIONS)
                if has_metric(text, STORE_OPERATIONS) and after is not None:
                    seen.store_operations = after - (before or 0.0)
            seen.peak_rss_mb = daemon.peak_rss_mb()
        finally:
            if spy is not None:
                _stop_profiler(spy)
            daemon.stop()
        seen.log_tail = daemon.log_tail()
    seen.records = read_records(stack, name + "-")
    return seen


def _wait(
    daemon: Daemon, seen: Observed, due: float, done: Done, timeout: float, stall: float
) -> None:
    deadline = due + timeout
    progress_at = time.time()
    while True:
        time.sleep(POLL_SECONDS)
        now = time.time()
        counted = metric_sum(daemon.metrics(), EXECUTIONS) or 0.0
        if counted > seen.finished_seen:
            seen.finished_seen, progress_at = counted, now
        if done(seen.finished_seen, now - due):
            return
        stalled = now > due and now - max(progress_at, due) > stall
        if now > deadline or stalled or daemon.process is None or daemon.process.poll() is not None:
            seen.timed_out = True
            return


def _profiler(pid: int, output: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the daemon (collapsed stacks, one line per stack: flamegraph input)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.Popen(
            [
                _py_spy(),
                "record",
                "--pid",
                str(pid),
                "--format",
                "raw",
                "--nonblocking",
                "--rate",
                "200",
                "-o",
                str(output),
            ],
            stdout=subprocess.DEVNULL,
            stderr=output.with_suffix(".log").open("wb"),
        )
    except OSError:
        return None


def _py_spy() -> str:
    beside = Path(sys.executable).parent / "py-spy"  # installed into the venv by `make bench`
    return str(beside) if beside.exists() else "py-spy"


def _stop_profiler(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        spy.wait(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait(timeout=10)


def observed_fields(seen: Observed, executed: int) -> dict[str, Any]:
    ops = seen.store_operations
    return {
        "daemon_ready": seen.ready,
        "ready_before_due_s": seen.ready_margin_s,
        "timed_out": seen.timed_out,
        "store_ops_per_execution": round(ops / executed, 3) if ops and executed else None,
        "peak_rss_mb": seen.peak_rss_mb,
        **({} if seen.ready and not seen.timed_out else {"daemon_log_tail": seen.log_tail}),
    }
