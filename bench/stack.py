"""The three stacks the benchmark runs the daemon on, each in a place of its own per run.

embedded: SQLite (WAL) in a fresh temporary folder, the in-process lock, no events.
real: FerretDB 1.24 (PostgreSQL handler) on 127.0.0.1:27017 with a fresh database per run,
dropped afterwards; Redis on 127.0.0.1:6379; Kafka on 127.0.0.1:9092 (`scripts/services.sh
start` starts them).
postgresql: PostgreSQL 15 on 127.0.0.1:5433 (the cluster FerretDB runs on) with a fresh
database per run, dropped afterwards; Redis and Kafka as above. Its runs take no lock from
Redis (the store's claim is the lock: docs/architecture.md); the relay's turn does. Nothing here
starts or stops a service.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from pymongo import MongoClient

MONGO_URL = "mongodb://127.0.0.1:27017/"
REDIS_URL = "redis://127.0.0.1:6379/0"
KAFKA_URL = "kafka://127.0.0.1:9092/tickd.bench"
# The daemon's store URL gets these so that a dead FerretDB fails fast rather than hanging a run.
MONGO_OPTIONS = "serverSelectionTimeoutMS=3000"
# PostgreSQL's backends report their statistics at most this often (PGSTAT_MIN_INTERVAL), idle.
STATISTICS_FLUSH_SECONDS = 1.5
# The server, not a database: each run creates its own database there.
POSTGRESQL_URL = os.environ.get(
    "TICKD_BENCH_POSTGRESQL_URL", "postgresql://postgres@127.0.0.1:5433/"
)


@dataclass(frozen=True, kw_only=True)
class Stack:
    kind: str  # "embedded", "real" or "postgresql"
    store_url: str
    lock_url: str
    events_url: str
    folder: Path
    # The store's database on FerretDB, dropped by `cleanup`; None on SQLite.
    mongo_database: str | None = None
    # The store's database on PostgreSQL, dropped by `cleanup`; None elsewhere.
    postgresql_database: str | None = None
    # The floor's batch: the engine's on SQLite, FerretDB's safe bulk size on FerretDB.
    floor_batch: int = field(default=100)
    # Lines of the daemon's configuration placing the handlers' resources, if not beside the jobs.
    resource_lines: tuple[str, ...] = ()

    @property
    def sqlite_path(self) -> Path | None:
        prefix = "sqlite:///"
        return Path(self.store_url[len(prefix) :]) if self.store_url.startswith(prefix) else None

    def cleanup(self) -> None:
        if self.mongo_database is not None:
            client: MongoClient[dict[str, Any]] = MongoClient(
                MONGO_URL, serverSelectionTimeoutMS=3000
            )
            with client:
                client.drop_database(self.mongo_database)
        if self.postgresql_database is not None:
            drop = f'DROP DATABASE IF EXISTS "{self.postgresql_database}" WITH (FORCE)'
            asyncio.run(_postgresql_admin(drop))
        shutil.rmtree(self.folder, ignore_errors=True)


def embedded_stack(events_url: str = "none://") -> Stack:
    folder = Path(tempfile.mkdtemp(prefix="tickd-bench-"))
    return Stack(
        kind="embedded",
        store_url=f"sqlite:///{folder}/tickd.db",
        lock_url="memory://",
        events_url=events_url,
        folder=folder,
        floor_batch=100,
    )


def real_stack() -> Stack:
    folder = Path(tempfile.mkdtemp(prefix="tickd-bench-"))
    database = f"tickd_bench_{uuid.uuid4().hex[:10]}"
    return Stack(
        kind="real",
        store_url=f"{MONGO_URL}{database}?{MONGO_OPTIONS}",
        lock_url=REDIS_URL,
        events_url=KAFKA_URL,
        folder=folder,
        mongo_database=database,
        floor_batch=40,
    )


def postgresql_stack() -> Stack:
    folder = Path(tempfile.mkdtemp(prefix="tickd-bench-"))
    database = f"tickd_bench_{uuid.uuid4().hex[:10]}"
    asyncio.run(_postgresql_admin(f'CREATE DATABASE "{database}"'))
    return Stack(
        kind="postgresql",
        store_url=f"{POSTGRESQL_URL}{database}",
        lock_url=REDIS_URL,
        events_url=KAFKA_URL,
        folder=folder,
        postgresql_database=database,
        floor_batch=100,
        resource_lines=("[resource_urls]", f'products = "sqlite:///{folder}/products.db"'),
    )


async def _postgresql_admin(statement: str) -> None:
    connection = await asyncpg.connect(POSTGRESQL_URL + "postgres", timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def postgresql_transactions(stack: Stack) -> int | None:
    """Transactions committed in the stack's PostgreSQL database so far, from the server's own
    statistics (each of the store's statements outside a transaction counts as one); None off
    PostgreSQL. The statistics are flushed about once a second: the read waits for that."""
    if stack.postgresql_database is None:
        return None
    await asyncio.sleep(STATISTICS_FLUSH_SECONDS)
    connection = await asyncpg.connect(POSTGRESQL_URL + "postgres", timeout=5)
    try:
        committed: int = await connection.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
            stack.postgresql_database,
        )
    finally:
        await connection.close()
    return committed


def postgresql_reachable() -> str | None:
    """None if PostgreSQL, Redis and Kafka accept a connection; else what is missing."""
    services = (("PostgreSQL", 5433), ("Redis", 6379), ("Kafka", 9092))
    missing = [name for name, port in services if not _accepts("127.0.0.1", port)]
    return ", ".join(missing) + " not reachable" if missing else None


STACKS = {"embedded": embedded_stack, "real": real_stack, "postgresql": postgresql_stack}


def real_stack_reachable() -> str | None:
    """None if FerretDB, Redis and Kafka all accept a connection; else what is missing."""
    missing = [
        name
        for name, port in (("FerretDB", 27017), ("Redis", 6379), ("Kafka", 9092))
        if not _accepts("127.0.0.1", port)
    ]
    return ", ".join(missing) + " not reachable" if missing else None


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
