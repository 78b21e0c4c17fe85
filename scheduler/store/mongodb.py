"""The production store: MongoDB through pymongo's asyncio client (`mongodb://host/database`).

Documents are the codec's (scheduler/codec.py): `_id` strings, times as BSON dates, collections
`jobs` and `executions`. The database is the URL's path (default `tickd`); a store built on a
client it was handed uses that client's default database and never closes it.

Time precision. BSON dates keep milliseconds, the model keeps microseconds. So every time field
is written twice from one value in one statement: as a BSON date under its codec name (for people,
tools and the product) and as integer microseconds since the epoch under `<name>_us`. Queries,
sorts and compare-and-set use the `_us` fields and reads rebuild times from them: a round trip is
exact, and a claim compares exactly the next_run_at it read, not a value rounded to the millisecond.

Compare-and-set without transactions. Each statement is atomic on its document, which is all a
claim needs: the filter holds everything the claim read (revision, next_run_at, no lease, enabled)
plus the job's fence, and the update sets fence and lease.token to fence + 1. The store does not
know the fence from the Claim, so on MongoDB a batch claim is three round trips whatever its size:
one find reads the fences, one update command carries an UpdateOne per claim, one find reads the
winners back (the documents that now carry the lease token this claim computed). Every other
fenced write filters on `lease.token`: once a lease is reaped, its run can no longer touch the job.

On FerretDB 1.24 (SQLite backend) a statement is NOT atomic: it reads, filters in Go, then writes
by _id, so two instances claiming one job at the same instant can both win, with the same token.
There, only the lock (Redis) keeps instances apart; the system tests run two daemons that way.

FerretDB 1.x (the development and test server) has no transactions, no pipeline updates and no
partial indexes, hence the client-side fence + 1 and plain compound indexes. Its SQLite backend
also holds one SQLite connection per statement of an update command until the command ends, and a
database wedges for good once about a hundred are held at once; so when the server says it is
FerretDB, bulk updates go out in commands of at most FERRETDB_STATEMENTS_PER_UPDATE statements.
And it drops the connection when asked again for several existing indexes, so open() creates only
the missing ones.

Errors. Every pymongo error becomes a StoreError: transient (retry later) for lost connections,
timeouts, no primary, and errors labelled retryable; not transient otherwise. Timeouts are short
by default (URL options win) so a dead server fails a tick in seconds instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Concatenate, ParamSpec, Protocol, TypeVar
from urllib.parse import parse_qsl, urlsplit

import pymongo
from bson.codec_options import CodecOptions
from bson.errors import BSONError
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, IndexModel, UpdateMany, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, ConnectionFailure, DuplicateKeyError, PyMongoError

from scheduler.codec import (
    EPOCH,
    Doc,
    exact_micros,
    execution_from_doc,
    execution_to_doc,
    job_from_doc,
    job_to_doc,
    micros,
    summary_to_doc,
)
from scheduler.model import Execution, Job, Status
from scheduler.ports import (
    Advance,
    Claim,
    DuplicateJobName,
    ExecutionQuery,
    JobChange,
    JobQuery,
    RunRequest,
    StoreError,
)

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
FERRETDB_STATEMENTS_PER_UPDATE = 25
# FerretDB on SQLite serialises writes: thirty workers writing at once time out and get
# SQLITE_BUSY. A few operations at a time go through faster than many.
FERRETDB_CONCURRENT_OPERATIONS = 4
DUPLICATE_KEY = 11000
TRANSIENT_LABELS = ("RetryableWriteError", "TransientTransactionError")
CODEC_OPTIONS: CodecOptions[Doc] = CodecOptions(document_class=dict, tz_aware=True, tzinfo=UTC)

JOB_TIMES = (
    "next_run_at",
    "created_at",
    "updated_at",
    "lease.until",
    "last_execution.finished_at",
    "schedule.at",
)
EXECUTION_TIMES = ("scheduled_at", "started_at", "finished_at")
ADVANCE_TIMES = ("next_run_at", "last_execution.finished_at")

# Free to run: enabled and not leased (a lease, live or expired, is reaped before a rerun).
FREE: Doc = {"enabled": True, "lease": None}
URGENCY = [("priority", ASCENDING), ("next_run_at_us", ASCENDING)]
NEWEST_FIRST = [("scheduled_at_us", DESCENDING), ("_id", DESCENDING)]
LEASE_EXPIRED = {"type": "LeaseExpired", "message": "the lease expired before the run ended"}

JOB_INDEXES = [
    IndexModel([("name", ASCENDING)], name="jobs_name", unique=True),
    # Equality on the free state, then the due query's sort order, then its range.
    IndexModel([("enabled", ASCENDING), ("lease", ASCENDING), *URGENCY], name="jobs_due"),
    IndexModel(
        [("enabled", ASCENDING), ("lease", ASCENDING), ("next_run_at_us", ASCENDING)],
        name="jobs_next",
    ),
    IndexModel([("lease.until_us", ASCENDING)], name="jobs_lease_expiry"),
]
CHANGE_INDEXES = [
    IndexModel(
        [("job_id", ASCENDING), ("at_us", DESCENDING), ("_id", DESCENDING)], name="changes_by_job"
    ),
]
REQUEST_INDEXES = [
    IndexModel([("not_before_us", ASCENDING)], name="requests_due"),
    IndexModel([("job_id", ASCENDING), ("scheduled_at_us", ASCENDING)], name="requests_by_job"),
]
CHANGE_TIMES = ("at",)
REQUEST_TIMES = ("scheduled_at", "not_before", "created_at")
# What ops may change of a job (replace_job); the lease, fence and run state are the engine's.
DEFINITION_FIELDS = (
    "name", "handler", "params", "schedule", "enabled", "next_run_at", "timeout_seconds",
    "max_retries", "priority", "misfire", "jitter_seconds", "consecutive_failures",
    "paused_reason", "system", "updated_at",
)  # fmt: skip

EXECUTION_INDEXES = [
    IndexModel([("job_id", ASCENDING), *NEWEST_FIRST], name="executions_by_job"),
    IndexModel(NEWEST_FIRST, name="executions_by_time"),
    IndexModel(
        [("status", ASCENDING), ("scheduled_at_us", DESCENDING)], name="executions_by_status"
    ),
]

P = ParamSpec("P")
T = TypeVar("T")
Client = AsyncMongoClient[Doc]
Collection = AsyncCollection[Doc]
Update = UpdateOne | UpdateMany


# -- errors -------------------------------------------------------------------------------------


def is_duplicate_key(exc: PyMongoError) -> bool:
    """MongoDB says 11000; FerretDB's SQLite backend says so only on inserts, and reports a
    unique index violated by an update as an InternalError naming the constraint."""
    return isinstance(exc, DuplicateKeyError) or "UNIQUE constraint failed" in str(exc)


def is_transient(exc: PyMongoError) -> bool:
    """Worth retrying: the connection, the primary or the clock failed, not the request."""
    return (
        isinstance(exc, ConnectionFailure)  # AutoReconnect, NetworkTimeout, NotPrimaryError, ...
        or exc.timeout
        or any(exc.has_error_label(label) for label in TRANSIENT_LABELS)
        or "SQLITE_BUSY" in str(exc)  # FerretDB's SQLite backend, busy with another writer
    )


@contextmanager
def store_errors(operation: str) -> Iterator[None]:
    """Callers (the engine) know StoreError only; keep the pymongo error as its cause."""
    try:
        yield
    except PyMongoError as exc:
        error = StoreError(f"mongodb {operation}: {exc}")
        error.transient = is_transient(exc)
        raise error from exc
    except BSONError as exc:  # a document MongoDB cannot hold: retrying will not help
        error = StoreError(f"mongodb {operation}: {exc}")
        error.transient = False
        raise error from exc


class Gated(Protocol):
    """A store whose operations pass a gate (a semaphore on FerretDB, nothing on MongoDB)."""

    gate: contextlib.AbstractAsyncContextManager[Any]


G = TypeVar("G", bound=Gated)


def translating_errors(
    method: Callable[Concatenate[G, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[G, P], Coroutine[Any, Any, T]]:
    """Each operation through the store's gate, its pymongo errors as StoreError. Shared by the
    job store and the product store."""

    @functools.wraps(method)
    async def translated(store: G, /, *args: P.args, **kwargs: P.kwargs) -> T:
        async with store.gate:
            with store_errors(method.__name__):
                return await method(store, *args, **kwargs)

    return translated


async def server_limits(
    client: AsyncMongoClient[Doc],
) -> tuple[int | None, contextlib.AbstractAsyncContextManager[Any]]:
    """Statements per update command and the gate for operations in flight: none on MongoDB,
    FerretDB's limits (see the top) when the server says it is FerretDB."""
    info = await client.admin.command("buildInfo")
    if "ferretdbVersion" not in info:
        return None, contextlib.nullcontext()
    return FERRETDB_STATEMENTS_PER_UPDATE, asyncio.Semaphore(FERRETDB_CONCURRENT_OPERATIONS)


