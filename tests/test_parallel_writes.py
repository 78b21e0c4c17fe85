"""Parallel API writes during a burst, on the embedded store: the daemon as ops run it, with
clients creating, triggering, patching, pausing and resuming jobs from twenty connections at
once while hundreds of runs start every other second. No write answers 5xx, the database stays
whole, and every occurrence runs once: none lost, none twice."""

from __future__ import annotations

import asyncio
import itertools
import signal
import sqlite3
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.test_daemon import STOP_WITHIN, free_port, start_daemon

BURST_JOBS = 300  # every one due every other second
TRIGGERED_JOBS = 10
EDITED_JOBS = 10
CLIENTS = 20
WRITES_PER_CLIENT = 30
EVERY_SECONDS = 2
STARTED_WITHIN = 15.0
QUIET_WITHIN = 30.0


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[tuple[aiohttp.ClientSession, Path, Any]]:
    """The daemon on the shipped config without its demo jobs, and a client of its API."""
    port = free_port()
    process = await start_daemon(
        tmp_path,
        port,
        TICKD_SEED_DEMO="false",
        TICKD_LOG_LEVEL="WARNING",  # stderr is read once the daemon has stopped
    )
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", connector=connector) as http:
            await until_ready(http)
            yield http, tmp_path / "tickd.db", process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def until_ready(http: aiohttp.ClientSession) -> None:
    async with asyncio.timeout(STARTED_WITHIN):
        while True:
            try:
                async with http.get("/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)


class Writes:
    """Every answer the clients got, by what was asked."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.triggered: Counter[str] = Counter()  # accepted triggers, by job id

    async def send(self, what: str, method: str, path: str, body: Any = None) -> Any:
        async with self.http.request(method, path, json=body) as response:
            self.statuses[(what, response.status)] += 1
            return await response.json() if response.content_type.endswith("json") else None

    def server_errors(self) -> dict[tuple[str, int], int]:
        return {key: n for key, n in self.statuses.items() if key[1] >= 500}


def job(name: str, schedule: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "handler": "noop", "schedule": schedule, "timeout_seconds": 10}


async def in_parallel(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """The calls from CLIENTS clients at once, each taking the next call as it is free."""
    pending = iter(calls)
    results: list[Any] = []

    async def client() -> None:
        for call in pending:
            results.append(await call())  # noqa: PERF401 - one call at a time, in turn

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return results


async def create(writes: Writes, jobs: list[dict[str, Any]]) -> list[str]:
    created = await in_parallel(
        [partial(writes.send, "create", "POST", "/v1/jobs", j) for j in jobs]
    )
    return [body["id"] for body in created]


def mixed_writes(
    writes: Writes, triggered: list[str], edited: list[str]
) -> list[Callable[[], Awaitable[Any]]]:
    """Triggers, patches without If-Match, pauses and resumes, interleaved."""

    async def trigger(job_id: str) -> None:
        async with writes.http.post(f"/v1/jobs/{job_id}/trigger") as response:
            writes.statuses[("trigger", response.status)] += 1
            if response.status == 202:
                writes.triggered[job_id] += 1

    async def patch(job_id: str, n: int) -> None:
        await writes.send("patch", "PATCH", f"/v1/jobs/{job_id}", {"timeout_seconds": 10 + n})

    async def toggle(job_id: str, n: int) -> None:
        verb = "pause" if n % 2 else "resume"
        await writes.send(verb, "POST", f"/v1/jobs/{job_id}/{verb}")

    calls: list[Callable[[], Awaitable[Any]]] = []
    for n in range(CLIENTS * WRITES_PER_CLIENT):
        target = edited[n % len(edited)]
        if n % 3 == 0:
            calls.append(partial(trigger, triggered[n % len(triggered)]))
        elif n % 3 == 1:
            calls.append(partial(patch, target, n))
        else:
            calls.append(partial(toggle, target, n))
    return calls


async def until_quiet(writes: Writes) -> None:
    """No run in flight, and every accepted trigger run: each write so far has had its effect."""

    async def executions(**query: str) -> list[Any]:
        async with writes.http.get("/v1/executions", params=query) as response:
            assert response.status == 200
            return list((await response.json())["items"])

    async with asyncio.timeout(QUIET_WITHIN):
        while True:
            ran = {job_id: len(await executions(job_id=job_id)) for job_id in writes.triggered}
            if ran == writes.triggered and not await executions(status="running"):
                return
            await asyncio.sleep(0.2)


def occurrences(db: Path) -> dict[str, list[int]]:
    """Each job's executions' scheduled times (microseconds), in order."""
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = con.execute("SELECT job_id, scheduled_at FROM executions ORDER BY scheduled_at")
        by_job: dict[str, list[int]] = defaultdict(list)
        for job_id, scheduled_at in rows:
            by_job[job_id].append(scheduled_at)
    return by_job


@pytest.mark.timeout(180)
async def test_parallel_writes_during_a_burst_answer_no_5xx_and_lose_or_repeat_no_run(
    http: tuple[aiohttp.ClientSession, Path, Any],
) -> None:
    session, db, process = http
    writes = Writes(session)
    far = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    burst = await create(
        writes,
        [
            job(f"burst-{i:03}", {"kind": "cron", "expr": f"*/{EVERY_SECONDS} * * * * *"})
            for i in range(BURST_JOBS)
        ],
    )
    triggered = await create(
        writes, [job(f"triggered-{i}", {"kind": "once", "at": far}) for i in range(TRIGGERED_JOBS)]
    )
    edited = await create(
        writes, [job(f"edited-{i}", {"kind": "once", "at": far}) for i in range(EDITED_JOBS)]
    )

    await in_parallel(mixed_writes(writes, triggered, edited))
    # Pausing every burst job, in parallel too, ends the burst.
    await in_parallel([partial(writes.send, "pause", "POST", f"/v1/jobs/{j}/pause") for j in burst])
    await until_quiet(writes)
    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(STOP_WITHIN):
        _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()[-2000:]

    errors = [line for line in stderr.decode().splitlines() if "ERROR" in line]
    assert writes.server_errors() == {}, (writes.statuses, errors[:5])
    ran = occurrences(db)
    step = EVERY_SECONDS * 1_000_000
    for job_id in burst:
        times = ran[job_id]
        assert times, "every burst job ran"
        gaps = {later - earlier for earlier, later in itertools.pairwise(times)}
        assert gaps <= {step}, f"{job_id}: an occurrence lost or run twice: {sorted(gaps)[:5]}"
    for job_id in triggered:
        assert len(ran[job_id]) == len(set(ran[job_id])) == writes.triggered[job_id]
    assert sum(writes.triggered.values()) > 0
    assert all(not ran[job_id] for job_id in edited), "pausing and resuming runs nothing"
