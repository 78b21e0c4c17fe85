"""The SQLite kit every embedded store shares: the job store (scheduler/store/sqlite/) and a
plug-in's own stores (the product store of handlers/product_store). Public to plug-ins through
scheduler.store.kit."""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar, TypeVar

from tickd.scheduler.logs import log_event
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.ports.store_operations import count_sqlite_transaction
from tickd.scheduler.urls import local_path

T = TypeVar("T")

log = logging.getLogger("tickd.store")

# SQLite's result codes for a database another connection holds (the primary code, the low byte).
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
# How long a transaction on the store's thread waits for another connection's write, in ms.
BUSY_TIMEOUT_MS = 5000
# Transactions run on the loop's connection between two checkpoints, which the store's thread makes.
AT_ONCE_PER_CHECKPOINT = 500
# The most rows a transaction run on the loop's thread may write: more (a batch's misfire skips,
# up to a thousand a job) would hold the loop too long, so they go to the store's thread.
AT_ONCE_MAX_ROWS = 1000
# The longest a read ops make (`_in_reader`) may take, in seconds: past it, SQLite stops its
# statement (it raises `interrupted`, see `read_stopped`), and the read answers with what it has
# and says so, or fails saying why.
READ_SECONDS = 5.0
# How often, in SQLite's virtual-machine steps, such a read's statement looks at the time.
READ_CHECK_STEPS = 1000