def duplicate_job_error(job: Job, exc: DuplicateKeyError) -> StoreError:
    """MongoDB names the index at fault; FerretDB does not, and then it is the name's."""
    key_pattern = (exc.details or {}).get("keyPattern") or {}
    if key_pattern and "name" not in key_pattern:
        error = StoreError(f"a job with id {job.id!r} exists already")
        error.transient = False
        return error
    return DuplicateJobName(job.name)


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


# -- documents ----------------------------------------------------------------------------------


def job_document(job: Job) -> Doc:
    return with_exact_times(job_to_doc(job), JOB_TIMES)


def job_from_document(doc: Doc) -> Job:
    return job_from_doc(without_exact_times(doc, JOB_TIMES))


def execution_document(execution: Execution) -> Doc:
    return with_exact_times(execution_to_doc(execution), EXECUTION_TIMES)


def execution_from_document(doc: Doc) -> Execution:
    return execution_from_doc(without_exact_times(doc, EXECUTION_TIMES))


def due_filter(now: datetime, exclude_handlers: Sequence[str] = ()) -> Doc:
    due: Doc = {**FREE, "next_run_at_us": {"$lte": exact_micros(now)}}
    if exclude_handlers:
        due["handler"] = {"$nin": list(exclude_handlers)}
    return due


