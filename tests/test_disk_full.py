"""The embedded store's disk full, two ways: SQLITE_FULL provoked with PRAGMA max_page_count on
each of the store's connections, and a real filesystem with no space left (a small tmpfs, filled up;
the database, its write-ahead log and its shared memory all on it). Either way the daemon says so
(log and readiness), the database stays whole, and work resumes when space returns, with no run
lost or run twice. A run that ends while the store refuses writes keeps its lease and its end
waits, tried again until the store takes it."""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import T0, EngineFactory, Harness, make_job
from tickd.scheduler.model import CronSchedule, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import ExecutionQuery, RunEnd, Store, StoreError
from tickd.scheduler.run.states import RunState
from tickd.scheduler.store.sqlite import SQLiteStore

WAIT = 5.0
JOBS = 20
# Longer than the 3 s after which a run's end used to be given up, and than the run's lease.
OUTAGE_SECONDS = 10.0
T = TypeVar("T")


# The small filesystem: room for the database and its log while the test fills it up.
DISK_BYTES = 4 * 1024 * 1024
FILLER_CHUNK = b"\0" * 65536


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A filesystem of its own, DISK_BYTES in all: a tmpfs mounted for the test (root only)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=False)


@pytest.fixture
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """This file's tests are about SQLite's file only; on the small filesystem if they ask."""
    folder = request.getfixturevalue("disk") if "disk" in request.fixturenames else tmp_path
    sqlite = SQLiteStore(f"sqlite:///{folder}/tickd.db")
    await sqlite.open()
    yield sqlite
    await sqlite.close()


def fill(folder: Path) -> Path:
    """Write a file until the filesystem refuses (ENOSPC); its removal gives the space back."""
    filler = folder / "filler"
    with filler.open("wb") as out:
        while True:
            try:
                out.write(FILLER_CHUNK)
                out.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return filler


async def pragma(store: SQLiteStore, sql: str) -> object:
    return await store._in_thread(lambda db: db.execute(sql).fetchone()[0])


async def pragma_on_each_connection(store: SQLiteStore, sql: str) -> None:
    """A per-connection setting, on the store's thread's connection and on the loop's."""
    await pragma(store, sql)
    if store._loop_db is not None:
        store._loop_db.execute(sql)


async def until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 - plain state, polled under the caller's bound
        await asyncio.sleep(0.005)


async def succeeded(store: Store) -> list[str]:
    runs = await store.list_executions(ExecutionQuery(limit=1000))
    return [e.job_name for e in runs if e.status is Status.SUCCESS]


async def noop(ctx: HandlerContext) -> Result:
    return None


async def full_then_freed(
    h: Harness,
    store: SQLiteStore,
    caplog: pytest.LogCaptureFixture,
    free: Callable[[], Awaitable[object]],
) -> None:
    """The disk is full when the engine starts: it says so and writes nothing half; `free` gives
    the space back, and then every job runs once and the database is whole."""
    stop = asyncio.Event()
    running = asyncio.create_task(h.engine.run(stop))
    try:
        with caplog.at_level(logging.ERROR, logger="tickd.engine"):
            await asyncio.wait_for(until(lambda: not h.engine.healthy), WAIT)
        assert h.engine.last_error is not None and "full" in h.engine.last_error  # /readyz
        errors = [str(r.tickd_fields.get("error")) for r in caplog.records]  # type: ignore[attr-defined]
        assert any("database or disk is full" in error for error in errors), errors
        assert await store.list_executions(ExecutionQuery()) == [], "nothing half-written"

        await free()

        async def all_ran() -> None:
            while len(await succeeded(store)) < JOBS:  # noqa: ASYNC110 - polled under a bound
                await asyncio.sleep(0.005)

        await asyncio.wait_for(all_ran(), WAIT)
        assert h.engine.healthy
    finally:
        stop.set()
        await asyncio.wait_for(running, WAIT)

    runs = await store.list_executions(ExecutionQuery(limit=1000))
    assert sorted(e.job_name for e in runs) == [f"job-{i:02}" for i in range(JOBS)], "each once"
    assert {(e.status, e.scheduled_at) for e in runs} == {(Status.SUCCESS, T0)}
    assert await pragma(store, "PRAGMA integrity_check") == "ok"


