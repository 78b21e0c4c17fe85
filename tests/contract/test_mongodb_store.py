"""What the MongoDB store promises beyond the store contract: round trips per batch, exact times,
its indexes, the client it closes, and failing fast and transient when the server goes away."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from pymongo import AsyncMongoClient, monitoring
from pymongo.errors import InvalidOperation

import tickd.scheduler.store.kit.mongodb as mongodb_module
import tickd.scheduler.store.mongodb.base as mongodb_base_module
from tests.conftest import T0, make_job
from tests.contract.test_store import (
    SOURCE,
    advance_to,
    change_of,
    claimed,
    ended,
    request_for,
    running,
    stored_ids,
)
from tests.fixtures.proxy import LoopbackProxy
from tests.fixtures.services import MONGODB_URL
from tests.fixtures.stores import fresh_mongodb_database, mongodb_url
from tickd.handlers.product_store.mongodb import MongoProductStore
from tickd.handlers.product_store.mongodb_queries import ALERT_INDEXES
from tickd.scheduler.codec import Doc, exact_micros
from tickd.scheduler.model import Job, Status
from tickd.scheduler.partitions import partition_of
from tickd.scheduler.ports.backends import (
    Claim,
    DueFilter,
    Retention,
    RunEnd,
    RunRequest,
    StoreError,
)
from tickd.scheduler.store.kit.mongodb import FERRETDB_STATEMENTS_PER_UPDATE, chunks
from tickd.scheduler.store.mongodb import MongoStore

# The module's `server` fixture is a fresh database on the real server.
pytestmark = pytest.mark.mongodb

# A dead or silent server must fail an operation within this (about 2 s expected), never hang it.
FAIL_FAST_SECONDS = 4.0


@dataclass
class Server:
    admin: AsyncMongoClient[Doc]
    database: str

    async def is_ferretdb(self) -> bool:
        return "ferretdbVersion" in await self.admin.admin.command("buildInfo")


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with fresh_mongodb_database() as (admin, name):
        yield Server(admin, name)


@asynccontextmanager
async def opened(
    target: str | AsyncMongoClient[Doc], database: str | None = None
) -> AsyncIterator[MongoStore]:
    store = MongoStore(target, database=database)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def store(server: Server) -> AsyncIterator[MongoStore]:
    """Opened from a URL whose path names the server's fresh database."""
    async with opened(mongodb_url(server.database)) as mongo:
        yield mongo


class CommandRecorder(monitoring.CommandListener):
    """Every command the client sends: one per round trip."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, Mapping[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append((event.command_name, event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.commands]


def claim_of(job: Job, owner: str = "instance-a") -> Claim:
    assert job.next_run_at is not None
    return Claim(
        job_id=job.id,
        revision=job.revision,
        next_run_at=job.next_run_at,
        owner=owner,
        until=T0 + timedelta(minutes=5),
    )


async def test_a_claim_of_a_hundred_jobs_is_a_bounded_number_of_round_trips(
    server: Server,
) -> None:
    recorder = CommandRecorder()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(MONGODB_URL, event_listeners=[recorder])
    try:
        async with opened(client, database=server.database) as store:
            jobs = [make_job(f"job-{i:03}") for i in range(100)]
            recorder.commands.clear()
            assert await store.insert_missing_jobs(jobs) == jobs
            assert recorder.names == ["insert"]

            recorder.commands.clear()
            won = await store.claim_jobs([claim_of(job) for job in jobs], T0)

        assert [job.id for job in won] == [job.id for job in jobs]
        # MongoDB takes the whole batch in one update command; FerretDB in a few smaller ones.
        per_command = FERRETDB_STATEMENTS_PER_UPDATE if await server.is_ferretdb() else len(jobs)
        updates = math.ceil(len(jobs) / per_command)
        # No read of the fences first: the claim increments them.
        assert recorder.names == [*["update"] * updates, "find"]
        sizes = [len(command["updates"]) for name, command in recorder.commands if name == "update"]
        assert sum(sizes) == len(jobs) and max(sizes) <= per_command
        await client.admin.command("ping")  # the store closed only what it opened
    finally:
        await client.close()


async def test_on_mongodb_a_batch_claim_is_one_update_command_and_one_find(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path production takes, run here with FerretDB's smaller commands switched off (the
    batches stay well below the size that wedges FerretDB)."""

    async def as_if_mongodb(client: object) -> tuple[None, contextlib.nullcontext[None]]:
        return None, contextlib.nullcontext()

    monkeypatch.setattr(mongodb_module, "server_limits", as_if_mongodb)
    recorder = CommandRecorder()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(MONGODB_URL, event_listeners=[recorder])
    try:
        async with opened(client, database=server.database) as store:
            jobs = [make_job(f"job-{i}") for i in range(10)]
            await store.insert_missing_jobs(jobs)
            recorder.commands.clear()
            assert len(await store.claim_jobs([claim_of(job) for job in jobs[:4]], T0)) == 4
            assert recorder.names == ["update", "find"]

            recorder.commands.clear()
            won = await store.claim_jobs([claim_of(job, "other") for job in jobs], T0)
            assert sorted(job.name for job in won) == [f"job-{i}" for i in range(4, 10)]
            assert recorder.names == ["update", "find"]

            recorder.commands.clear()
            assert await store.claim_jobs([claim_of(job) for job in jobs], T0) == []
            assert recorder.names == ["update", "find"]  # every job leased: none won
    finally:
        await client.close()