def claim_update(claim: Claim, token: int) -> UpdateOne:
    """Lease the job with `token` only if it is still as read, fence included (token - 1)."""
    lease = {"owner": claim.owner, "token": token, "until": claim.until}
    return UpdateOne(
        {
            "_id": claim.job_id,
            "revision": claim.revision,
            "next_run_at_us": micros(claim.next_run_at),
            "fence": token - 1,
            **FREE,
        },
        {"$set": {"fence": token, "lease": with_exact_times(lease, ["until"])}},
    )


def release_update(advance: Advance | None, *, schedule: bool = True) -> Doc:
    """Clear the lease; with an advance, record the run and (unless `schedule` is False: the
    job changed during the run) move the job on to its next run."""
    changes: Doc = {"lease": None}
    if advance is not None:
        state: Doc = {
            "consecutive_failures": advance.consecutive_failures,
            "last_execution": summary_to_doc(advance.last_execution),
        }
        if schedule:
            state |= {
                "next_run_at": advance.next_run_at,
                "enabled": advance.enabled,
                "paused_reason": advance.paused_reason,
            }
        changes |= with_exact_times(state, ADVANCE_TIMES)
    return {"$set": changes}


def abandon_running(job_id: str, token: int, now: datetime) -> UpdateMany:
    """Mark `abandoned` the run the expired lease guarded, unless it has finished meanwhile."""
    abandoned = {"status": Status.ABANDONED.value, "finished_at": now, "error": LEASE_EXPIRED}
    return UpdateMany(
        {"job_id": job_id, "token": token, "status": Status.RUNNING.value},
        {"$set": with_exact_times(abandoned, ["finished_at"])},
    )


def release_lease(job_id: str, token: int) -> UpdateOne:
    return UpdateOne({"_id": job_id, "lease.token": token}, {"$set": {"lease": None}})


