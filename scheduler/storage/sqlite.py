"""The SQLite kit every embedded store shares: the job store (scheduler/store/sqlite.py) and a
plug-in's own stores (the product store of handlers/product_store). Public to plug-ins through
scheduler.storage."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar, TypeVar

from scheduler.storage.operations import count_sqlite_transaction
from scheduler.urls import local_path

T = TypeVar("T")


class SQLiteFile:
    """What the job store and the product store share: one SQLite file (or memory) in WAL mode
    with its schema, its connection owned by one thread of its own, since sqlite3 blocks."""

    SCHEMA: ClassVar[str] = ""
    THREAD: ClassVar[str] = "tickd-sqlite"

    def __init__(self, url: str) -> None:
        self._path = local_path(url) or ":memory:"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.THREAD)
        self._db: sqlite3.Connection | None = None

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        count_sqlite_transaction()
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def open(self) -> None:
        def connect() -> None:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            # Autocommit while the schema is applied; `_connected` chooses the transactions.
            db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(self.SCHEMA)
            self._db = self._connected(db)

        await self._in_thread(connect)

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
        return db

    async def close(self) -> None:
        def disconnect() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await self._in_thread(disconnect)
        self._executor.shutdown(wait=True)
