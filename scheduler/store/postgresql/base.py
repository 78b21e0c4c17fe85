"""What the job store's parts on PostgreSQL share: the connection pool, the schema applied at
open, statements sent one at a time (one round trip, no explicit transaction) or several in one
transaction, each counted (tickd_store_operations_total), and their errors as StoreError."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import asyncpg

from tickd.scheduler.model import Job
from tickd.scheduler.partitions import DEFAULT_PARTITIONS
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.ports.store_operations import (
    count_postgresql_statement,
    count_postgresql_transaction,
)
from tickd.scheduler.store.postgresql.schema import migrate
from tickd.scheduler.store.sqlite.rows import Row, job_from_row

T = TypeVar("T")

# Connections per store: the engine's batches, the relay, housekeeping and the API's reads at
# once, each on one for the duration of a statement or a transaction.
POOL_SIZE = 10
# How long opening waits for a server that does not answer, in seconds.
CONNECT_SECONDS = 10.0
# How long a statement may go unanswered, in seconds: a server that stopped answering without
# closing its connections (frozen, or cut off by the network) fails the call as a transient
# StoreError, and the dispatcher backs off, rather than waiting on it for ever. The server's own
# work is bounded by statement_timeout where a read may be long (views.py).
COMMAND_SECONDS = 30.0
# How long closing waits for the server to see each connection out, in seconds.
CLOSE_SECONDS = 5.0

# A failure another try may cure: the connection or the server went away, the server is
# starting or shutting down, or PostgreSQL chose this transaction to break a conflict.
_TRANSIENT = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.LockNotAvailableError,
)


@contextmanager
def translating_errors() -> Iterator[None]:
    """asyncpg's and the socket's errors as StoreError; transient as _TRANSIENT says."""
    try:
        yield
    except StoreError:
        raise
    except asyncpg.exceptions.QueryCanceledError as exc:
        stopped = StoreError("postgresql: the read took too long and was stopped")
        stopped.transient = False  # the same read takes as long again
        raise stopped from exc
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
        error = StoreError(f"postgresql: {type(exc).__name__}: {exc}")
        error.transient = isinstance(exc, _TRANSIENT)
        raise error from exc


def affected(status: str) -> int:
    """The rows a command changed, from its status ("UPDATE 3", "INSERT 0 2", "DELETE 1")."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class Args:
    """The arguments of a statement built in parts: each call adds a value and answers its
    placeholder ($n), with a cast when given (asyncpg must know every parameter's type)."""

    def __init__(self, *values: Any) -> None:
        self.values: list[Any] = list(values)

    def __call__(self, value: Any, cast: str = "") -> str:
        self.values.append(value)
        return f"${len(self.values)}" + (f"::{cast}" if cast else "")


class Tx:
    """One connection's statements, counted: a transaction's, or a single one's."""

    def __init__(self, db: Any) -> None:
        self.db = db

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        count_postgresql_statement()
        rows: list[Row] = await self.db.fetch(sql, *args)
        return rows

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        count_postgresql_statement()
        row: Row | None = await self.db.fetchrow(sql, *args)
        return row

    async def fetchval(self, sql: str, *args: Any) -> Any:
        count_postgresql_statement()
        return await self.db.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> int:
        """The statement's count of rows changed."""
        count_postgresql_statement()
        return affected(await self.db.execute(sql, *args))


class PostgresTables:
    """A pool of connections to one database with the job store's schema. A call is one
    statement on a connection of the pool (`_fetch`, `_execute`, ...), or several in one
    transaction (`_run`)."""

    # Partitions of a new store; how many the store has, read at open (partitions.py).
    new_partition_count = DEFAULT_PARTITIONS
    partition_count = DEFAULT_PARTITIONS

    def __init__(self, url: str) -> None:
        self._url = url
        self._pool: Any = None

    async def open(self) -> None:
        """Connect and bring the schema up to date. A server that does not answer (or refuses
        connections for now) is a transient StoreError, so that the daemon waits for it."""
        with translating_errors():
            try:
                self._pool = await asyncpg.create_pool(
                    self._url,
                    min_size=1,
                    max_size=POOL_SIZE,
                    timeout=CONNECT_SECONDS,
                    command_timeout=COMMAND_SECONDS,
                )
                async with self._pool.acquire() as db:
                    await migrate(db)
            except BaseException:
                await self.close()
                raise

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            # A graceful close waits for the server to answer, which one that stopped answering
            # never does: then the connections are dropped.
            async with asyncio.timeout(CLOSE_SECONDS):
                await pool.close()
        except TimeoutError:
            pool.terminate()

    def _opened(self) -> Any:
        if self._pool is None:
            raise StoreError("postgresql: the store is not open")
        return self._pool

    async def ping(self) -> None:
        await self._fetchval("SELECT 1")

    async def _run(self, fn: Callable[[Tx], Awaitable[T]], *, read_only: bool = False) -> T:
        """`fn` in one transaction: committed when it returns, rolled back when it raises. A
        read-only one reads one snapshot (repeatable read)."""
        count_postgresql_transaction()
        with translating_errors():
            async with self._opened().acquire() as db:
                options = {"isolation": "repeatable_read", "readonly": True} if read_only else {}
                async with db.transaction(**options):
                    return await fn(Tx(db))

    async def _single(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        with translating_errors():
            async with self._opened().acquire() as db:
                return await fn(Tx(db))

    async def _fetch(self, sql: str, *args: Any) -> list[Row]:
        return await self._single(lambda tx: tx.fetch(sql, *args))

    async def _fetchrow(self, sql: str, *args: Any) -> Row | None:
        return await self._single(lambda tx: tx.fetchrow(sql, *args))

    async def _fetchval(self, sql: str, *args: Any) -> Any:
        return await self._single(lambda tx: tx.fetchval(sql, *args))

    async def _execute(self, sql: str, *args: Any) -> int:
        return await self._single(lambda tx: tx.execute(sql, *args))

    async def _jobs(self, sql: str, args: Sequence[Any]) -> list[Job]:
        return [job_from_row(row) for row in await self._fetch(sql, *args)]

    async def _one_job(self, sql: str, *args: Any) -> Job | None:
        row = await self._fetchrow(sql, *args)
        return None if row is None else job_from_row(row)