def executions_filter(query: ExecutionQuery) -> Doc:
    wanted = {"job_id": query.job_id, "status": query.status, "handler": query.handler}
    found: Doc = {field: str(value) for field, value in wanted.items() if value is not None}
    window: Doc = {}
    if query.since is not None:
        window["$gte"] = exact_micros(query.since)
    if query.until is not None:
        window["$lt"] = exact_micros(query.until)
    if window:
        found["scheduled_at_us"] = window
    if query.before is not None:
        at, last_id = exact_micros(query.before[0]), query.before[1]
        found["$or"] = [
            {"scheduled_at_us": {"$lt": at}},
            {"scheduled_at_us": at, "_id": {"$lt": last_id}},
        ]
    return found


def jobs_filter(query: JobQuery) -> Doc:
    found: Doc = {}
    if query.handler is not None:
        found["handler"] = query.handler
    if query.enabled is not None:
        found["enabled"] = query.enabled
    name: Doc = {}
    if query.name_prefix is not None:
        name |= {"$gte": query.name_prefix, "$lt": query.name_prefix + "\U0010ffff"}
    if query.after_name is not None:
        name["$gt"] = query.after_name
    if name:
        found["name"] = name
    window: Doc = {}
    if query.next_run_from is not None:
        window["$gte"] = exact_micros(query.next_run_from)
    if query.next_run_to is not None:
        window["$lt"] = exact_micros(query.next_run_to)
    if window:
        found["next_run_at_us"] = window
    return found


def change_document(change: JobChange) -> Doc:
    doc = dataclasses.asdict(change)
    doc["_id"] = doc.pop("id")
    return with_exact_times(doc, CHANGE_TIMES)


def change_from_document(doc: Doc) -> JobChange:
    doc = without_exact_times(doc, CHANGE_TIMES)
    doc["id"] = doc.pop("_id")
    doc["at"] = doc["at"].astimezone(UTC)
    return JobChange(**doc)


def request_document(request: RunRequest) -> Doc:
    doc = dataclasses.asdict(request)
    doc["_id"] = doc.pop("id")
    return with_exact_times(doc, REQUEST_TIMES)


def request_from_document(doc: Doc) -> RunRequest:
    doc = without_exact_times(doc, REQUEST_TIMES)
    doc["id"] = doc.pop("_id")
    return RunRequest(**doc)


def request_claim(claim: Claim, token: int) -> UpdateOne:
    """Like claim_update, whenever the job is due: a requested run ignores the schedule."""
    lease = {"owner": claim.owner, "token": token, "until": claim.until}
    return UpdateOne(
        {"_id": claim.job_id, "revision": claim.revision, "fence": token - 1, "lease": None},
        {"$set": {"fence": token, "lease": with_exact_times(lease, ["until"])}},
    )


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

    @translating_errors
    async def open(self) -> None:
        if self._client is None:
            assert self._url is not None
            self._client = AsyncMongoClient(self._url, **self.client_options(self._url))
        try:
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
            await self._client.close()
            self._client = None


