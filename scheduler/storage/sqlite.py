"""The SQLite kit every embedded store shares: the job store (scheduler/store/sqlite.py) and a
plug-in's own stores (the product store of handlers/product_store). Public to plug-ins through
scheduler.storage."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar, TypeVar

from scheduler.logs import log_event
from scheduler.storage.operations import count_sqlite_transaction
from scheduler.urls import local_path

T = TypeVar("T")

log = logging.getLogger("tickd.store")

# SQLite's result codes for a database another connection holds (the primary code, the low byte).
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
# How long a transaction on the store's thread waits for another process's write, in ms.
BUSY_TIMEOUT_MS = 5000
# Transactions run on the loop's thread between two checkpoints, which the store's thread makes.
AT_ONCE_PER_CHECKPOINT = 500
# The most rows a transaction run on the loop's thread may write: a thousand running records take
# about 20 ms of the loop. More (a batch's misfire skips, up to a thousand a job) go to the thread.
AT_ONCE_MAX_ROWS = 1000


class SQLiteFile:
    """What the job store and the product store share: one SQLite file (or memory) in WAL mode
    with its schema, its connection used by one thread of its own, since sqlite3 blocks; or,
    for the small transactions a caller asks to run `at_once`, by the loop's thread while that
    one is idle."""

    SCHEMA: ClassVar[str] = ""
    THREAD: ClassVar[str] = "tickd-sqlite"

    def __init__(self, url: str) -> None:
        self._path = local_path(url) or ":memory:"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.THREAD)
        self._db: sqlite3.Connection | None = None
        self._on_thread = 0  # calls handed to the thread and not yet returned
        self._at_once_since_checkpoint = 0
        self._checkpoints: set[asyncio.Task[None]] = set()

    async def _in_thread(self, fn: Callable[[], T], *, at_once: bool = False) -> T:
        """Run `fn`, a transaction, on the connection's thread. `at_once`: a small transaction
        of the engine's (a batch of runs), run on the calling thread instead whenever the
        store's thread has nothing queued or running, so the one connection is never used by
        two threads at a time. Handing a call over costs more than such a transaction: the
        two threads take turns at the GIL, each wake-up a system call (in a burst of 20,000
        runs in one process: 137 against 150 us of CPU a run, 6,600 against 6,000 runs a
        second). It never waits for another process's write: a database locked elsewhere
        sends it to the thread, which waits there."""
        count_sqlite_transaction()
        if at_once and not self._on_thread and self._db is not None:
            try:
                return self._without_waiting(self._db, fn)
            except Exception as exc:
                if not _busy(exc):
                    raise
        self._on_thread += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        finally:
            self._on_thread -= 1

    def _without_waiting(self, db: sqlite3.Connection, fn: Callable[[], T]) -> T:
        """`fn` on this thread, failing at once on a lock held elsewhere, and never making a
        checkpoint (it syncs the disk): those are the store's thread's, every
        AT_ONCE_PER_CHECKPOINT such transactions."""
        db.execute("PRAGMA busy_timeout=0")
        db.execute("PRAGMA wal_autocheckpoint=0")
        try:
            result = fn()
        finally:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA wal_autocheckpoint=1000")
        self._at_once_since_checkpoint += 1
        if self._at_once_since_checkpoint >= AT_ONCE_PER_CHECKPOINT:
            self._at_once_since_checkpoint = 0
            checkpoint = asyncio.ensure_future(self._in_thread(self._checkpoint))
            self._checkpoints.add(checkpoint)
            checkpoint.add_done_callback(self._checkpointed)
        return result

    def _checkpoint(self) -> None:
        if self._db is not None:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpointed(self, checkpoint: asyncio.Task[None]) -> None:
        """A failed checkpoint (a full disk) leaves the log as it was: the next one tries again."""
        self._checkpoints.discard(checkpoint)
        error = None if checkpoint.cancelled() else checkpoint.exception()
        if error is not None:
            log_event(log, "store.checkpoint_failed", level=logging.WARNING, error=str(error))

    async def open(self) -> None:
        def connect() -> None:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            # Autocommit while the schema is applied; `_connected` chooses the transactions.
            db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.executescript(self.SCHEMA)
            self._db = self._connected(db)

        await self._in_thread(connect)

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
        return db

    async def close(self) -> None:
        await asyncio.gather(*self._checkpoints, return_exceptions=True)

        def disconnect() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await self._in_thread(disconnect)
        self._executor.shutdown(wait=True)


def _busy(exc: BaseException | None) -> bool:
    """Whether `exc`, or what it was raised from, says another connection holds the database."""
    while exc is not None:
        if isinstance(exc, sqlite3.OperationalError):
            return (exc.sqlite_errorcode & 0xFF) in _BUSY_CODES
        exc = exc.__cause__
    return False
