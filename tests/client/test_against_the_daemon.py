"""Both clients against `tickd run` in a process of its own, as an application meets it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.test_daemon import FIRST_EXECUTIONS_WITHIN, free_port, start_daemon
from tickd.api.models import IntervalScheduleIn, JobCreate
from tickd.client import AsyncClient, Client, Retry

STARTED_WITHIN = 20.0
# The daemon takes a moment to listen: a read is sent again while the connection is refused.
UNTIL_LISTENING = Retry(attempts=200, backoff_seconds=0.1, max_backoff_seconds=0.1)


def create_every_second(url: str) -> str:
    every_second = IntervalScheduleIn(kind="interval", every_seconds=1)
    with Client(url, retry=UNTIL_LISTENING) as tickd:
        assert tickd.health().status == "ok"
        return tickd.create_job(JobCreate(name="app-job", handler="noop", schedule=every_second)).id


async def test_a_job_made_by_the_client_runs_in_the_daemon(tmp_path: Path) -> None:
    port = free_port()
    process = await start_daemon(tmp_path, port, TICKD_SEED_DEMO="false")
    url = f"http://127.0.0.1:{port}"
    try:
        async with asyncio.timeout(STARTED_WITHIN):
            job_id = await asyncio.to_thread(create_every_second, url)
        async with AsyncClient(url) as tickd, asyncio.timeout(FIRST_EXECUTIONS_WITHIN):
            while True:
                runs = await tickd.job_executions(job_id, status="success")
                if runs.items:
                    break
                await asyncio.sleep(0.2)
            await tickd.delete_job(job_id)
            assert [j.id for j in (await tickd.list_jobs()).items if j.id == job_id] == []
    finally:
        process.kill()
        await process.wait()
