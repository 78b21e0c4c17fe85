"""The two stacks the benchmark runs the daemon on, each in a place of its own per run.

embedded: SQLite (WAL) in a fresh temporary folder, the in-process lock, no events.
real: FerretDB 1.24 (PostgreSQL handler) on 127.0.0.1:27017 with a fresh database per run,
dropped afterwards; Redis on 127.0.0.1:6379; Kafka on 127.0.0.1:9092 (`scripts/services.sh
start` starts them). Nothing here starts or stops a service.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient

MONGO_URL = "mongodb://127.0.0.1:27017/"
REDIS_URL = "redis://127.0.0.1:6379/0"
KAFKA_URL = "kafka://127.0.0.1:9092/tickd.bench"
# The daemon's store URL gets these so that a dead FerretDB fails fast rather than hanging a run.
MONGO_OPTIONS = "serverSelectionTimeoutMS=3000"


@dataclass(frozen=True, kw_only=True)
class Stack:
    kind: str  # "embedded" or "real"
    store_url: str
    lock_url: str
    events_url: str
    folder: Path
    # The store's database on FerretDB, dropped by `cleanup`; None on SQLite.
    mongo_database: str | None = None
    # The floor's batch: the engine's on SQLite, FerretDB's safe bulk size on FerretDB.
    floor_batch: int = field(default=100)

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