class MongoStore(MongoDatabase):
    """Jobs and executions in MongoDB; every batch of the engine is a bounded number of commands."""

    INDEXES: ClassVar[Mapping[str, Sequence[IndexModel]]] = {
        "jobs": JOB_INDEXES,
        "executions": EXECUTION_INDEXES,
        "job_changes": CHANGE_INDEXES,
        "run_requests": REQUEST_INDEXES,
    }

    # -- collections ----------------------------------------------------------------------------

    @property
    def jobs(self) -> Collection:
        return self.database["jobs"]

    @property
    def executions(self) -> Collection:
        return self.database["executions"]

    @property
    def changes(self) -> Collection:
        return self.database["job_changes"]

    @property
    def requests(self) -> Collection:
        return self.database["run_requests"]

    @translating_errors
    async def ping(self) -> None:
        await self.database.command("ping")

    async def _update_each(self, collection: Collection, updates: Sequence[Update]) -> None:
        for batch in chunks(updates, self._statements_per_update):
            await collection.bulk_write(batch, ordered=False)

    # -- jobs -----------------------------------------------------------------------------------

    @translating_errors
    async def insert_job(self, job: Job, change: JobChange | None = None) -> None:
        try:
            await self.jobs.insert_one(job_document(job))
        except DuplicateKeyError as exc:
            raise duplicate_job_error(job, exc) from None
        await self._record(change)

    @translating_errors
    async def replace_job(self, job: Job, expected_revision: int, change: JobChange) -> Job | None:
        doc = job_document(job)
        fields = {k: doc[k] for k in DEFINITION_FIELDS}
        fields.update({f"{k}_us": doc[f"{k}_us"] for k in ("next_run_at", "updated_at")})
        try:
            result = await self.jobs.update_one(
                {"_id": job.id, "revision": expected_revision},
                {"$set": fields, "$inc": {"revision": 1}},
            )
        except PyMongoError as exc:
            if is_duplicate_key(exc):
                raise DuplicateJobName(job.name) from None
            raise
        if result.matched_count != 1:
            return None
        await self._record(change)
        stored = await self.jobs.find_one({"_id": job.id})
        return None if stored is None else job_from_document(stored)

    async def _record(self, change: JobChange | None) -> None:
        """The history entry goes in after the change it describes (no transactions here)."""
        if change is not None:
            await self.changes.insert_one(change_document(change))

    @translating_errors
    async def record_change(self, change: JobChange) -> None:
        await self._record(change)

    @translating_errors
    async def list_changes(
        self, job_id: str, *, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[JobChange]:
        if limit <= 0:
            return []
        query: Doc = {"job_id": job_id}
        if before is not None:
            at = exact_micros(before[0])
            query["$or"] = [{"at_us": {"$lt": at}}, {"at_us": at, "_id": {"$lt": before[1]}}]
        sort = [("at_us", DESCENDING), ("_id", DESCENDING)]
        cursor = in_one_batch(self.changes.find(query).sort(sort), limit)
        return [change_from_document(doc) async for doc in cursor]

    @translating_errors
    async def insert_missing_jobs(self, jobs: Sequence[Job]) -> list[Job]:
        if not jobs:
            return []
        taken = await insert_ignoring_duplicates(self.jobs, [job_document(job) for job in jobs])
        return [job for i, job in enumerate(jobs) if i not in taken]

    @translating_errors
    async def get_job(self, job_id: str) -> Job | None:
        doc = await self.jobs.find_one({"_id": job_id})
        return None if doc is None else job_from_document(doc)

    @translating_errors
    async def get_job_by_name(self, name: str) -> Job | None:
        doc = await self.jobs.find_one({"name": name})
        return None if doc is None else job_from_document(doc)

    @translating_errors
    async def list_jobs(self, query: JobQuery | None = None) -> list[Job]:
        query = query or JobQuery()
        return await self._find_jobs(
            jobs_filter(query), sort=[("name", ASCENDING)], limit=query.limit
        )

    async def _find_jobs(self, query: Doc, *, sort: list[tuple[str, int]], limit: int) -> list[Job]:
        if limit <= 0:  # pymongo reads a limit of 0 as "no limit"
            return []
        cursor = in_one_batch(self.jobs.find(query).sort(sort), limit)
        return [job_from_document(doc) async for doc in cursor]

    @translating_errors
    async def delete_job(
        self, job_id: str, change: JobChange | None = None, *, expected_revision: int | None = None
    ) -> bool:
        query: Doc = {"_id": job_id}
        if expected_revision is not None:
            query["revision"] = expected_revision
        if (await self.jobs.delete_one(query)).deleted_count != 1:
            return False
        await self.requests.delete_many({"job_id": job_id})
        await self._record(change)
        return True

    # -- the engine's batch operations ----------------------------------------------------------

    @translating_errors
    async def due_jobs(
        self, now: datetime, limit: int, *, exclude_handlers: Sequence[str] = ()
    ) -> list[Job]:
        return await self._find_jobs(due_filter(now, exclude_handlers), sort=URGENCY, limit=limit)

    @translating_errors
    async def count_due(self, now: datetime) -> int:
        return await self.jobs.count_documents(due_filter(now))

    @translating_errors
    async def next_due_at(self) -> datetime | None:
        doc = await self.jobs.find_one(
            {**FREE, "next_run_at_us": {"$ne": None}},
            {"next_run_at_us": 1},
            sort=[("next_run_at_us", ASCENDING)],
        )
        return None if doc is None else from_micros(doc["next_run_at_us"])

    @translating_errors
    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        if not claims:
            return []
        fences = await self._fences_of_free_jobs([claim.job_id for claim in claims])
        tokens = {job_id: fence + 1 for job_id, fence in fences.items()}
        updates = [claim_update(c, tokens[c.job_id]) for c in claims if c.job_id in tokens]
        await self._update_each(self.jobs, updates)
        return await self._winners(claims, tokens)

    async def _fences_of_free_jobs(self, job_ids: list[str]) -> dict[str, int]:
        """One read for the whole batch; a leased or disabled job is left out (it would lose)."""
        cursor = self.jobs.find({"_id": {"$in": job_ids}, **FREE}, {"fence": 1})
        return {doc["_id"]: int(doc["fence"]) async for doc in in_one_batch(cursor, len(job_ids))}

    async def _winners(self, claims: Sequence[Claim], tokens: dict[str, int]) -> list[Job]:
        """The jobs that now carry the lease token their claim computed, in the claims' order."""
        if not tokens:
            return []
        cursor = in_one_batch(self.jobs.find({"_id": {"$in": list(tokens)}}), len(tokens))
        leased = {doc["_id"]: job_from_document(doc) async for doc in cursor}
        return [
            job
            for claim in claims
            if (job := leased.pop(claim.job_id, None)) is not None
            and job.lease is not None
            and (job.lease.owner, job.lease.token) == (claim.owner, tokens[claim.job_id])
        ]

    @translating_errors
    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        moved = {"lease.until": until, "lease.until_us": exact_micros(until)}
        result = await self.jobs.update_one({"_id": job_id, "lease.token": token}, {"$set": moved})
        return result.matched_count == 1

    @translating_errors
    async def insert_executions(self, executions: Sequence[Execution]) -> None:
        if executions:
            await insert_ignoring_duplicates(
                self.executions, [execution_document(e) for e in executions]
            )

    @translating_errors
    async def finish_execution(self, execution: Execution, advance: Advance | None) -> bool:
        """The execution first: if we stop between the two writes, the lease expires and the
        reaper gives the occurrence back, which is late but never lost."""
        doc = execution_document(execution)
        await self.executions.replace_one({"_id": execution.id}, doc, upsert=True)
        if execution.token is None:  # never held a lease, so it cannot release one
            return False
        fenced = {"_id": execution.job_id, "lease.token": execution.token}
        if advance is None:
            result = await self.jobs.update_one(fenced, release_update(None))
            return result.matched_count == 1
        # The schedule moves only if ops did not change the job during the run (see Advance);
        # without pipeline updates that takes a second statement when they did.
        unchanged = {**fenced, "revision": advance.revision}
        result = await self.jobs.update_one(unchanged, release_update(advance))
        if result.matched_count == 1:
            return True
        result = await self.jobs.update_one(fenced, release_update(advance, schedule=False))
        return result.matched_count == 1

    @translating_errors
    async def reap_expired_leases(self, now: datetime) -> list[Execution]:
        """Executions first, then the leases: a crash in between leaves a lease to reap again,
        never a `running` execution that nothing guards."""
        expired = await self._expired_leases(now)
        if not expired:
            return []
        abandon = [abandon_running(job_id, token, now) for job_id, token in expired]
        await self._update_each(self.executions, abandon)
        await self._update_each(self.jobs, [release_lease(job, token) for job, token in expired])
        return await self._abandoned_at(now, expired)

    async def _expired_leases(self, now: datetime) -> list[tuple[str, int]]:
        cursor = self.jobs.find({"lease.until_us": {"$lt": exact_micros(now)}}, {"lease.token": 1})
        return [(doc["_id"], int(doc["lease"]["token"])) async for doc in cursor]

    async def _abandoned_at(self, now: datetime, leases: list[tuple[str, int]]) -> list[Execution]:
        """Read back what this reap marked (an execution the run finished meanwhile is not)."""
        cursor = self.executions.find(
            {
                "$or": [{"job_id": job_id, "token": token} for job_id, token in leases],
                "status": Status.ABANDONED.value,
                "error.type": LEASE_EXPIRED["type"],
                "finished_at_us": exact_micros(now),
            }
        ).sort("scheduled_at_us", ASCENDING)
        return [execution_from_document(doc) async for doc in cursor]

    # -- executions -----------------------------------------------------------------------------

    @translating_errors
    async def get_execution(self, execution_id: str) -> Execution | None:
        doc = await self.executions.find_one({"_id": execution_id})
        return None if doc is None else execution_from_document(doc)

    @translating_errors
    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        if query.limit <= 0:
            return []
        cursor = self.executions.find(executions_filter(query)).sort(NEWEST_FIRST)
        return [execution_from_document(doc) async for doc in in_one_batch(cursor, query.limit)]

    @translating_errors
    async def executions_at(self, job_id: str, scheduled_ats: Sequence[datetime]) -> set[datetime]:
        if not scheduled_ats:
            return set()
        wanted = {
            "job_id": job_id,
            "scheduled_at_us": {"$in": [exact_micros(t) for t in scheduled_ats]},
        }
        found: set[datetime] = set()
        for collection in (self.executions, self.requests):
            cursor = collection.find(wanted, {"scheduled_at_us": 1})
            found |= {from_micros(doc["scheduled_at_us"]) async for doc in cursor}
        return found

    # -- run requests (trigger, retry, backfill) -------------------------------------------------

    @translating_errors
    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        if requests:
            await self.requests.insert_many([request_document(r) for r in requests], ordered=False)

    @translating_errors
    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        wanted = {"job_id": job_id, "scheduled_at_us": exact_micros(scheduled_at)}
        return await self.requests.find_one(wanted, {"_id": 1}) is not None

    @translating_errors
    async def due_run_requests(self, now: datetime, limit: int) -> list[tuple[RunRequest, Job]]:
        """Two reads for the batch: the due requests, then their jobs (those not leased)."""
        if limit <= 0:
            return []
        cursor = self.requests.find({"not_before_us": {"$lte": exact_micros(now)}})
        cursor = in_one_batch(cursor.sort([("not_before_us", ASCENDING)]), limit)
        requests = [request_from_document(doc) async for doc in cursor]
        if not requests:
            return []
        job_ids = list({r.job_id for r in requests})
        jobs_cursor = self.jobs.find({"_id": {"$in": job_ids}, "lease": None})
        jobs = {
            doc["_id"]: job_from_document(doc)
            async for doc in in_one_batch(jobs_cursor, len(job_ids))
        }
        return [(r, jobs[r.job_id]) for r in requests if r.job_id in jobs]

    @translating_errors
    async def claim_run_requests(
        self, requests: Sequence[RunRequest], claims: Sequence[Claim], now: datetime
    ) -> list[tuple[RunRequest, Job]]:
        if not claims:
            return []
        ids = list({c.job_id for c in claims})
        cursor = self.jobs.find({"_id": {"$in": ids}, "lease": None}, {"fence": 1})
        tokens = {doc["_id"]: int(doc["fence"]) + 1 async for doc in in_one_batch(cursor, len(ids))}
        first_claims = {c.job_id: c for c in reversed(claims) if c.job_id in tokens}
        updates = [request_claim(c, tokens[c.job_id]) for c in first_claims.values()]
        await self._update_each(self.jobs, updates)
        won = {job.id: job for job in await self._winners(list(first_claims.values()), tokens)}
        pairs: list[tuple[RunRequest, Job]] = []
        for request, claim in zip(requests, claims, strict=True):
            job = won.pop(claim.job_id, None)
            if job is not None:
                pairs.append((request, job))
        if pairs:
            await self.requests.delete_many({"_id": {"$in": [r.id for r, _ in pairs]}})
        return pairs
