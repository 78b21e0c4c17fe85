"""The signals that stop `tickd run`: each a graceful stop, never a death mid-run; and SIGUSR1,
which stops nothing and logs where each task and each thread waits."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.test_daemon import STOP_WITHIN, free_port, start_daemon
from tickd.scheduler.model import Status
from tickd.scheduler.ports.backends import ExecutionQuery
from tickd.scheduler.store.sqlite import SQLiteStore

# Far more than starting, or a two-second run, takes: a test that waits this long has failed.
WITHIN = 15.0
LONG_RUN = {
    "name": "long-run",
    "handler": "sleep",
    "params": {"seconds": 2},
    "schedule": {"kind": "interval", "every_seconds": 3600},
}


class Log:
    """The daemon's stderr, read as it comes (so that the pipe never fills), line by line."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._reading = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            async with self._changed:
                self.lines.append(line.decode())
                self._changed.notify_all()

    async def line_with(self, *parts: str) -> str:
        def found() -> str | None:
            return next((ln for ln in self.lines if all(p in ln for p in parts)), None)

        async with asyncio.timeout(WITHIN), self._changed:
            await self._changed.wait_for(lambda: found() is not None)
            line = found()
            assert line is not None
            return line

    async def whole(self) -> str:
        await self._reading
        return "".join(self.lines)


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, Log, int]]:
    port = free_port()
    process = await start_daemon(
        tmp_path,
        port,
        TICKD_SHUTDOWN_GRACE_SECONDS="10",
        TICKD_SEED_DEMO="false",
        TICKD_EVENTS_URL="log://",  # the execution events as INFO lines: one says it started
    )
    assert process.stderr is not None
    try:
        yield process, Log(process.stderr), port
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def start_long_run(port: int) -> str:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        async with http.post("/v1/jobs", json=LONG_RUN) as response:
            assert response.status == 201, await response.text()
            job_id = str((await response.json())["id"])
        async with http.post(f"/v1/jobs/{job_id}/trigger") as response:
            assert response.status == 202, await response.text()
    return job_id


async def statuses(db: Path, job_id: str) -> list[Status]:
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        return [e.status for e in await store.list_executions(ExecutionQuery(job_id=job_id))]
    finally:
        await store.close()


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
async def test_a_stop_signal_lets_the_running_execution_finish_then_exits_cleanly(
    daemon: tuple[asyncio.subprocess.Process, Log, int], tmp_path: Path, sig: signal.Signals
) -> None:
    process, log, port = daemon
    await log.line_with("api.listening")
    job_id = await start_long_run(port)
    await log.line_with('"type":"job.execution.started"', job_id)

    process.send_signal(sig)
    async with asyncio.timeout(STOP_WITHIN):
        await process.wait()
        text = await log.whole()
    assert process.returncode == 0, text[-2000:]
    assert f"daemon.stopping signal={sig.name}" in text
    assert "daemon.stopped" in text
    assert Status.SUCCESS in await statuses(tmp_path / "tickd.db", job_id)
    assert Status.RUNNING not in await statuses(tmp_path / "tickd.db", job_id)


async def test_sigusr1_logs_where_each_task_and_thread_waits_and_stops_nothing(
    daemon: tuple[asyncio.subprocess.Process, Log, int],
) -> None:
    process, log, port = daemon
    await log.line_with("api.listening")
    job_id = await start_long_run(port)
    await log.line_with('"type":"job.execution.started"', job_id)

    process.send_signal(signal.SIGUSR1)
    # The run's task, down the awaits to the handler and the sleep it waits in.
    line = await log.line_with("daemon.task", "handlers/sleep.py")
    assert re.search(
        r"handlers/sleep\.py:\d+ in sleep > \S+asyncio/tasks\.py:\d+ in sleep", line
    ), line
    # The store's writer thread, idle in its executor's queue: each thread, where it waits.
    line = await log.line_with("daemon.thread", "thread=tickd-sqlite_0")
    assert re.search(r'at="\S+concurrent/futures/thread\.py:\d+ in _worker < ', line), line
    await log.line_with(f'"type":"job.execution.{Status.SUCCESS}"', job_id)
    assert process.returncode is None
