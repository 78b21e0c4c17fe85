"""What the PostgreSQL store promises beyond the store contract: its schema is applied once
however many instances open it at once; a claim is one statement, and two claimers racing for
the same due jobs never both win one, nor two engines sharing no lock; the due read seeks the
due index."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.conftest import T0, EngineFactory, make_job
from tests.fixtures.stores import postgresql_url
from tickd.scheduler.model import (
    DeadLetter,
    Execution,
    Job,
    Priority,
    RedrivePolicy,
    Status,
    new_id,
)
from tickd.scheduler.partitions import partition_of
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import (
    Claim,
    DueFilter,
    ExecutionQuery,
    LeaseTerms,
    RunRequest,
    StoreError,
)
from tickd.scheduler.ports.store_operations import STORE_OPERATIONS
from tickd.scheduler.store.postgresql import PostgresStore
from tickd.scheduler.store.postgresql import base as postgresql_base
from tickd.scheduler.store.postgresql.due import claim_due_sql, due_sql
from tickd.scheduler.store.postgresql.schema import VERSION


def claim_of(job: Job, owner: str) -> Claim:
    return Claim(
        job_id=job.id,
        revision=job.revision,
        next_run_at=job.next_run_at,
        owner=owner,
        until=T0 + timedelta(minutes=5),
    )


async def noop(ctx: HandlerContext) -> Result:
    return None


def due_jobs(count: int, prefix: str = "due") -> list[Job]:
    return [
        make_job(f"{prefix}-{i:05}", next_run_at=T0 - timedelta(microseconds=i))
        for i in range(count)
    ]


async def test_instances_opening_at_once_apply_each_migration_once(
    postgresql_database: str,
) -> None:
    stores = [PostgresStore(postgresql_database) for _ in range(5)]
    try:
        await asyncio.gather(*(store.open() for store in stores[:4]))
        await stores[4].open()  # a later one finds the schema in place
        job = make_job()
        await stores[0].insert_job(job)
        assert await stores[4].get_job(job.id) == job
    finally:
        for store in stores:
            await store.close()
    db = await asyncpg.connect(postgresql_database)
    try:
        rows = await db.fetch("SELECT version, count(*) FROM schema_version GROUP BY version")
    finally:
        await db.close()
    assert sorted((row[0], row[1]) for row in rows) == [(v, 1) for v in range(1, VERSION + 1)]


async def test_a_claim_is_one_statement_whatever_the_batch(
    postgresql_store: PostgresStore,
) -> None:
    await postgresql_store.insert_missing_jobs(due_jobs(50))
    due = await postgresql_store.due_jobs(T0, 50)
    before = STORE_OPERATIONS.snapshot()
    won = await postgresql_store.claim_jobs([claim_of(job, "a") for job in due], T0)
    spent = Counter(STORE_OPERATIONS.snapshot()) - Counter(before)
    assert len(won) == 50
    assert spent == Counter({("postgresql", "statement"): 1}), spent


async def test_claimers_racing_for_the_same_jobs_never_both_win_one(
    postgresql_database: str,
) -> None:
    stores = [PostgresStore(postgresql_database) for _ in range(2)]
    for store in stores:
        await store.open()
    try:
        await stores[0].insert_missing_jobs(due_jobs(40))
        for _ in range(10):
            due = await stores[0].due_jobs(T0, 40)
            a, b = await asyncio.gather(
                stores[0].claim_jobs([claim_of(job, "a") for job in due], T0),
                stores[1].claim_jobs([claim_of(job, "b") for job in reversed(due)], T0),
            )
            won_a, won_b = {job.id for job in a}, {job.id for job in b}
            assert not won_a & won_b
            assert all(job.lease is not None and job.lease.owner == "a" for job in a)
            assert all(job.lease is not None and job.lease.owner == "b" for job in b)
            held = [job for job in await stores[0].list_jobs() if job.lease is not None]
            assert {job.id for job in held} == won_a | won_b
            leases = [(job.id, job.lease.token) for job in held if job.lease is not None]
            await stores[0].give_back(leases)
    finally:
        for store in stores:
            await store.close()


LEASE = LeaseTerms(owner="a", margin_seconds=30.0)


async def test_a_claim_at_the_read_takes_what_the_read_would_in_its_order_leased_in_one_statement(
    postgresql_store: PostgresStore,
) -> None:
    priorities = list(Priority)
    jobs = [
        make_job(
            f"job-{i:03}",
            next_run_at=T0 - timedelta(seconds=i),
            priority=priorities[i % len(priorities)],
            timeout_seconds=10 + i,
        )
        for i in range(60)
    ]
    ahead = make_job("ahead", next_run_at=T0 + timedelta(seconds=2), timeout_seconds=5)
    await postgresql_store.insert_missing_jobs([*jobs, ahead])
    starved, first = T0 - timedelta(seconds=50), [jobs[3].id, jobs[20].id]
    horizon = T0 + timedelta(seconds=5)
    read = await postgresql_store.due_jobs(
        horizon, 40, DueFilter(starved_before=starved, first=first)
    )
    before = STORE_OPERATIONS.snapshot()
    claimed = await postgresql_store.claim_due_jobs(
        T0, horizon, 40, lease=LEASE, where=DueFilter(starved_before=starved, first=first)
    )
    spent = Counter(STORE_OPERATIONS.snapshot()) - Counter(before)
    assert spent == Counter({("postgresql", "statement"): 1}), spent
    assert claimed is not None
    assert [job.id for job in claimed] == [job.id for job in read]
    by_id = {job.id: job for job in [*jobs, ahead]}
    for job in claimed:
        assert job.lease is not None and job.lease.owner == "a"
        starts = max(T0, by_id[job.id].next_run_at or T0)
        assert job.lease.until == starts + timedelta(seconds=job.timeout_seconds + 30.0)
    left = {job.id for job in await postgresql_store.due_jobs(horizon, 100)}
    assert left == {job.id for job in [*jobs, ahead]} - {job.id for job in read}


async def test_a_claim_at_the_read_passes_over_jobs_another_claimer_holds_beyond_its_limit(
    postgresql_store: PostgresStore, postgresql_database: str
) -> None:
    """Two instances claiming at once take two heads of the queue: the rows the other holds
    are passed over and do not count against the limit, so neither comes back empty."""
    jobs = due_jobs(30)  # the first is due last
    await postgresql_store.insert_missing_jobs(jobs)
    other = await asyncpg.connect(postgresql_database)
    try:
        holding = other.transaction()
        await holding.start()
        held = await other.fetch("SELECT id FROM jobs ORDER BY next_run_at LIMIT 10 FOR UPDATE")
        async with asyncio.timeout(5):  # a wait would last until the holder commits
            claimed = await postgresql_store.claim_due_jobs(T0, T0, 10, lease=LEASE)
        await holding.rollback()
    finally:
        await other.close()
    assert claimed is not None
    oldest = [job.id for job in reversed(jobs)]
    assert {row["id"] for row in held} == set(oldest[:10])
    assert [job.id for job in claimed] == oldest[10:20]


async def test_claimers_at_the_read_racing_for_the_same_jobs_take_each_once(
    postgresql_database: str,
) -> None:
    stores = [PostgresStore(postgresql_database) for _ in range(2)]
    for store in stores:
        await store.open()
    try:
        await stores[0].insert_missing_jobs(due_jobs(200))
        won: list[Job] = []
        for _ in range(5):
            a, b = await asyncio.gather(
                stores[0].claim_due_jobs(T0, T0, 20, lease=LEASE),
                stores[1].claim_due_jobs(T0, T0, 20, lease=LeaseTerms(owner="b", margin_seconds=1)),
            )
            assert a is not None and b is not None
            assert all(job.lease is not None and job.lease.owner == "a" for job in a)
            assert all(job.lease is not None and job.lease.owner == "b" for job in b)
            won += a + b
        ids = [job.id for job in won]
        assert len(ids) == len(set(ids)) == 200
        assert await stores[0].due_jobs(T0, 10) == []
    finally:
        for store in stores:
            await store.close()


async def test_a_claim_in_some_partitions_takes_only_their_jobs_and_those_without_one(
    postgresql_store: PostgresStore, postgresql_database: str
) -> None:
    """Each instance claims its share: a burst falling due within one instance's lookahead is
    not all its own. A job an older tickd wrote has no partition until the next open: every
    instance may claim it."""
    store = postgresql_store
    jobs = due_jobs(120)
    await store.insert_missing_jobs(jobs)
    count = store.partition_count
    mine = list(range(0, count, 2))
    older = jobs[0]
    db = await asyncpg.connect(postgresql_database)
    try:
        await db.execute("UPDATE jobs SET part = NULL WHERE id = $1", older.id)
        claimed = await store.claim_due_jobs(
            T0, T0, 500, lease=LEASE, where=DueFilter(partitions=mine)
        )
        assert claimed is not None
        expected = {j.id for j in jobs if partition_of(j.id, count) in mine} | {older.id}
        assert {job.id for job in claimed} == expected
        read = await store.due_jobs(T0, 500, DueFilter(partitions=[p + 1 for p in mine]))
        assert {job.id for job in read} == {j.id for j in jobs} - expected
        # The next open gives it its partition.
        await db.execute("UPDATE jobs SET part = NULL")
        again = PostgresStore(postgresql_database)
        await again.open()
        await again.close()
        parts = dict(await db.fetch("SELECT id, part FROM jobs"))
        assert parts == {j.id: partition_of(j.id, count) for j in jobs}
    finally:
        await db.close()


async def test_a_requested_run_passes_over_a_job_another_transaction_holds(
    postgresql_store: PostgresStore, postgresql_database: str
) -> None:
    """Two instances claiming requests of the same jobs in different orders would each wait
    for the other's job (a deadlock, and a whole batch rolled back): a held job is passed
    over, its request stays queued, and it is claimed once the holder is done."""
    held, free = make_job("held"), make_job("free")
    await postgresql_store.insert_missing_jobs([held, free])
    requests = [
        RunRequest(
            id=new_id(),
            job_id=job.id,
            scheduled_at=T0,
            reason="trigger",
            not_before=T0,
            created_at=T0,
        )
        for job in (held, free)
    ]
    await postgresql_store.insert_run_requests(requests)
    claims = [claim_of(held, "a"), claim_of(free, "a")]
    other = await asyncpg.connect(postgresql_database)
    try:
        holding = other.transaction()
        await holding.start()
        await other.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", held.id)
        async with asyncio.timeout(5):  # a wait would last until the holder commits
            won = await postgresql_store.claim_run_requests(requests, claims, T0)
        assert [job.id for _, job in won] == [free.id]
        await holding.rollback()
    finally:
        await other.close()
    assert await postgresql_store.run_request_pending(held.id, T0)
    won = await postgresql_store.claim_run_requests(requests[:1], claims[:1], T0)
    assert [job.id for _, job in won] == [held.id]


async def test_two_reapers_judge_a_run_abandoned_past_its_retries_once(
    postgresql_database: str,
) -> None:
    """The first reap writes the dead letter in its own transaction. Written after it, the
    dead letter left a moment in which another instance's reap judged the run again, and the
    loser of the two ends marked it open while its re-drive was queued."""
    first, second = PostgresStore(postgresql_database), PostgresStore(postgresql_database)
    for store in (first, second):
        await store.open()
    try:
        job = make_job(
            "flaky", max_retries=0, redrive=RedrivePolicy(max_attempts=3, backoff_seconds=60)
        )
        await first.insert_job(job)
        [claimed] = await first.claim_jobs([claim_of(job, "dead")], T0)
        assert claimed.lease is not None
        run = Execution(
            job_id=job.id,
            job_name=job.name,
            handler=job.handler,
            scheduled_at=T0,
            status=Status.RUNNING,
            started_at=T0,
            owner="dead",
            token=claimed.lease.token,
        )
        await first.insert_executions([run])
        await first.end_leases(["dead"])

        # An end written apart from the reap waits here until the second reap is done.
        later, writing = asyncio.Event(), asyncio.Event()
        write_ends = first.write_ends

        async def held_back(*args: Any, **kwargs: Any) -> list[bool]:
            writing.set()
            await later.wait()
            return await write_ends(*args, **kwargs)

        first.write_ends = held_back  # type: ignore[method-assign]
        reaping = asyncio.create_task(first.reap_expired_leases(T0, instance="a"))
        waiting = asyncio.create_task(writing.wait())
        await asyncio.wait({reaping, waiting}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        again = await second.reap_expired_leases(T0, instance="b")
        later.set()
        [reaped] = await reaping

        assert again == []
        assert reaped.dead_letter is DeadLetter.REDRIVING
        stored = await first.get_execution(run.id)
        assert stored is not None and stored.dead_letter is DeadLetter.REDRIVING
        queued = await asyncpg.connect(postgresql_database)
        try:
            sql = "SELECT count(*) FROM run_requests WHERE job_id = $1 AND reason = 'redrive'"
            assert await queued.fetchval(sql, job.id) == 1
        finally:
            await queued.close()
    finally:
        for store in (first, second):
            await store.close()


async def test_the_due_read_and_the_claim_at_the_read_seek_the_due_index(
    postgresql_store: PostgresStore, postgresql_database: str
) -> None:
    priorities = list(Priority)
    later = [
        make_job(
            f"later-{i:05}",
            next_run_at=T0 + timedelta(seconds=i),
            priority=priorities[i % len(priorities)],
        )
        for i in range(5_000)
    ]
    await postgresql_store.insert_missing_jobs(later)
    await postgresql_store.insert_missing_jobs(due_jobs(50))
    reads = [due_sql(T0, 100), claim_due_sql(T0, T0, 100, LEASE)]
    db = await asyncpg.connect(postgresql_database)
    try:
        await db.execute("ANALYZE jobs")
        plans = [
            "\n".join(row[0] for row in await db.fetch(f"EXPLAIN {sql}", *args))
            for sql, args in reads
        ]
    finally:
        await db.close()
    for plan in plans:  # the read, and the claim at the read
        assert "Seq Scan" not in plan, plan
        assert any(
            f"{scan} on jobs_due" in plan or f"{scan} using jobs_due" in plan
            for scan in ("Index Scan", "Bitmap Index Scan", "Index Only Scan")
        ), plan


async def test_a_due_read_of_one_domain_seeks_its_jobs_alone_however_many_others_are_due(
    postgresql_store: PostgresStore, postgresql_database: str
) -> None:
    """A dispatcher that reads a quiet domain's head apart from a busy one's reads the quiet
    one's rows, not the busy one's backlog; even when most of the quiet one's jobs are not due
    yet, so that the planner, which takes a job's domain and its time as unrelated, expects
    its due jobs among the busy one's."""
    priorities = list(Priority)
    busy = [
        make_job(
            f"busy-{i:05}",
            domain="busy",
            next_run_at=T0 - timedelta(microseconds=i),
            priority=priorities[i % len(priorities)],
        )
        for i in range(3_000)
    ]
    await postgresql_store.insert_missing_jobs(busy)
    quiet = [replace(job, domain="quiet") for job in due_jobs(30, prefix="quiet")]
    later = [
        make_job(f"later-{i:05}", domain="quiet", next_run_at=T0 + timedelta(seconds=1 + i))
        for i in range(3_000)
    ]
    await postgresql_store.insert_missing_jobs([*quiet, *later])
    only = ["quiet"]
    reads = [
        due_sql(T0, 100, DueFilter(domains=only)),
        claim_due_sql(T0, T0, 100, LEASE, DueFilter(domains=only)),
    ]
    db = await asyncpg.connect(postgresql_database)
    try:
        await db.execute("ANALYZE jobs")
        plans = [
            "\n".join(row[0] for row in await db.fetch(f"EXPLAIN {sql}", *args))
            for sql, args in reads
        ]
    finally:
        await db.close()
    for plan in plans:  # the read, and the claim at the read (which updates by id after)
        assert "jobs_due_by_domain" in plan, plan
        assert "jobs_next" not in plan and "jobs_due " not in plan, plan
    assert "Seq Scan" not in plans[0], plans[0]
    read = await postgresql_store.due_jobs(T0, 100, DueFilter(domains=only))
    assert [job.name for job in read] == [job.name for job in reversed(quiet)]  # oldest first


