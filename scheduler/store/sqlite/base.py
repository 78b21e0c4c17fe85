"""What the job store's parts on SQLite share: the transaction every call runs in, the schema
and the reads of jobs the other parts use."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import (
    StoreError,
)
from tickd.scheduler.store.kit.sqlite import (
    SQLiteFile,
    read_stopped,
)
from tickd.scheduler.store.sqlite.rows import job_from_row
from tickd.scheduler.store.sqlite.schema import SCHEMA, add_missing_columns

T = TypeVar("T")


class SQLiteTables(SQLiteFile):
    """One transaction per call, on the connection of the thread it runs on; its errors as
    StoreError. The reads ops make (`_read`) run on the readers, within their time limit."""

    SCHEMA = SCHEMA
    READERS = 2  # a long read on one leaves the other to the API's other reads

    # -- plumbing -------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, at_once: bool = False) -> T:
        def call(db: sqlite3.Connection) -> T:
            try:
                with db:  # one transaction: committed on return, rolled back on error
                    return fn(db)
            except sqlite3.Error as exc:
                error = StoreError(f"sqlite: {exc}")
                # A constraint no retry satisfies; a busy or locked database is worth another go.
                error.transient = not isinstance(exc, sqlite3.IntegrityError)
                raise error from exc

        return await self._in_thread(call, at_once=at_once)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn`, a read, in one transaction (one snapshot) on a reader. A read stopped at its
        time limit is a StoreError saying so; a read that answers in part catches the stop
        itself (`read_stopped`)."""

        def call(db: sqlite3.Connection) -> T:
            try:
                db.execute("BEGIN")  # sqlite3 begins a transaction itself only to write
                try:
                    return fn(db)
                finally:
                    db.rollback()
            except sqlite3.Error as exc:
                if read_stopped(exc):
                    stopped = StoreError(
                        f"sqlite: the read took over {self.read_seconds:g} s and was stopped"
                    )
                    stopped.transient = False  # the same read takes as long again
                    raise stopped from exc
                error = StoreError(f"sqlite: {exc}")
                error.transient = not isinstance(exc, sqlite3.IntegrityError)
                raise error from exc

        return await self._in_reader(call)

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
        add_missing_columns(db)
        return db

    def _transactions(self, db: sqlite3.Connection) -> sqlite3.Connection:
        # Python's sqlite3 opens transactions itself only for DML; make them explicit.
        db.isolation_level = "DEFERRED"
        return db

    async def ping(self) -> None:
        await self._run(lambda db: db.execute("SELECT 1").fetchone())

    async def _jobs(self, sql: str, args: Sequence[Any]) -> list[Job]:
        rows = await self._read(lambda db: db.execute(sql, args).fetchall())
        return [job_from_row(row) for row in rows]

    async def _one_job(self, sql: str, args: tuple[Any, ...]) -> Job | None:
        row = await self._read(lambda db: db.execute(sql, args).fetchone())
        return None if row is None else job_from_row(row)