def test_batches_are_split_only_where_a_size_is_set_and_never_empty() -> None:
    assert list(chunks([1, 2, 3], None)) == [[1, 2, 3]]
    assert list(chunks([1, 2, 3], 2)) == [[1, 2], [3]]
    assert list(chunks([], None)) == list(chunks([], 2)) == []


async def test_times_keep_their_microseconds_and_compare_exactly(
    server: Server, store: MongoStore
) -> None:
    early = make_job("early", next_run_at=T0 + timedelta(microseconds=100))
    late = make_job("late", next_run_at=T0 + timedelta(microseconds=900))
    for job in (early, late):
        await store.insert_job(job)

    # All three times fall in one millisecond: BSON dates alone could not tell them apart.
    due = await store.due_jobs(T0 + timedelta(microseconds=500), 10)
    assert [job.name for job in due] == ["early"]
    stale = Claim(
        job_id=late.id,
        revision=late.revision,
        next_run_at=T0 + timedelta(microseconds=901),
        owner="a",
        until=T0 + timedelta(minutes=1),
    )
    assert await store.claim_jobs([stale], T0) == []

    raw = await server.admin[server.database]["jobs"].find_one({"name": "late"})
    assert raw is not None
    assert raw["next_run_at"].replace(tzinfo=UTC) == T0  # what people and tools see
    assert raw["next_run_at_us"] == exact_micros(T0 + timedelta(microseconds=900))


async def test_open_creates_the_indexes_the_queries_need(server: Server) -> None:
    async with opened(mongodb_url(server.database)):
        pass
    async with opened(mongodb_url(server.database)):  # a restart on an existing database
        pass
    db = server.admin[server.database]
    jobs = await db["jobs"].index_information()
    assert jobs["jobs_name"].get("unique") is True
    assert {"jobs_due", "jobs_next", "jobs_lease_expiry", "jobs_domain"} <= set(jobs)
    executions = await db["executions"].index_information()
    assert {"executions_by_job", "executions_by_time", "executions_by_status"} <= set(executions)


