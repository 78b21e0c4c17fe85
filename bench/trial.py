"""One trial: a fresh stack, jobs written into its store before the daemon starts, the daemon up
before they fall due, then watched (bounded) until the work is done, stopped, and counted from the
execution records. Burst and steady load are both trials; they differ in their jobs and in when
they are done."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections import Counter
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
LOCK_CONTENTION = "tickd_lock_contention_total"
# Jobs per insert_missing_jobs call: one transaction (SQLite) or one insert command (FerretDB).
INSERT_BATCH = 1000
POLL_SECONDS = 0.5
READY_SECONDS = 60.0
# The earliest a daemon reads jobs due at T: its lookahead (2 s) and a tick (1 s) before. Store
# operations are counted from there: before it the daemons idle for as long as the trial's lead
# lasts, and their idle ticks are reported apart (idle_store_ops_per_s), not charged to the runs.
FIRST_READ_SECONDS = 3.0


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
    store_operations: float | None = None  # from the first read of the work, if counted
    idle_store_ops_per_s: float | None = None  # before it, all daemons together
    lock_contention: float | None = None  # locks refused during the watch, all daemons
    peak_rss_mb: float | None = None
    log_tail: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    fetches: list[list[float]] = field(default_factory=list)  # if timed (bench/timed_daemon.py)
    # If timed: each daemon's store calls by method, while its store operations were counted.
    store_calls: list[dict[str, int]] = field(default_factory=list)


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
    daemons: int = 1,
    timed: bool = False,
) -> Observed:
    """Start the daemons (`daemons` instances on the one store), wait until `done` (or the
    timeout, or no progress for `stall_seconds`), stop them, read the records of the jobs named
    `name`-... The metrics are summed over the daemons; with `timed`, each fetch and claim is
    timed too (bench/timed_daemon.py)."""
    seen = Observed()
    counted_from = counted_until = 0.0
    with contextlib.ExitStack() as started:
        fleet = [
            started.enter_context(
                Daemon(stack, name, log_level=log_level, instance=f"bench-{number}", timed=timed)
            )
            for number in range(1, daemons + 1)
        ]
        seen.ready = all(daemon.wait_ready(READY_SECONDS) for daemon in fleet)
        seen.ready_margin_s = round(due - time.time(), 2) if seen.ready else None
        spy = _profiler(fleet[0].pid, profile) if (profile and seen.ready) else None
        try:
            if seen.ready:
                seen.idle_store_ops_per_s = _idle_until(fleet, due - FIRST_READ_SECONDS)
                counted_from = time.time()
                before = _summed(fleet, STORE_OPERATIONS), _summed(fleet, LOCK_CONTENTION)
                _wait(fleet, seen, due, done, timeout_seconds, stall_seconds)
                after = _summed(fleet, STORE_OPERATIONS), _summed(fleet, LOCK_CONTENTION)
                counted_until = time.time()
                if after[0] is not None:
                    seen.store_operations = after[0] - (before[0] or 0.0)
                if after[1] is not None:
                    seen.lock_contention = after[1] - (before[1] or 0.0)
            rss = [daemon.peak_rss_mb() for daemon in fleet]
            seen.peak_rss_mb = max((mb for mb in rss if mb is not None), default=None)
        finally:
            if spy is not None:
                _stop_profiler(spy)
            for daemon in fleet:
                daemon.stop()
        seen.log_tail = [line for daemon in fleet for line in daemon.log_tail()]
        seen.fetches = [fetch for daemon in fleet for fetch in daemon.fetches()]
        if seen.store_operations is not None:
            seen.store_calls = [
                _calls_between(daemon.store_calls(), counted_from, counted_until)
                for daemon in fleet
            ]
    seen.records = read_records(stack, name + "-")
    return seen


def _idle_until(fleet: Sequence[Daemon], until: float) -> float | None:
    """Wait until `until` (the daemons idle: nothing falls due before it); their store
    operations a second meanwhile, if they count them and it is a second or more away."""
    started, ops = time.time(), _summed(fleet, STORE_OPERATIONS)
    if until - started < 1.0:
        return None
    time.sleep(until - started)
    after = _summed(fleet, STORE_OPERATIONS)
    if ops is None or after is None:
        return None
    return round((after - ops) / (time.time() - started), 1)


def _calls_between(calls: Sequence[tuple[float, str]], start: float, end: float) -> dict[str, int]:
    """The calls begun between `start` and `end`, by method, the most made first."""
    counted = Counter(name for began, name in calls if start <= began <= end)
    return dict(counted.most_common())


def _summed(fleet: Sequence[Daemon], metric: str) -> float | None:
    """A metric summed over the daemons; None when none of them exposes it."""
    texts = [daemon.metrics() for daemon in fleet]
    if not any(has_metric(text, metric) for text in texts):
        return None
    return sum(metric_sum(text, metric) or 0.0 for text in texts)


def _wait(
    fleet: Sequence[Daemon], seen: Observed, due: float, done: Done, timeout: float, stall: float
) -> None:
    deadline = due + timeout
    progress_at = time.time()
    while True:
        time.sleep(POLL_SECONDS)
        now = time.time()
        counted = _summed(fleet, EXECUTIONS) or 0.0
        if counted > seen.finished_seen:
            seen.finished_seen, progress_at = counted, now
        if done(seen.finished_seen, now - due):
            return
        stalled = now > due and now - max(progress_at, due) > stall
        exited = any(d.process is None or d.process.poll() is not None for d in fleet)
        if now > deadline or stalled or exited:
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
        "idle_store_ops_per_s": seen.idle_store_ops_per_s,
        "lock_contention": seen.lock_contention,
        "peak_rss_mb": seen.peak_rss_mb,
        **({"store_calls": seen.store_calls} if any(seen.store_calls) else {}),
        **({} if seen.ready and not seen.timed_out else {"daemon_log_tail": seen.log_tail}),
    }
