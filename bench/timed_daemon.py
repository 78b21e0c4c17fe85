"""The daemon as `python -m tickd` runs it, with its dispatcher's fetches and claims timed: what
a claim costs, which the store's operation counts alone do not say. The daemon's own code is
unchanged; its Fetcher.fetch, Fetcher._due_jobs (one due read of the store each),
Fetcher._claimed_in_lanes (one read of every lane, where the store offers it) and Claimer.claim
are wrapped here, before it starts.

Each fetch that read any job is one line of the file named by BENCH_FETCH_LOG, written when the
daemon has stopped: `[began (epoch s), fetch s, claim s, jobs read, runs kept, due reads]`.

Every call of the job store's public methods is counted too, by name, so a trial can say which
part of the daemon makes its store operations (the relay's polls, an idle tick's reads). A call
made inside another is not counted again. With BENCH_CALL_LOG, each call is one line of that
file, written when the daemon has stopped: `[began (epoch s), method]`.

    BENCH_FETCH_LOG=fetches.jsonl BENCH_CALL_LOG=calls.jsonl \
        python -m bench.timed_daemon --config tickd.toml run
"""

from __future__ import annotations

import contextvars
import inspect
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickd.cli import main as tickd_main
from tickd.scheduler.run.claim import Claimer
from tickd.scheduler.run.fetch import Fetcher

FETCH_LOG = "BENCH_FETCH_LOG"
CALL_LOG = "BENCH_CALL_LOG"
# True inside a counted store call: the calls it makes are part of it.
_IN_STORE_CALL = contextvars.ContextVar("in_store_call", default=False)


@dataclass
class FetchLog:
    """The fetches that read anything, each with the claim that followed it."""

    lines: list[list[float]] = field(default_factory=list)
    due_reads: int = 0  # of the fetch under way

    def write(self, path: Path) -> None:
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))


def timing(log: FetchLog) -> None:
    """Wrap the fetch, its due reads and the claim (one dispatcher a process: one fetch at a
    time)."""
    fetch, due_jobs, claim = Fetcher.fetch, Fetcher._due_jobs, Claimer.claim
    claimed_in_lanes = Fetcher._claimed_in_lanes

    async def timed_fetch(self: Fetcher, *args: Any, **kwargs: Any) -> Any:
        log.due_reads = 0
        began, start = time.time(), time.perf_counter()
        fetched = await fetch(self, *args, **kwargs)
        seconds = time.perf_counter() - start
        if fetched is not None and fetched.read:
            log.lines.append([began, seconds, 0.0, fetched.read, len(fetched.runs), log.due_reads])
        return fetched

    async def counted(self: Fetcher, *args: Any, **kwargs: Any) -> Any:
        log.due_reads += 1
        return await due_jobs(self, *args, **kwargs)

    async def counted_lanes(self: Fetcher, *args: Any, **kwargs: Any) -> Any:
        claimed = await claimed_in_lanes(self, *args, **kwargs)
        log.due_reads += claimed is not None  # every lane in one read (PostgreSQL)
        return claimed

    async def timed_claim(self: Claimer, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        won = await claim(self, *args, **kwargs)
        if log.lines:
            log.lines[-1][2] += time.perf_counter() - start
        return won

    _replace(Fetcher, "fetch", timed_fetch)
    _replace(Fetcher, "_due_jobs", counted)
    _replace(Fetcher, "_claimed_in_lanes", counted_lanes)
    _replace(Claimer, "claim", timed_claim)


def counting_store_calls(calls: list[list[Any]]) -> None:
    """Wrap every public coroutine method of the three job stores: each outermost call appends
    [began, name] to `calls`."""
    from tickd.scheduler.store.mongodb import MongoStore
    from tickd.scheduler.store.postgresql import PostgresStore
    from tickd.scheduler.store.sqlite import SQLiteStore

    for cls in (MongoStore, PostgresStore, SQLiteStore):
        for name, method in inspect.getmembers(cls, inspect.iscoroutinefunction):
            if not name.startswith("_"):
                setattr(cls, name, _counted(method, name, calls))


def _counted(
    method: Callable[..., Awaitable[Any]], name: str, calls: list[list[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        if _IN_STORE_CALL.get():
            return await method(*args, **kwargs)
        calls.append([time.time(), name])
        inside = _IN_STORE_CALL.set(True)
        try:
            return await method(*args, **kwargs)
        finally:
            _IN_STORE_CALL.reset(inside)

    return call


def _replace(cls: type, name: str, wrapper: Callable[..., Awaitable[Any]]) -> None:
    if not callable(getattr(cls, name, None)):  # renamed in the daemon: fail loudly, not silently
        raise AttributeError(f"{cls.__name__}.{name} is gone: bench/timed_daemon.py needs it")
    setattr(cls, name, wrapper)


def main() -> int:
    log, calls = FetchLog(), list[list[Any]]()
    timing(log)
    counting_store_calls(calls)
    try:
        return tickd_main(sys.argv[1:])
    finally:
        if path := os.environ.get(FETCH_LOG):
            log.write(Path(path))
        if path := os.environ.get(CALL_LOG):
            Path(path).write_text("".join(json.dumps(call) + "\n" for call in calls))


if __name__ == "__main__":
    sys.exit(main())
