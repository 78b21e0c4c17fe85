"""What the PostgreSQL store promises beyond the store contract: its schema is applied once
however many instances open it at once; a claim is one statement, and two claimers racing for
the same due jobs never both win one, nor two engines sharing no lock; the due read seeks the
due index."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from tests.conftest import T0, EngineFactory, make_job
from tests.fixtures.stores import postgresql_url
from tickd.scheduler.model import Job, Priority, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import Claim, ExecutionQuery, StoreError
from tickd.scheduler.ports.store_operations import STORE_OPERATIONS
from tickd.scheduler.store.postgresql import PostgresStore
from tickd.scheduler.store.postgresql.dispatch import due_sql
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


async def test_the_due_read_seeks_the_due_index(
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
    sql, args = due_sql(T0, 100, (), None, ())
    db = await asyncpg.connect(postgresql_database)
    try:
        await db.execute("ANALYZE jobs")
        plan = "\n".join(row[0] for row in await db.fetch(f"EXPLAIN {sql}", *args))
    finally:
        await db.close()
    assert any(
        f"{scan} on jobs_due" in plan or f"{scan} using jobs_due" in plan
        for scan in ("Index Scan", "Bitmap Index Scan", "Index Only Scan")
    ), plan


async def test_a_server_that_does_not_answer_is_a_transient_store_error() -> None:
    """So that a daemon started before its database waits for it (open_patiently)."""
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/tickd")
    with pytest.raises(StoreError) as failed:
        await store.open()
    assert failed.value.transient


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
