"""No-op executions per second through the whole engine, against the store's own floor.

The engine's cost per run is the store's cost per run plus its own (locking, planning, events,
metrics, the worker pool). So the peer, measured in the same process on a store of the same kind,
is the bare sequence of store calls one run needs without an engine around them (bench/floor.py);
the ratio says how much of a run's time is the engine's. In one process, through the engine's
drain(), not the daemon: `python -m bench.run` (make bench) measures the daemon as users run it.

    python -m bench.engine_throughput [--jobs 2000] [--store-url sqlite:///...]

Prints one JSON line. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime

from bench.floor import due_jobs, store_floor
from tickd.app import build_engine
from tickd.handlers.noop import noop
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.events.log import NullPublisher
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import Ports, Store
from tickd.scheduler.ports.clock import SystemClock
from tickd.scheduler.store import open_store


async def engine_run(store: Store, count: int, workers: int) -> tuple[float, float]:
    """Seconds the engine took to drain `count` due jobs, and the process's CPU seconds meanwhile
    (every thread: the loop's and the store's). CPU per execution is the figure to compare on a
    shared machine: the wall time moves with the load of others, the CPU much less."""
    now = datetime.now(UTC)
    await store.insert_missing_jobs(due_jobs(count, now, "engine"))
    registry = HandlerRegistry()
    registry.register("noop", noop)
    ports = Ports(
        store=store,
        lock=MemoryLock(),
        events=NullPublisher(),
        mailer=OutboxMailer(tempfile.mkdtemp()),
        clock=SystemClock(),
    )
    settings = Settings(workers=workers, api_port=0)
    engine = build_engine(settings, ports, registry, metrics=Metrics(), resources={})
    started, cpu = time.perf_counter(), time.process_time()
    await engine.drain()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await engine.shutdown()
    return elapsed, cpu


async def fresh_store(url: str | None) -> Store:
    store = open_store(url or f"sqlite:///{tempfile.mkdtemp()}/bench.db")
    await store.open()
    return store


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=30)
    parser.add_argument("--store-url")
    args = parser.parse_args()

    engine_store = await fresh_store(args.store_url)
    engine_seconds, engine_cpu = await engine_run(engine_store, args.jobs, args.workers)
    await engine_store.close()
    floor_store = await fresh_store(args.store_url)
    floor_seconds = await store_floor(floor_store, args.jobs, 100)
    await floor_store.close()

    print(
        json.dumps(
            {
                "jobs": args.jobs,
                "engine_executions_per_second": round(args.jobs / engine_seconds),
                "engine_cpu_us_per_execution": round(engine_cpu / args.jobs * 1e6, 1),
                "store_floor_executions_per_second": round(args.jobs / floor_seconds),
                "engine_time_over_store_floor": round(engine_seconds / floor_seconds, 2),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