async def test_instances_starting_together_on_a_new_database_all_open(server: Server) -> None:
    # Two daemons deployed at once race to create the same collections and indexes; on FerretDB
    # asking for several at a time dropped one instance's connection in every try.
    url = mongodb_url(server.database)
    stores: list[MongoStore | MongoProductStore] = [
        MongoStore(url),
        MongoStore(url),
        MongoProductStore(url),
        MongoProductStore(url),
    ]
    try:
        await asyncio.gather(*(store.open() for store in stores))
        db = server.admin[server.database]
        assert "jobs_due" in await db["jobs"].index_information()
        assert len(await db["alerts"].index_information()) == 1 + len(ALERT_INDEXES)
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_stores_on_one_url_share_one_client_which_closes_with_the_last(
    server: Server,
) -> None:
    url = mongodb_url(server.database)
    first, second = MongoStore(url), MongoStore(url)
    await first.open()
    await second.open()
    try:
        assert first.database.client is second.database.client
        client = first.database.client
        await first.close()
        await second.insert_job(make_job("still-served"))
        assert await second.get_job_by_name("still-served") is not None
    finally:
        await second.close()
    with pytest.raises(InvalidOperation):
        await client.admin.command("ping")


async def test_the_database_is_the_url_path(server: Server, store: MongoStore) -> None:
    await store.insert_job(make_job("here"))
    found = await server.admin[server.database]["jobs"].find_one({"name": "here"})
    assert found is not None


# -- failing fast -------------------------------------------------------------------------------


def upstream() -> tuple[str, int]:
    parts = urlsplit(MONGODB_URL)
    return parts.hostname or "127.0.0.1", parts.port or 27017


async def transient_error_within(seconds: float, operation: Awaitable[object]) -> None:
    with pytest.raises(StoreError) as caught:
        await asyncio.wait_for(operation, seconds)
    assert caught.value.transient


async def test_a_server_that_goes_away_is_a_quick_transient_store_error(server: Server) -> None:
    proxy = LoopbackProxy(upstream())
    url = f"mongodb://127.0.0.1:{await proxy.start()}/"
    async with opened(url + server.database) as store:
        job = make_job()
        await store.insert_job(job)

        await proxy.stop()

        # The first call finds its connection dropped; the next one finds nobody listening.
        await transient_error_within(FAIL_FAST_SECONDS, store.get_job(job.id))
        await transient_error_within(FAIL_FAST_SECONDS, store.due_jobs(T0, 10))


async def test_a_server_that_never_answers_is_a_quick_transient_store_error() -> None:
    silent = LoopbackProxy(None)
    store = MongoStore(f"mongodb://127.0.0.1:{await silent.start()}/tickd_unreachable")
    try:
        await transient_error_within(FAIL_FAST_SECONDS, store.open())
    finally:
        await store.close()
        await silent.stop()


def pushed_down(query: Mapping[str, Any]) -> bool:
    """Whether FerretDB 1.24 can push part of this filter down to PostgreSQL: an equality on a
    top-level field with a string, number or bool (`{f: v}`, `$eq`, `$ne`). Without one it
    decodes every document of the collection to evaluate the filter in Go."""

    def scalar(value: Any) -> bool:
        return isinstance(value, str | int | float | bool)

    for field, value in query.items():
        if field.startswith("$") or "." in field:
            continue
        if scalar(value):
            return True
        if isinstance(value, Mapping) and any(
            op in ("$eq", "$ne") and scalar(operand) for op, operand in value.items()
        ):
            return True
    return False


