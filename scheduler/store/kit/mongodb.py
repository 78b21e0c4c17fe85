"""The MongoDB kit every store on MongoDB shares: the job store (scheduler/store/mongodb/) and a
plug-in's own stores (the product store of handlers/product_store). Public to plug-ins through
scheduler.store.kit.

Time precision. BSON dates keep milliseconds, the model keeps microseconds. So every time field
is written twice from one value in one statement: as a BSON date under its codec name (for people,
tools and the product) and as integer microseconds since the epoch under `<name>_us`. Queries,
sorts and compare-and-set use the `_us` fields and reads rebuild times from them: a round trip is
exact (`with_exact_times`, `without_exact_times`).

FerretDB 1.24 (the development and test server, on its PostgreSQL handler), in one place: no
transactions, no pipeline updates and no partial indexes; a filtered update is not atomic (it
reads, filters in Go, then writes by _id); an update command holds one pooled PostgreSQL
connection per statement until the command ends, and once its pool is spent it waits for ever,
wedged, so bulk updates go out in commands of at most FERRETDB_STATEMENTS_PER_UPDATE statements
(`chunks`) and at most FERRETDB_CONCURRENT_OPERATIONS operations in flight (`server_limits`, the
store's `gate`); and it drops the connection when asked again for several existing indexes, so
`open()` creates only the missing ones, one per command.

Errors. Every pymongo error becomes a StoreError: transient (retry later) for lost connections,
timeouts, no primary, and errors labelled retryable; not transient otherwise. Timeouts are short
by default (URL options win) so a dead server fails a tick in seconds instead of hanging it, and
an operation with no answer within OPERATION_SECONDS fails as transient, whatever it waits on.

Clients. Stores opened from the same URL (and client options) share one client (`CLIENTS`), which
closes when the last of them does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Concatenate, ParamSpec, Protocol, TypeVar
from urllib.parse import parse_qsl, urlsplit

import pymongo
from bson.codec_options import CodecOptions
from bson.errors import BSONError, InvalidDocument
from pymongo import AsyncMongoClient, IndexModel, UpdateMany, UpdateOne, monitoring
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, ConnectionFailure, DuplicateKeyError, PyMongoError

from tickd.scheduler.codec import (
    EPOCH,
    Doc,
    micros,
)
from tickd.scheduler.ports.backends import (
    StoreError,
    UnstorableValue,
)
from tickd.scheduler.ports.store_operations import STORE_OPERATIONS

DEFAULT_DATABASE = "tickd"
# A dead server fails an operation after about two seconds, a hung one within seconds; the URL can
# override each (?serverSelectionTimeoutMS=...). Not timeoutMS: pymongo then spends all of that
# budget waiting for a server, whatever serverSelectionTimeoutMS says.
DEFAULT_CLIENT_OPTIONS: dict[str, Any] = {
    "serverSelectionTimeoutMS": 2_000,
    "connectTimeoutMS": 2_000,
    "socketTimeoutMS": 5_000,
    "appname": "tickd",
}
# Building an index over a large existing collection may take longer than one operation may.
INDEX_BUILD_SECONDS = 300
# An operation answered or not within this gives its place at the gate back (a transient
# StoreError). Each round trip has its timeouts above, but a wait inside the driver that has none
# (for a pooled connection, a name lookup) must not hold one of FerretDB's four places, and so
# every store caller queued behind them, for ever. The slowest call measured takes about 10 s
# (retention's first pass on FerretDB, docs/performance.md).
OPERATION_SECONDS = 30.0
# FerretDB 1.24's PostgreSQL handler takes one connection of its pool (pool_max_conns, 50 unless
# its URL says otherwise) for each statement of an update command and gives them back when the
# command ends; the statement that finds the pool spent waits for ever, and so does the whole
# server (measured: one bulk of 49 updates answers, one of 50 never does; with a pool of 200,
# four concurrent bulks of 40 answer, six never do). Ten statements a command, four commands in
# flight: a store holds at most 40 of the pool, so even a default pool is never spent by one.
# Smaller commands cost nothing there, since FerretDB commits each statement on its own (about
# 1 ms for an update by _id): per 400 updates by _id, commands of 10 went through at about
# 1,100/s (1,800/s four in flight), commands of 40 at 700/s (1,500/s).
FERRETDB_STATEMENTS_PER_UPDATE = 10
# Besides keeping the pool whole (above): updates by _id from 4 threads at once went through at
# about 800/s, from 8 at 860/s, from 30 at 620/s (two cores). On its SQLite handler, which
# serialises writes, more than a few time out and get SQLITE_BUSY.
FERRETDB_CONCURRENT_OPERATIONS = 4
DUPLICATE_KEY = 11000
FERRETDB_DUPLICATE_KEY_MESSAGES = (
    "(SQLSTATE 23505)",  # its PostgreSQL handler: PostgreSQL's unique_violation
    "UNIQUE constraint failed",  # its SQLite handler
)
TRANSIENT_LABELS = ("RetryableWriteError", "TransientTransactionError")
BAD_VALUE = 2
CODEC_OPTIONS: CodecOptions[Doc] = CodecOptions(document_class=dict, tz_aware=True, tzinfo=UTC)

P = ParamSpec("P")
T = TypeVar("T")
Client = AsyncMongoClient[Doc]
Collection = AsyncCollection[Doc]
Update = UpdateOne | UpdateMany


# -- errors -------------------------------------------------------------------------------------


def is_duplicate_key(exc: PyMongoError) -> bool:
    """MongoDB says 11000; FerretDB 1.24 says so only on inserts, and reports a unique index
    violated by an update as an InternalError carrying its backend's message."""
    return isinstance(exc, DuplicateKeyError) or any(
        message in str(exc) for message in FERRETDB_DUPLICATE_KEY_MESSAGES
    )


