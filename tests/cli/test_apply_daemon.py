"""`tickd apply --prune` against `tickd run` on the shipped config, as ops deploy jobs: the
seeded demo jobs, made by no apply, are never pruned."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.test_daemon import ROOT, free_port, start_daemon

# The `tickd` command in a subprocess, against a real port: left out of `make quick`.
pytestmark = pytest.mark.slow


READY_WITHIN = 20.0
JOBS_TOML = """
[[jobs]]
name = "deployed-noop"
handler = "noop"
schedule = { kind = "interval", every_seconds = 3600 }
"""


@pytest.fixture
async def daemon_url(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    process = await start_daemon(tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_until_ready(url)
        yield url
    finally:
        process.kill()
        await process.communicate()


async def wait_until_ready(url: str) -> None:
    async with asyncio.timeout(READY_WITHIN), aiohttp.ClientSession(url) as http:
        while True:
            try:
                async with http.get("/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)


async def tickd(url: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKD_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", *args, "--url", url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def job_names(url: str) -> set[str]:
    async with aiohttp.ClientSession(url) as http, http.get("/v1/jobs?limit=500") as response:
        return {job["name"] for job in (await response.json())["items"]}


async def test_apply_and_prune_against_the_daemon_leave_the_seeded_jobs(
    daemon_url: str, tmp_path: Path
) -> None:
    seeded = await job_names(daemon_url)
    assert seeded, "the shipped config seeds demo jobs"
    jobs_file = tmp_path / "jobs.toml"
    jobs_file.write_text(JOBS_TOML, encoding="utf-8")

    code, out, err = await tickd(daemon_url, "apply", "--prune", "-f", str(jobs_file))
    again = await tickd(daemon_url, "apply", "--prune", "-f", str(jobs_file))
    diff = await tickd(daemon_url, "diff", "--prune", "-f", str(jobs_file))

    assert code == 0, err
    assert out.splitlines()[0] == "created deployed-noop"
    assert again[0] == 0 and again[1] == "0 changed, 0 failed, 1 unchanged.\n"
    assert diff[0] == 0 and diff[1] == "Nothing to change; 1 unchanged.\n"
    assert await job_names(daemon_url) == seeded | {"deployed-noop"}


async def jobs_of(url: str) -> list[dict[str, object]]:
    async with aiohttp.ClientSession(url) as http, http.get("/v1/jobs?limit=500") as response:
        items: list[dict[str, object]] = (await response.json())["items"]
        return items


async def test_apply_takes_over_no_seeded_job_without_adopt_and_no_system_job_at_all(
    daemon_url: str, tmp_path: Path
) -> None:
    seeded = await jobs_of(daemon_url)
    system = next(job for job in seeded if job["system"])
    demo = next(job for job in seeded if not job["system"])
    fields = ("name", "handler", "schedule")
    jobs_file = tmp_path / "jobs.json"
    definitions = [{key: job[key] for key in fields} for job in (system, demo)]
    jobs_file.write_text(json.dumps({"jobs": definitions}), encoding="utf-8")

    plain = await tickd(daemon_url, "apply", "-f", str(jobs_file))
    adopt = await tickd(daemon_url, "apply", "--adopt", "--prune", "-f", str(jobs_file))

    assert plain[0] == 1 and adopt[0] == 1
    assert f"tickd: conflict {system['name']}: a system job (tickd's own): never taken over" in (
        adopt[2].splitlines()
    )
    assert f"tickd: conflict {demo['name']}: made by hand (no owner)" in plain[2]
    assert (
        plain[2].splitlines()[-1] == "tickd: nothing applied: 2 jobs are not this file's to change"
    )
    after = {job["name"]: job for job in await jobs_of(daemon_url)}
    assert {n: j["revision"] for n, j in after.items()} == {
        str(j["name"]): j["revision"] for j in seeded
    }
    assert after[str(demo["name"])]["managed_by"] is None