def filters_sent(commands: list[tuple[str, Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    """The filter of every read and write command: finds, counts' and aggregations' first
    $match, and each statement of an update; not those on `instances` (one document an
    instance)."""
    found: list[Mapping[str, Any]] = []
    for name, command in commands:
        if command.get(name) == "instances":
            continue
        if name == "find":
            found.append(command.get("filter", {}))
        elif name == "aggregate" and command["pipeline"] and "$match" in command["pipeline"][0]:
            found.append(command["pipeline"][0]["$match"])
        elif name == "update":
            found += [statement["q"] for statement in command["updates"]]
        elif name == "delete":
            found += [statement["q"] for statement in command["deletes"]]
    return found


@asynccontextmanager
async def ferretdb_store_recorded(
    server: Server,
) -> AsyncIterator[tuple[MongoStore, CommandRecorder]]:
    """A store on FerretDB whose commands are recorded (the test is skipped on MongoDB, whose
    indexes serve any of these filters)."""
    if not await server.is_ferretdb():
        pytest.skip("MongoDB serves these filters from its indexes")
    recorder = CommandRecorder()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(MONGODB_URL, event_listeners=[recorder])
    try:
        async with opened(client, database=server.database) as store:
            yield store, recorder
    finally:
        await client.close()


def assert_every_filter_pushed_down(recorder: CommandRecorder) -> None:
    sent = filters_sent(recorder.commands)
    assert sent
    assert [query for query in sent if not pushed_down(query)] == []


async def test_the_ticks_periodic_reads_filter_on_a_field_ferretdb_pushes_down(
    server: Server,
) -> None:
    """The reaper, the heartbeat's expiry, the backlog gauge and the due queries of jobs and run
    requests run every tick or every few seconds; on FerretDB a filter it cannot push down
    decodes the whole collection each time."""
    async with ferretdb_store_recorded(server) as (store, recorder):
        jobs = [make_job(f"job-{i}") for i in range(3)]
        await store.insert_missing_jobs(jobs)
        await store.claim_jobs([claim_of(jobs[0], owner="gone")], T0)
        await store.beat("gone", T0 - timedelta(minutes=10))
        triggered = RunRequest(
            id="request-1",
            job_id=jobs[1].id,
            scheduled_at=T0,
            reason="trigger",
            not_before=T0,
            created_at=T0,
        )
        await store.insert_run_requests([triggered])
        recorder.commands.clear()

        now = T0 + timedelta(minutes=1)
        await store.due_jobs(now, 10, DueFilter(starved_before=T0))
        assert [r.id for r, _ in await store.due_run_requests(now, 10)] == [triggered.id]
        await store.due_backlog(now)
        assert await store.instances() == {"gone": T0 - timedelta(minutes=10)}
        assert await store.end_leases(["gone"]) == [(jobs[0].id, None)]
        reaped = await store.reap_expired_leases(now + timedelta(seconds=1), instance="alive")
        assert reaped == []  # the claim recorded no execution; its lease is released
        assert (await store.due_backlog(now)).due == 3

    assert_every_filter_pushed_down(recorder)


async def test_the_relays_pruning_reads_one_minute_of_sent_events_at_a_time(
    server: Server,
) -> None:
    """The relay prunes sent events after every pass; on FerretDB a range on when they were sent
    decoded every event the outbox held, and at 100 events a second the relay fell behind. After
    its first prune (which clears whatever an earlier process left), it reads by the minute."""
    async with ferretdb_store_recorded(server) as (store, recorder):
        jobs = [make_job(f"job-{i}") for i in range(2)]
        for job in jobs:
            await store.insert_job(job)
        runs = [running(await claimed(store, job), 1) for job in jobs]
        await store.insert_executions(runs, event_source=SOURCE)
        first, second = await store.unsent_events(10)
        await store.mark_events_sent([first.id], T0)
        assert await store.prune_sent_events(T0 + timedelta(minutes=5), limit=10) == 1
        await store.mark_events_sent([second.id], T0 + timedelta(minutes=6))
        recorder.commands.clear()

        assert await store.prune_sent_events(T0 + timedelta(minutes=6), limit=10) == 0
        assert await store.prune_sent_events(T0 + timedelta(minutes=8), limit=10) == 1

    assert_every_filter_pushed_down(recorder)


async def test_a_minute_of_more_sent_events_than_a_prune_takes_goes_by_the_events_each_mark_sent(
    server: Server,
) -> None:
    """At a few hundred events a second a minute holds tens of thousands. Deleted by the minute
    alone, FerretDB read the rest of the minute again for each `limit` deleted (it evaluates
    the `_id` $in in Go), and the time grew with the square of the minute. Each delete names
    the time of one mark as well, which it pushes down, and stays within the limit."""
    async with ferretdb_store_recorded(server) as (store, recorder):
        jobs = [make_job(f"job-{i}") for i in range(6)]
        for job in jobs:
            await store.insert_job(job)
        await store.insert_executions(
            [running(await claimed(store, job), 1) for job in jobs], event_source=SOURCE
        )
        assert await store.prune_sent_events(T0, limit=10) == 0  # the first prune reads all
        events = [event.id for event in await store.unsent_events(10)]
        marks = [T0 + timedelta(seconds=second) for second in range(3)]  # all in one minute
        for second, at in enumerate(marks):
            await store.mark_events_sent(events[2 * second : 2 * second + 2], at)

        pruned, deletes = [], []
        for _ in range(3):
            recorder.commands.clear()
            pruned.append(await store.prune_sent_events(T0 + timedelta(minutes=5), limit=4))
            deletes.append(filters_sent([c for c in recorder.commands if c[0] == "delete"]))

    assert pruned == [4, 2, 0]
    # More than the limit in the minute: one delete for the events of each mark among them.
    named = [query.get("sent_at_us") for query in deletes[0]]
    assert len(set(named)) == len(named) and set(named) <= {exact_micros(at) for at in marks}
    assert [set(query) for query in deletes[1]] == [{"sent_minute", "_id"}], "the rest at once"


# What retention reads executions by after its first call: equalities FerretDB pushes down and
# its GIN twins serve, each matching a bucket, a job or a document.
RETENTION_KEYS = ("finished_hour", "finished_minute", "job_id", "_id")


def reads_a_bucket(query: Mapping[str, Any]) -> bool:
    return any(isinstance(query.get(key), str | int) for key in RETENTION_KEYS)


async def test_retention_reads_executions_by_the_hour_and_minute_they_finished_in(
    server: Server,
) -> None:
    """Every minute, on every execution: a range and a sort on when they finished, or a $group
    over them all, made FerretDB decode every execution on each pass (past about 25,000 a pass
    timed out). After its first call, which reads the executions once, retention reads by
    buckets only, and only what finished since."""
    async with ferretdb_store_recorded(server) as (store, recorder):
        jobs = [make_job(f"job-{i}") for i in range(3)]
        old = T0 - timedelta(days=2)
        runs = [ended(job, old + timedelta(minutes=37 * i)) for job in jobs for i in range(5)]
        await store.insert_executions(runs)
        retention = Retention(days=1, max_per_job=3)
        assert await store.prune_executions(retention, T0, limit=4) == 4
        recorder.commands.clear()

        assert await store.prune_executions(retention, T0, limit=100) == 8
        fresh = [ended(job, T0 + timedelta(seconds=n)) for job in jobs for n in range(4)]
        await store.insert_executions(fresh)
        # Each job's old newest (superseded now) by age, and each job's fourth newest by count.
        assert await store.prune_executions(retention, T0 + timedelta(hours=1), limit=100) == 6

    on_executions = [(name, command) for name, command in recorder.commands
                     if command.get(name) == "executions" and name != "insert"]  # fmt: skip
    read = filters_sent(on_executions)
    assert len(read) == len(on_executions)  # every command on executions has its filter seen
    assert [query for query in read if not reads_a_bucket(query)] == []


async def test_executions_written_before_the_finish_buckets_are_pruned_after_open(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Executions stored before `finished_hour` and `finished_minute` existed: the store adds
    them when it opens (a few thousand at most: each is an update on FerretDB), retention's first
    read the rest, and any an older instance writes later, so retention, which reads by them
    only, still prunes all of those."""
    monkeypatch.setattr(mongodb_base_module, "MIGRATED_AT_OPEN", 3)
    job = make_job()
    runs = [ended(job, T0 - timedelta(days=3, minutes=i)) for i in range(6)]
    runs.append(ended(job, T0 - timedelta(hours=1)))
    async with opened(mongodb_url(server.database)) as store:
        await store.insert_executions(runs)
    db = server.admin[server.database]
    unset = {"$unset": {"finished_hour": "", "finished_minute": ""}}
    await db["executions"].update_many({}, unset)
    await db["migrations"].drop()  # as the database of a version before them
    unbucketed = {"finished_hour": {"$exists": False}}

    retention = Retention(days=1, max_per_job=0)
    async with opened(mongodb_url(server.database)) as store:
        assert await db["executions"].count_documents(unbucketed) == 7 - 3
        assert await store.prune_executions(retention, T0, limit=4) == 4
        assert await db["executions"].count_documents(unbucketed) == 0
    async with opened(mongodb_url(server.database)) as store:
        await db["executions"].update_many({}, unset)  # an older instance, after the open
        assert await store.prune_executions(retention, T0, limit=100) == 2
        assert await stored_ids(store) == {runs[-1].id}
    assert await db["migrations"].count_documents({"_id": "executions.finish_buckets"}) == 1


async def test_documents_written_before_the_pushdown_fields_are_due_and_reaped_after_open(
    server: Server,
) -> None:
    """Jobs and run requests stored before `leased` and `ended: false` existed: the store adds
    them once when it opens, so a free job is still due and an expired lease still reaped."""
    free, held = make_job("free"), make_job("held")
    request = RunRequest(
        id="request-1",
        job_id=free.id,
        scheduled_at=T0,
        reason="trigger",
        not_before=T0,
        created_at=T0,
    )
    async with opened(mongodb_url(server.database)) as store:
        await store.insert_missing_jobs([free, held])
        await store.claim_jobs([claim_of(held)], T0)
        await store.insert_run_requests([request])
    db = server.admin[server.database]
    await db["jobs"].update_many({}, {"$unset": {"leased": ""}})
    await db["run_requests"].update_many({}, {"$set": {"ended": None}, "$unset": {"leased": ""}})

    async with opened(mongodb_url(server.database)) as store:
        after_lease = T0 + timedelta(minutes=6)
        assert [job.id for job in await store.due_jobs(T0, 10)] == [free.id]
        assert [(r.id, job.id) for r, job in await store.due_run_requests(T0, 10)] == [
            (request.id, free.id)
        ]
        await store.reap_expired_leases(after_lease)
        assert {job.id for job in await store.due_jobs(after_lease, 10)} == {free.id, held.id}
    async with opened(mongodb_url(server.database)):  # a second open changes nothing more
        pass
    assert await db["jobs"].count_documents({"leased": {"$exists": False}}) == 0


async def test_jobs_written_before_partitions_get_theirs_at_open_and_are_read_by_them(
    server: Server,
) -> None:
    jobs = [make_job(f"old-{i}") for i in range(12)]
    async with opened(mongodb_url(server.database)) as store:
        await store.insert_missing_jobs(jobs)
    db = server.admin[server.database]
    await db["jobs"].update_many({}, {"$unset": {"part": ""}})
    await db["migrations"].delete_many({"_id": "jobs.part"})  # a database of a version before

    async with opened(mongodb_url(server.database)) as store:
        count = store.partition_count
        for part in {partition_of(job.id, count) for job in jobs}:
            read = await store.due_jobs(T0, 100, DueFilter(partitions=[part]))
            assert {job.id for job in read} == {
                job.id for job in jobs if partition_of(job.id, count) == part
            }
    assert await db["jobs"].count_documents({"part": {"$exists": False}}) == 0
    # An older instance still running (a rolling upgrade) writes a job without one: every
    # instance reads it, until an open gives it its partition.
    async with opened(mongodb_url(server.database)) as store:
        await db["jobs"].update_one({"_id": jobs[0].id}, {"$unset": {"part": ""}})
        elsewhere = (partition_of(jobs[0].id, store.partition_count) + 1) % store.partition_count
        read = await store.due_jobs(T0, 100, DueFilter(partitions=[elsewhere]))
        assert jobs[0].id in {job.id for job in read}


async def test_the_backlog_gauges_are_one_read_each(server: Server) -> None:
    """Read every few seconds: on FerretDB each read of the due jobs decodes all of them."""
    recorder = CommandRecorder()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(MONGODB_URL, event_listeners=[recorder])
    try:
        async with opened(client, database=server.database) as store:
            await store.insert_missing_jobs([make_job(f"job-{i}") for i in range(3)])
            recorder.commands.clear()
            backlog = await store.due_backlog(T0 + timedelta(minutes=1))
            assert recorder.names == ["find"]
            assert (backlog.due, backlog.oldest_due_at) == (3, T0)

            recorder.commands.clear()
            assert (await store.outbox_backlog()).unsent == 0
            assert len(recorder.names) == 1
    finally:
        await client.close()


class Crash(Exception):
    """The process dies here."""


@pytest.mark.parametrize(
    "edit",
    [None, {"enabled": False, "paused_reason": "maintenance"}, {"max_retries": 5}],
    ids=["as-claimed", "paused", "retries-edited"],
)
async def test_a_crash_between_a_runs_execution_and_its_job_is_rolled_forward_by_the_reaper(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch, edit: dict[str, Any] | None
) -> None:
    """A run's end writes its execution, then its job (two commands: no transaction). A crash in
    between left a succeeded run whose job still held its lease at the old time: the reaper
    freed the job and the occurrence ran twice. The execution keeps the job's update, which
    the reaper applies instead (and, if ops changed when the job runs meanwhile, without the
    schedule)."""
    job = make_job("ended-then-crashed")
    await store.insert_job(job)
    won = await claimed(store, job)
    assert won.lease is not None
    execution = running(won, won.lease.token)
    await store.insert_executions([execution])
    if edit is not None:
        edited = dataclasses.replace(job, **edit)
        assert await store.replace_job(edited, job.revision, change_of(job, "update"))
    done = dataclasses.replace(execution, status=Status.SUCCESS, finished_at=T0, attempts=1)
    advance = dataclasses.replace(
        advance_to(T0 + timedelta(minutes=1), done), claimed_next_run_at=job.next_run_at
    )

    async def crash(*args: object, **kwargs: object) -> set[str]:
        raise Crash

    with monkeypatch.context() as patched:
        patched.setattr(store, "_release", crash)
        with pytest.raises(Crash):
            await store.write_ends([RunEnd(done, advance)])

    after_lease = T0 + timedelta(minutes=6)
    assert await store.reap_expired_leases(after_lease) == [], "it ended: nothing to abandon"
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None
    assert after.last_execution is not None and after.last_execution.execution_id == done.id
    if edit is not None and "enabled" in edit:
        assert (after.enabled, after.paused_reason, after.next_run_at) == (False, "maintenance", T0)
    else:
        assert after.next_run_at == T0 + timedelta(minutes=1)
    not_again = await store.due_jobs(T0 + timedelta(seconds=30), 10)
    assert not_again == [], "the occurrence (T0) does not run again"
    assert await store.get_execution(done.id) == done


async def test_a_requested_run_rolled_forward_by_the_reaper_leaves_the_queue(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trigger stays queued while it runs, and its end takes it off before freeing the job.
    A crash after its execution was written: the reaper rolls the end forward, the request
    with it, so the trigger does not run a second time."""
    job = make_job("triggered-then-crashed", next_run_at=T0 + timedelta(days=1))
    await store.insert_job(job)
    request = request_for(job)
    await store.insert_run_requests([request])
    claim = Claim(job_id=job.id, revision=job.revision, next_run_at=None, owner="a", until=T0)
    [(_, won)] = await store.claim_run_requests([request], [claim], T0)
    assert won.lease is not None
    done = dataclasses.replace(
        running(won, won.lease.token), status=Status.SUCCESS, finished_at=T0, attempts=1
    )

    async def crash(*args: object, **kwargs: object) -> None:
        raise Crash

    end = RunEnd(done, advance_to(won.next_run_at, done), request_id=request.id)
    with monkeypatch.context() as patched:
        patched.setattr(store, "_take_off_queue", crash)
        with pytest.raises(Crash):
            await store.write_ends([end])

    assert await store.reap_expired_leases(T0 + timedelta(minutes=6)) == []
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None
    assert await store.due_run_requests(T0 + timedelta(days=2), 10) == [], "not run again"