def is_transient(exc: PyMongoError) -> bool:
    """Worth retrying: the connection, the primary or the clock failed, not the request."""
    return (
        isinstance(exc, ConnectionFailure)  # AutoReconnect, NetworkTimeout, NotPrimaryError, ...
        or exc.timeout
        or any(exc.has_error_label(label) for label in TRANSIENT_LABELS)
        or "SQLITE_BUSY" in str(exc)  # FerretDB's SQLite handler, busy with another writer
    )


@contextmanager
def store_errors(operation: str) -> Iterator[None]:
    """Callers (the engine) know StoreError only; keep the pymongo error as its cause."""
    try:
        yield
    except PyMongoError as exc:
        if refused_key := _refused_key(exc):
            raise UnstorableValue(refused_key) from exc
        error = StoreError(f"mongodb {operation}: {exc}")
        error.transient = is_transient(exc)
        raise error from exc
    except InvalidDocument as exc:  # a document MongoDB cannot hold: the caller's
        raise UnstorableValue(str(exc)) from exc
    except BSONError as exc:  # one it cannot read back: retrying will not help either
        error = StoreError(f"mongodb {operation}: {exc}")
        error.transient = False
        raise error from exc


def _refused_key(exc: PyMongoError) -> str | None:
    """FerretDB 1.24 refuses keys that start with `$` or hold a `.` (MongoDB 5 takes them):
    code 2, BadValue, `invalid key: "a.b" (key must not contain '.' sign)`."""
    details = getattr(exc, "details", None) or {}
    message = str(details.get("errmsg", "")) if isinstance(details, dict) else ""
    if details.get("code") == BAD_VALUE and message.startswith("invalid key:"):
        return message
    return None


class Gated(Protocol):
    """A store whose operations pass a gate (a semaphore on FerretDB, nothing on MongoDB)."""

    gate: contextlib.AbstractAsyncContextManager[Any]


G = TypeVar("G", bound=Gated)