async def test_a_server_that_does_not_answer_is_a_transient_store_error() -> None:
    """So that a daemon started before its database waits for it (open_patiently)."""
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/tickd")
    with pytest.raises(StoreError) as failed:
        await store.open()
    assert failed.value.transient


class SilentRelay:
    """A TCP relay to the real server that, once `silenced`, passes nothing more either way and
    closes nothing: a server cut off by the network, as its clients see it."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.silenced = False
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.relaying: list[asyncio.Task[Any]] = []

    async def start(self) -> str:
        """The address to connect to instead of the server's."""
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.relaying.append(task)
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, upstream_writer]
        await asyncio.gather(
            self._pipe(reader, upstream_writer),
            self._pipe(upstream_reader, writer),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.silenced:
                continue  # swallowed: the peer waits for an answer that never comes
            writer.write(data)
            await writer.drain()

    async def close(self) -> None:
        """No new connection (the client's pool keeps trying to reconnect), then every one
        closed both ways."""
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for w in self.writers), return_exceptions=True)
        await asyncio.gather(*self.relaying, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()


async def test_a_server_that_stops_answering_fails_a_call_in_bounded_time(
    postgresql_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen server or a network partition closes no connection: without a bound on each
    statement, the dispatcher would wait on it for ever."""
    monkeypatch.setattr(postgresql_base, "COMMAND_SECONDS", 0.5)
    monkeypatch.setattr(postgresql_base, "CLOSE_SECONDS", 0.5)
    relay = SilentRelay(postgresql_database)
    address = await relay.start()
    through = urlsplit(postgresql_database)._replace(netloc=f"postgres@{address}")
    store = PostgresStore(urlunsplit(through))
    await store.open()
    try:
        await store.insert_job(make_job())
        relay.silenced = True
        async with asyncio.timeout(5):
            with pytest.raises(StoreError) as failed:
                await store.due_jobs(T0, 10)
        assert failed.value.transient
        async with asyncio.timeout(5):
            await store.close()  # it waits for no answer either
    finally:
        await store.close()
        await relay.close()


async def test_a_database_that_does_not_exist_is_a_store_error_no_retry_cures(
    postgresql_database: str,
) -> None:
    store = PostgresStore(postgresql_url("tickd_test_no_such_database"))
    with pytest.raises(StoreError) as failed:
        await store.open()
    assert not failed.value.transient


async def test_an_overview_read_past_its_time_limit_fails_saying_so(
    postgresql_store: PostgresStore,
) -> None:
    """The dashboard's reads run under statement_timeout: one that takes too long is stopped
    by the server, and no retry helps."""
    postgresql_store.read_seconds = 0.001
    original = postgresql_store._limited

    async def slowed(fn: Any) -> Any:
        async def slow(tx: Any) -> Any:
            await tx.fetchval("SELECT pg_sleep(0.05)")
            return await fn(tx)

        return await original(slow)

    postgresql_store._limited = slowed  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="took too long") as stopped:
        await postgresql_store.execution_stats(T0 - timedelta(hours=1), T0, 60)
    assert not stopped.value.transient


@pytest.fixture
def store(postgresql_store: PostgresStore) -> PostgresStore:
    """The engines of make_engine, on PostgreSQL alone."""
    return postgresql_store


async def test_two_engines_without_a_shared_lock_run_each_due_job_once(
    make_engine: EngineFactory,
) -> None:
    """Each engine has a lock of its own, so only the store's claim keeps them apart."""
    engines = [make_engine({"noop": noop}, instance_id=f"instance-{n}") for n in range(2)]
    await engines[0].store.insert_missing_jobs(due_jobs(300))
    await asyncio.gather(*(h.engine.drain() for h in engines))
    runs = await engines[0].store.list_executions(ExecutionQuery(limit=1000))
    assert len(runs) == 300
    assert Counter(run.job_id for run in runs).most_common(1)[0][1] == 1
    assert {run.status for run in runs} == {Status.SUCCESS}