class SQLiteFile:
    """One SQLite file (or memory) in WAL mode with its schema. Every connection belongs to one
    thread, which sqlite3 enforces (`check_same_thread`): the store's own thread holds the
    connection every transaction may run on, since sqlite3 blocks; on a file, the loop's thread
    holds a second one for the small transactions a caller asks to run `at_once`, and READERS
    threads hold one each, which only read. They are as separate as processes: SQLite's locks
    keep their transactions apart, and WAL lets the readers read while another writes."""

    SCHEMA: ClassVar[str] = ""
    THREAD: ClassVar[str] = "tickd-sqlite"
    # Connections that only read, each on a thread of its own, for the reads ops make (the
    # API's): in WAL mode they read beside the writer, so such a read never waits behind the
    # engine's writes, nor they behind it. 0: such reads run on the store's thread.
    READERS: ClassVar[int] = 0

    def __init__(self, url: str) -> None:
        self._path = local_path(url) or ":memory:"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.THREAD)
        self._db: sqlite3.Connection | None = None  # the store's thread's
        self._loop_db: sqlite3.Connection | None = None  # the loop's, on a file only
        self._readers: list[Reader] = []  # on a file only: memory is one connection's alone
        self.read_seconds = READ_SECONDS
        self.read_clock: Callable[[], float] = time.monotonic
        self._on_thread = 0  # calls handed to the thread and not yet returned to their caller
        self._at_once_since_checkpoint = 0
        self._checkpoints: set[asyncio.Task[None]] = set()
        self._closed = False

    async def _in_thread(
        self, fn: Callable[[sqlite3.Connection], T], *, at_once: bool = False
    ) -> T:
        """Run `fn`, a transaction, with the store's thread's connection. `at_once`: a small
        transaction of the engine's (a batch of runs), run on the loop's own connection instead
        while the store's thread has nothing queued, since handing a call to another thread
        costs more than such a transaction. It never waits for a write on the other
        connection: a database locked there sends it to the store's thread, which waits."""
        count_sqlite_transaction()
        if at_once and not self._on_thread and self._loop_db is not None:
            try:
                return self._on_loop(self._loop_db, fn)
            except Exception as exc:
                if not _busy(exc):
                    raise
        self._on_thread += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._on_store_thread, fn)
        finally:
            self._on_thread -= 1

    async def _in_reader(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn`, a read, on the least busy reader's connection, within `read_seconds`. In
        memory, where the store's thread holds the one database, on that thread, within the
        same limit."""
        limit = ReadLimit(self.read_clock, self.read_seconds)
        if not self._readers:
            return await self._in_thread(lambda db: limit.run(db, fn))
        reader = min(self._readers, key=lambda each: each.queued)
        return await reader.call(lambda db: limit.run(db, fn))

    def _on_store_thread(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._db is None:
            raise sqlite3.ProgrammingError("the database is not open")
        return _left_on_its_thread(fn(self._db))

    def _on_loop(self, db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the loop's connection, which never checkpoints (a checkpoint syncs the disk):
        the store's thread does, every AT_ONCE_PER_CHECKPOINT such transactions."""
        result = _left_on_its_thread(fn(db))
        self._at_once_since_checkpoint += 1
        if self._at_once_since_checkpoint >= AT_ONCE_PER_CHECKPOINT:
            self._at_once_since_checkpoint = 0
            checkpoint = asyncio.ensure_future(self._in_thread(_checkpoint))
            self._checkpoints.add(checkpoint)
            checkpoint.add_done_callback(self._checkpointed)
        return result

    def _checkpointed(self, checkpoint: asyncio.Task[None]) -> None:
        """A failed checkpoint (a full disk) leaves the log as it was: the next one tries again."""
        self._checkpoints.discard(checkpoint)
        error = None if checkpoint.cancelled() else checkpoint.exception()
        if error is not None:
            log_event(log, "store.checkpoint_failed", level=logging.WARNING, error=str(error))

    async def open(self) -> None:
        """Open the store's thread's connection and apply the schema, then the loop's connection
        on a file. A file that is not a database is a StoreError no retry cures."""
        try:
            await self._with_store_thread(self._connect_store_thread)
            if self._path != ":memory:":
                db = self._connect(busy_timeout_ms=0, autocheckpoint_pages=0)
                self._loop_db = self._transactions(db)
                await self._open_readers()
        except sqlite3.Error as exc:
            await self.close()
            error = StoreError(f"sqlite: cannot open {self._path}: {exc}")
            error.transient = _busy(exc)
            raise error from exc

    def _connect_store_thread(self) -> sqlite3.Connection:
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        db = self._connect(busy_timeout_ms=BUSY_TIMEOUT_MS, autocheckpoint_pages=1000)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(self.SCHEMA)
        self._db = self._transactions(self._connected(db))
        return self._db

    async def _open_readers(self) -> None:
        for number in range(self.READERS):
            reader = Reader(f"{self.THREAD}-read-{number}")
            self._readers.append(reader)
            await reader.open(self._connect_reader)

    def _connect_reader(self) -> sqlite3.Connection:
        """A connection that refuses to write (`query_only`) and never checkpoints."""
        db = self._connect(busy_timeout_ms=BUSY_TIMEOUT_MS, autocheckpoint_pages=0)
        db.execute("PRAGMA query_only=1")
        return self._transactions(db)

    def _connect(self, *, busy_timeout_ms: int, autocheckpoint_pages: int) -> sqlite3.Connection:
        """A connection for the calling thread alone, in autocommit until `_transactions`."""
        db = sqlite3.connect(self._path, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        db.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint_pages}")
        return db

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
        """The schema is in place on `db`, the first connection: bring older files up to it."""
        return db

    def _transactions(self, db: sqlite3.Connection) -> sqlite3.Connection:
        """How a connection's transactions begin; autocommit, unless a store chooses."""
        return db

    async def close(self) -> None:
        """Close both connections, each on its own thread, and stop the store's thread. A store
        closed already (or whose open failed) is left as it is."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*self._checkpoints, return_exceptions=True)
        for reader in self._readers:
            await reader.close()
        self._readers = []
        if self._loop_db is not None:
            self._loop_db.close()
            self._loop_db = None
        await self._with_store_thread(self._disconnect_store_thread)
        self._executor.shutdown(wait=True)

    async def _with_store_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _disconnect_store_thread(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class Reader:
    """One connection that only reads, on a thread of its own."""

    def __init__(self, thread_name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._db: sqlite3.Connection | None = None
        self.queued = 0  # reads handed to its thread and not yet returned

    async def open(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._db = await self._on_thread(connect)

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` with this reader's connection, on its thread."""
        count_sqlite_transaction()
        self.queued += 1
        try:
            return await self._on_thread(lambda: _left_on_its_thread(fn(self._connection())))
        finally:
            self.queued -= 1

    async def close(self) -> None:
        await self._on_thread(self._disconnect)
        self._executor.shutdown(wait=True)

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise sqlite3.ProgrammingError("the database is not open")
        return self._db

    def _disconnect(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class ReadLimit:
    """The time a read may take: SQLite's progress handler, which its statements call every
    READ_CHECK_STEPS steps, stops them once the time is up. A statement stopped raises an
    OperationalError for which `read_stopped` is true, and so does every statement the read
    starts after it."""

    def __init__(self, clock: Callable[[], float], seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self._deadline = math.inf

    def run(self, db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        self._deadline = self.clock() + self.seconds
        db.set_progress_handler(self._over, READ_CHECK_STEPS)
        try:
            return fn(db)
        finally:
            db.set_progress_handler(None, READ_CHECK_STEPS)

    def _over(self) -> bool:
        return self.clock() > self._deadline


def read_stopped(exc: BaseException | None) -> bool:
    """Whether `exc`, or what it was raised from, is a read stopped at its time limit."""
    while exc is not None:
        if isinstance(exc, sqlite3.OperationalError):
            return exc.sqlite_errorcode == sqlite3.SQLITE_INTERRUPT
        exc = exc.__cause__
    return False


def _left_on_its_thread(result: T) -> T:
    """What a transaction returns leaves its thread; a cursor (what `execute` returns) is its
    connection's and must not. Freed on another thread, a cursor resets its statement, which
    its connection's own thread may be running for another call at that moment (SQLite then
    answers "bad parameter or other API misuse"). So it is closed here, and None returned."""
    if isinstance(result, sqlite3.Cursor):
        result.close()
        return None  # type: ignore[return-value]
    return result


def _checkpoint(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA wal_checkpoint(PASSIVE)")


def _busy(exc: BaseException | None) -> bool:
    """Whether `exc`, or what it was raised from, says another connection holds the database."""
    while exc is not None:
        if isinstance(exc, sqlite3.OperationalError):
            return (exc.sqlite_errorcode & 0xFF) in _BUSY_CODES
        exc = exc.__cause__
    return False