def translating_errors(
    method: Callable[Concatenate[G, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[G, P], Coroutine[Any, Any, T]]:
    """Each operation through the store's gate and within OPERATION_SECONDS, its pymongo errors
    as StoreError. Shared by the job store and the product store."""

    @functools.wraps(method)
    async def translated(store: G, /, *args: P.args, **kwargs: P.kwargs) -> T:
        async with store.gate:
            with store_errors(method.__name__):
                return await answered_within(
                    OPERATION_SECONDS, method.__name__, method(store, *args, **kwargs)
                )

    return translated


async def answered_within(seconds: float, operation: str, call: Awaitable[T]) -> T:
    """The call's answer, or a transient StoreError once `seconds` have passed without one (the
    call is cancelled: pymongo then closes the connection it was using)."""
    try:
        async with asyncio.timeout(seconds) as bound:
            return await call
    except TimeoutError:
        if not bound.expired():
            raise
        error = StoreError(f"mongodb {operation}: no answer within {seconds:g} s")
        error.transient = True
        raise error from None


async def server_limits(
    client: AsyncMongoClient[Doc],
) -> tuple[int | None, contextlib.AbstractAsyncContextManager[Any]]:
    """Statements per update command and the gate for operations in flight: none on MongoDB,
    FerretDB's limits (see the top) when the server says it is FerretDB."""
    info = await client.admin.command("buildInfo")
    if "ferretdbVersion" not in info:
        return None, contextlib.nullcontext()
    return FERRETDB_STATEMENTS_PER_UPDATE, asyncio.Semaphore(FERRETDB_CONCURRENT_OPERATIONS)


# -- times --------------------------------------------------------------------------------------


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def _parent_of(doc: Doc, path: str) -> tuple[Doc | None, str]:
    """The sub-document holding the last field of a dotted path (None where the path breaks)."""
    *parents, field = path.split(".")
    parent: Any = doc
    for key in parents:
        parent = parent.get(key)
        if not isinstance(parent, dict):
            return None, field
    return parent, field


def with_exact_times(doc: Doc, paths: Iterable[str]) -> Doc:
    """Add `<field>_us` (integer microseconds, or None) beside each time field present."""
    for path in paths:
        parent, field = _parent_of(doc, path)
        if parent is not None and field in parent:
            parent[f"{field}_us"] = micros(parent[field])
    return doc


def without_exact_times(doc: Doc, paths: Iterable[str]) -> Doc:
    """Rebuild each time field from its `_us` twin and drop the twin."""
    for path in paths:
        parent, field = _parent_of(doc, path)
        if parent is None:
            continue
        exact = parent.pop(f"{field}_us", None)
        if exact is not None:
            parent[field] = from_micros(exact)
    return doc


def chunks(items: Sequence[T], size: int | None) -> Iterator[Sequence[T]]:
    """Slices of at most `size` (None: all in one), never an empty one (bulk_write refuses it)."""
    step = size or max(len(items), 1)
    for start in range(0, len(items), step):
        yield items[start : start + step]


def in_one_batch(cursor: AsyncCursor[Doc], size: int) -> AsyncCursor[Doc]:
    """At most `size` documents, all in the first reply: one round trip, no getMore."""
    return cursor.limit(size).batch_size(size)


def client_options(url: str) -> dict[str, Any]:
    """Our default timeouts, except those the URL sets itself."""
    given = {key.lower() for key, _ in parse_qsl(urlsplit(url).query)}
    return {k: v for k, v in DEFAULT_CLIENT_OPTIONS.items() if k.lower() not in given}


async def create_missing_indexes(collection: Collection, indexes: Sequence[IndexModel]) -> None:
    """Only those not there yet, one per command. FerretDB 1.24 panics and drops the connection
    when one createIndexes names several indexes of which some already exist: on a restart, and
    whenever two instances start together on a new database and race to create the same ones
    (two openers failed in 20 tries of 20; one index per command, three openers, in none)."""
    existing = {index["name"] async for index in await collection.list_indexes()}
    for index in indexes:
        if index.document["name"] not in existing:
            await collection.create_indexes([index])


async def insert_ignoring_duplicates(collection: Collection, docs: Sequence[Doc]) -> set[int]:
    """Insert in one command; returns the positions refused as duplicates (names taken, or a
    replay of a batch that reached the server before the connection broke)."""
    try:
        await collection.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        if exc.details.get("writeConcernErrors") or any(e["code"] != DUPLICATE_KEY for e in errors):
            raise
        return {e["index"] for e in errors}
    return set()


class SharedClients:
    """One client per URL and options, whatever the number of stores on it: the job store and
    the product store on one database share a connection pool. A client closes with the last
    store that uses it."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str], tuple[Client, int]] = {}

    def acquire(self, url: str, options: Mapping[str, Any]) -> Client:
        key = (url, repr(sorted(options.items())))
        client, users = self._clients.get(key) or (self._new_client(url, options), 0)
        self._clients[key] = (client, users + 1)
        return client

    @staticmethod
    def _new_client(url: str, options: Mapping[str, Any]) -> Client:
        return AsyncMongoClient(url, event_listeners=[CommandCounter()], **options)

    async def release(self, client: Client) -> None:
        for key, (held, users) in list(self._clients.items()):
            if held is client:
                if users > 1:
                    self._clients[key] = (held, users - 1)
                    return
                del self._clients[key]
        await client.close()


CLIENTS = SharedClients()


class MongoDatabase:
    """What the job store and the product store share: a client (opened from a URL and closed
    with the store, or handed over and left open), the database, the server's limits (FerretDB
    or MongoDB), and the indexes their queries need, created at open when missing."""

    # Collection -> its indexes.
    INDEXES: ClassVar[Mapping[str, Sequence[IndexModel]]] = {}
    # Names the store in "... is not open".
    WHAT: ClassVar[str] = "the store"

    def __init__(self, target: str | Client, *, database: str | None = None) -> None:
        """`target` is a URL (the store opens and closes its own client) or a client to use and
        leave open; `database` overrides the one the URL or the client names."""
        self._url = target if isinstance(target, str) else None
        self._client = None if isinstance(target, str) else target
        self._database_name = database
        self._db: AsyncDatabase[Doc] | None = None
        self._statements_per_update: int | None = None
        # Operations in flight at once: unbounded (pymongo's pool decides) but on FerretDB.
        self.gate: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()

    @property
    def database(self) -> AsyncDatabase[Doc]:
        if self._db is None:
            raise StoreError(f"{self.WHAT} is not open")
        return self._db

    def client_options(self, url: str) -> dict[str, Any]:
        return client_options(url)

    @property
    def on_ferretdb(self) -> bool:
        """Set at open: the server is FerretDB (it has a statement limit; MongoDB none)."""
        return self._statements_per_update is not None

    async def open(self) -> None:
        """Not bounded by OPERATION_SECONDS: building the indexes may take minutes."""
        if self._client is None:
            assert self._url is not None
            self._client = CLIENTS.acquire(self._url, self.client_options(self._url))
        try:
            with store_errors("open"):
                await self._prepare(self._client)
        except BaseException:  # the caller only closes a store that opened
            await self.close()
            raise

    async def _prepare(self, client: Client) -> None:
        name = self._database_name or client.get_default_database(DEFAULT_DATABASE).name
        self._db = client.get_database(name, codec_options=CODEC_OPTIONS)
        self._statements_per_update, self.gate = await server_limits(client)
        with pymongo.timeout(INDEX_BUILD_SECONDS):
            for collection, indexes in self.INDEXES.items():
                await create_missing_indexes(self._db[collection], indexes)

    async def close(self) -> None:
        self._db = None
        if self._url is not None and self._client is not None:
            client, self._client = self._client, None
            await CLIENTS.release(client)


class CommandCounter(monitoring.CommandListener):
    """Counts each command a client sends, by name (find, update, insert, getMore...)."""

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        STORE_OPERATIONS.count("mongodb", event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        return None

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        return None
