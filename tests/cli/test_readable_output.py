"""What the command line shows people: completion that works in today's bash and offers the
API's job names, durations as people read them, and a taken name titled as a conflict."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.api.conftest import ADMIN
from tests.api.test_cli import NIGHTLY, Live
from tests.fixtures.servers import Serve
from tickd.api.stats import StatsOut
from tickd.cli.completion import completion_script
from tickd.cli.parser import build_parser

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")

# The folder of the `tickd` command this test runs: the script calls it for job names.
COMMANDS = str(Path(sys.executable).parent)


def completions(*lines: str) -> str:
    """The completion script sourced in a real bash, then each `words|cword` completed."""
    probe = [completion_script(build_parser(), "bash")]
    for line in lines:
        words, cword = line.rsplit("|", 1)
        probe.append(f'COMP_WORDS=({words}); COMP_CWORD={cword}; _tickd; echo "${{COMPREPLY[*]}}"')
    return "\n".join(probe) + "\n"


def test_bash_completes_the_first_word_without_a_bad_array_subscript() -> None:
    done = subprocess.run(
        ["bash", "-c", completions("tickd j|1", 'tickd ""|1', "tickd jobs pa|2")],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"]},
    )

    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == "jobs"
    assert {"jobs", "handlers", "executions", "--version"} <= set(lines[1].split())
    assert lines[2] == "patch pause"


async def bash(script: str, env: dict[str, str]) -> tuple[str, str]:
    """`script` in a real bash, the test's loop serving the API meanwhile."""
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        script,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": f"{COMMANDS}:{os.environ['PATH']}", **env},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return out.decode(), err.decode()


async def test_bash_completes_job_names_from_the_api_where_a_job_goes(live: Live) -> None:
    await live.post("/v1/jobs", NIGHTLY)
    await live.post("/v1/jobs", {**NIGHTLY, "name": "nightly-report"})
    await live.post("/v1/jobs", {**NIGHTLY, "name": "hourly"})
    await live.post("/v1/jobs", {**NIGHTLY, "name": "team:nightly"})
    api = {"TICKD_URL": live.url, "TICKD_TOKEN": ADMIN}
    host, port = live.url.removeprefix("http://").split(":")

    out, err = await bash(
        completions(
            "tickd jobs show night|3",
            "tickd executions list --job hou|4",
            "tickd jobs show team : ni|5",  # `team:ni`, as bash splits it at ":"
        ),
        api,
    )
    elsewhere = {"TICKD_URL": "http://127.0.0.1:1", "TICKD_TOKEN": ADMIN}
    by_url, _ = await bash(
        completions(f"tickd jobs pause --url http : //{host} : {port} nightly-p|9"), elsewhere
    )

    assert err == ""
    assert out.splitlines() == ["nightly-ping nightly-report", "hourly", "nightly"]
    assert by_url == "nightly-ping\n"


async def test_job_name_completion_is_silent_and_quick_when_the_api_is_not_there() -> None:
    out, err = await bash(
        completions("tickd jobs show night|3"), {"TICKD_URL": "http://127.0.0.1:1"}
    )

    assert (out, err) == ("\n", "")


def stats_answer(lag_p50: float, lag_p99: float) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "now": "2026-03-02T10:00:00Z",
        "window_seconds": 3600,
        "bucket_seconds": 60,
        "due_backlog": 0,
        "busy_workers": 1,
        "workers": 4,
        "totals": {"success": 12},
        "by_handler": {"noop": {"success": 12}},
        "lag_p50_seconds": lag_p50,
        "lag_p99_seconds": lag_p99,
        "lag_measured": 12,
        "buckets": [],
        "open_dead_letters": 0,
        "attention": {
            "dead_letters": [],
            "dead_letters_total": 0,
            "dead_letter_jobs": 0,
            "failures": [],
            "failures_total": 0,
            "failure_jobs": 0,
            "failing": [],
            "failing_total": 0,
            "late": [],
            "late_total": 0,
        },
    }
    StatsOut.model_validate(answer)  # what the API sends
    return answer


@pytest.fixture
async def stats_api(serve: Serve) -> str:
    async def stats(request: web.Request) -> web.Response:
        return web.json_response(stats_answer(0.001342, 2.5))

    app = web.Application()
    app.router.add_get("/v1/stats", stats)
    return await serve(app)


async def test_stats_prints_fire_lags_in_milliseconds_and_seconds(stats_api: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", "stats", "--url", stats_api,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)

    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert "fire lag p50  1.3 ms" in lines
    assert "fire lag p99  2.5 s" in lines


async def test_a_taken_name_is_titled_a_conflict(live: Live) -> None:
    await live.post("/v1/jobs", NIGHTLY)

    run = await live.tickd(
        "jobs", "create", "--name", "nightly-ping", "--handler", "ping", "--every", "60",
        "--param", "url=https://example.com/x",
    )  # fmt: skip

    assert run.code == 1
    assert run.err.splitlines() == [
        "tickd: 409 Conflict",
        "  name: a job named 'nightly-ping' exists already",
    ]