async def test_a_full_disk_is_reported_harms_nothing_and_work_resumes_when_space_returns(
    make_engine: EngineFactory, store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_engine({"noop": noop}, tick_seconds=0.01, lookahead_seconds=0)
    for i in range(JOBS):
        await h.add(make_job(f"job-{i:02}", next_run_at=T0))
    used = await pragma(store, "PRAGMA page_count")
    # Not one page more: the disk is full.
    await pragma_on_each_connection(store, f"PRAGMA max_page_count = {used}")

    async def space_back() -> None:
        await pragma_on_each_connection(store, "PRAGMA max_page_count = 1073741823")

    await full_then_freed(h, store, caplog, space_back)


async def test_a_real_filesystem_without_space_is_reported_and_work_resumes_when_freed(
    make_engine: EngineFactory, store: SQLiteStore, disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_engine({"noop": noop}, tick_seconds=0.01, lookahead_seconds=0)
    for i in range(JOBS):
        await h.add(make_job(f"job-{i:02}", next_run_at=T0))
    # The log emptied into the database and cut to nothing: the next write must grow a file.
    await pragma(store, "PRAGMA wal_checkpoint(TRUNCATE)")
    filler = fill(disk)

    async def space_back() -> None:
        filler.unlink()

    await full_then_freed(h, store, caplog, space_back)


def disk_full() -> sqlite3.OperationalError:
    """The error SQLite raises when a write finds no room (SQLITE_FULL)."""
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = sqlite3.SQLITE_FULL
    error.sqlite_errorname = "SQLITE_FULL"
    return error


def no_room(db: sqlite3.Connection) -> None:
    """A write that finds the disk full."""
    raise disk_full()


def refuse_writes(
    monkeypatch: pytest.MonkeyPatch, store: SQLiteStore, refusing: Callable[[], bool]
) -> list[str]:
    """While `refusing()`, every transaction of the store that changes a row fails as SQLite's
    do on a full disk (SQLITE_FULL, rolled back); reads still answer. Returns the refusals."""
    refused: list[str] = []
    run = store._run

    async def unless_full(fn: Callable[[sqlite3.Connection], T], *, at_once: bool = False) -> T:
        def refused_if_it_writes(db: sqlite3.Connection) -> T:
            before = db.total_changes
            result = fn(db)
            if refusing() and db.total_changes != before:
                refused.append("database or disk is full")
                raise disk_full()
            return result

        return await run(refused_if_it_writes, at_once=at_once)

    monkeypatch.setattr(store, "_run", unless_full)
    return refused


async def test_a_run_that_ends_while_the_store_refuses_writes_is_recorded_once_it_takes_them(
    make_engine: EngineFactory, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    outage_until: list[float] = []

    async def ends_as_the_disk_fills(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        outage_until.append(h.clock.monotonic() + OUTAGE_SECONDS)
        return None

    h = make_engine({"fills": ends_as_the_disk_fills}, lease_margin_seconds=2)
    refused = refuse_writes(
        monkeypatch, store, lambda: bool(outage_until) and h.clock.monotonic() < outage_until[0]
    )
    job = await h.add(
        make_job(
            "nightly",
            "fills",
            schedule=CronSchedule(expr="0 0 3 * * *"),
            timeout_seconds=1,
            max_retries=0,
        )
    )
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1

    await asyncio.wait_for(h.engine.settled(), WAIT)  # returns once the end is written
    runs = await store.list_executions(ExecutionQuery(job_id=job.id))
    assert [(e.status, e.scheduled_at) for e in runs] == [(Status.SUCCESS, T0)]
    assert len(refused) > 1, "the end was refused, and tried again"
    assert h.clock.monotonic() >= outage_until[0], "written once the store took writes again"
    stored = await store.get_job(job.id)
    assert stored is not None and stored.lease is None and stored.next_run_at != T0

    # Well past its lease: the reaper finds nothing of it, and it does not run again.
    h.clock.advance(60)
    h.engine.leases.reap_soon()
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert ran == ["nightly"]
    assert len(await store.list_executions(ExecutionQuery(job_id=job.id))) == 1


async def test_a_run_whose_end_waits_for_the_store_past_its_lease_is_not_reaped_nor_run_again(
    make_engine: EngineFactory, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its end waits (the store is behind); the dispatcher renews the run's lease before its
    reaper looks, so the occurrence is not abandoned and run a second time."""
    ran: list[str] = []
    gate = asyncio.Event()
    write = store.write_ends

    async def when_let(finishes: Sequence[RunEnd], **kwargs: Any) -> list[bool]:
        if finishes:  # the runs' ends
            await gate.wait()
        return await write(finishes, **kwargs)

    async def record(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    monkeypatch.setattr(store, "write_ends", when_let)
    h = make_engine({"record": record}, lease_margin_seconds=2)
    job = await h.add(make_job("nightly", "record", timeout_seconds=1))
    h.engine.start()
    try:
        await h.engine.tick()
        await asyncio.wait_for(until(lambda: len(h.engine.ledger.ending()) == 1), WAIT)
        for _ in range(5):  # a minute, its lease 3 s long: renewed before each look of the reaper
            h.clock.advance(12)
            h.engine.leases.reap_soon()
            await h.engine.tick()
        assert [hook for hook, _, _ in h.observed.heard if hook == "reaped"] == []
    finally:
        gate.set()  # before the engine shuts down, which writes what is pending
    await asyncio.wait_for(h.engine.settled(), WAIT)
    runs = await store.list_executions(ExecutionQuery(job_id=job.id))
    assert [e.status for e in runs] == [Status.SUCCESS]
    assert ran == ["nightly"]
    stored = await store.get_job(job.id)
    assert stored is not None and stored.next_run_at == T0 + timedelta(seconds=60)


async def test_no_new_run_is_claimed_while_the_store_refuses_the_ends_of_the_last_ones(
    make_engine: EngineFactory, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ends refused wait in memory: the dispatcher takes no run whose end would only join
    them, and takes them again once the store has written the ends."""
    ran: list[str] = []
    room = asyncio.Event()
    refused: list[int] = []
    write = store.write_ends

    async def refused_while_full(finishes: Sequence[RunEnd], **kwargs: Any) -> list[bool]:
        if finishes and not room.is_set():
            if refused:  # tried again: it waits for room (no time passes meanwhile)
                await room.wait()
            else:
                try:
                    await store._run(no_room)
                finally:
                    refused.append(len(finishes))
        return await write(finishes, **kwargs)

    async def record(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    monkeypatch.setattr(store, "write_ends", refused_while_full)
    h = make_engine({"record": record})
    await h.add(make_job("first", "record"))
    h.engine.start()
    try:
        assert (await h.engine.tick()).claimed == 1
        await asyncio.wait_for(until(lambda: bool(refused)), WAIT)
        await h.add(make_job("second", "record", next_run_at=h.clock.now()))
        with pytest.raises(StoreError, match="database or disk is full"):
            await h.engine.tick()  # the dispatcher backs off, and /readyz says why
        assert ran == ["first"]
        assert [e.job_name for e in await store.list_executions(ExecutionQuery())] == ["first"]
    finally:
        room.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert sorted(ran) == ["first", "second"]
    runs = await store.list_executions(ExecutionQuery())
    assert sorted((e.job_name, e.status) for e in runs) == [
        ("first", Status.SUCCESS),
        ("second", Status.SUCCESS),
    ]


async def test_a_shutdown_while_the_store_refuses_the_ends_is_not_held_up_for_good(
    make_engine: EngineFactory, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs queued at a shutdown are recorded abandoned; a store that refuses those ends gets a
    few tries, then the daemon stops anyway (their leases expire and a live instance gives
    their occurrences back)."""
    release = asyncio.Event()

    async def busy(ctx: HandlerContext) -> Result:
        await release.wait()
        return None

    h = make_engine({"busy": busy}, workers=1, queue_size=1, shutdown_grace_seconds=0.01)
    for name in ("running", "queued"):
        await h.add(make_job(name, "busy"))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 2
    await asyncio.wait_for(until(lambda: h.engine.ledger.count(RunState.RUNNING) == 1), WAIT)
    refuse_writes(monkeypatch, store, lambda: True)
    try:
        await asyncio.wait_for(h.engine.shutdown(), WAIT)
    finally:
        release.set()
    statuses = {e.job_name: e.status for e in await store.list_executions(ExecutionQuery())}
    assert statuses == {"running": Status.RUNNING, "queued": Status.RUNNING}, "nothing written"
