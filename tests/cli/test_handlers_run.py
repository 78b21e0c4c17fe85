"""`tickd handlers` and `tickd handlers run NAME`: an installed handler run once, here, without
a daemon, as a plug-in author tries it: its result, its log lines and its duration printed,
exit 1 when the run fails and 2 when its params are refused, naming the param."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest
from aiohttp import web

from tests.api.test_cli import Run
from tests.fixtures.servers import Serve

ROOT = Path(__file__).resolve().parents[2]


async def tickd(*args: str, env: dict[str, str] | None = None) -> Run:
    """The command in a subprocess, as a user runs it; the test's loop keeps serving."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TICKD_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tickd",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean | (env or {}),
        cwd=ROOT,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


async def test_the_example_plugins_handler_runs_once_printing_result_logs_and_duration() -> None:
    run = await tickd(
        "handlers", "run", "example_greeting", "--param", "name=Ada", "--param", "greeting=Hi"
    )

    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0] == "status    success"
    assert re.fullmatch(r"duration  \d+(\.\d)? (ms|s)", lines[1])
    assert json.loads(lines[2].removeprefix("result    "))["message"] == "Hi, Ada!"
    assert lines[3] == "log       INFO greeting Ada (attempt 1)"


async def test_params_json_and_param_values_read_as_json_with_json_output() -> None:
    run = await tickd(
        "handlers", "run", "sleep", "--params-json", '{"seconds": 5}', "--param", "seconds=0",
        "--json",
    )  # fmt: skip

    assert run.code == 0, run.err
    printed = json.loads(run.out)
    assert printed["status"] == "success"
    assert printed["result"] == {"slept_seconds": 0.0}
    assert printed["error"] is None and printed["logs"] == []
    assert 0 <= printed["duration_seconds"] < 5


async def test_a_param_the_schema_refuses_exits_2_naming_it_and_never_runs() -> None:
    empty = await tickd("handlers", "run", "example_greeting", "--param", "name=")
    misspelt = await tickd(
        "handlers", "run", "example_greeting", "--param", "name=Ada", "--param", "greting=Hi"
    )
    wrong_type = await tickd("handlers", "run", "sleep", "--param", "seconds=soon")
    not_a_pair = await tickd("handlers", "run", "noop", "--param", "verbose")

    assert (empty.code, empty.out) == (2, "")
    assert empty.err == "tickd handlers run: params.name: '' should be non-empty\n"
    assert misspelt.code == 2 and "'greting' was unexpected" in misspelt.err
    assert wrong_type.code == 2
    assert wrong_type.err.startswith("tickd handlers run: params.seconds: 'soon' is not of type")
    assert not_a_pair.code == 2 and "--param 'verbose': expected KEY=VALUE" in not_a_pair.err


async def test_a_failing_run_exits_1_printing_the_error_type_and_message() -> None:
    run = await tickd("handlers", "run", "sleep", "--param", "seconds=0", "--param", "fail=true")

    assert run.code == 1
    assert run.out.splitlines()[0] == "status    failed"
    assert run.err == "tickd: the run failed: RuntimeError: failed on purpose after 0 s\n"


async def test_a_run_past_its_timeout_exits_1_as_a_timeout() -> None:
    run = await tickd("handlers", "run", "sleep", "--param", "seconds=30", "--timeout", "0.2")

    assert run.code == 1
    assert run.out.splitlines()[0] == "status    timeout"
    assert run.err.startswith("tickd: the run failed: Timeout: ")


async def test_an_unknown_handler_exits_2_listing_those_installed() -> None:
    run = await tickd("handlers", "run", "sleeep")

    assert run.code == 2
    assert run.err.startswith("tickd handlers run: no handler named 'sleeep' is installed")
    assert "sleep" in run.err and "example_greeting" in run.err


@pytest.fixture
async def status_server(serve: Serve) -> str:
    """A server on loopback answering /up with 200 and /down with 503."""

    async def up(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def down(request: web.Request) -> web.Response:
        return web.Response(status=503, text="maintenance")

    app = web.Application()
    app.router.add_get("/up", up)
    app.router.add_get("/down", down)
    return await serve(app)


async def test_http_check_runs_against_a_server_the_settings_allow(status_server: str) -> None:
    allowed = {"TICKD_HTTP_ALLOW": "127.0.0.1"}

    up = await tickd("handlers", "run", "http_check", "--param", f"url={status_server}/up",
                     "--json", env=allowed)  # fmt: skip
    down = await tickd("handlers", "run", "http_check", "--param", f"url={status_server}/down",
                       env=allowed)  # fmt: skip
    refused = await tickd("handlers", "run", "http_check", "--param", f"url={status_server}/up")

    assert up.code == 0, up.err
    assert json.loads(up.out)["result"]["status"] == 200
    assert down.code == 1
    assert down.err.startswith("tickd: the run failed: CheckFailed: status 503, expected 2xx")
    assert refused.code == 2 and refused.err.startswith("tickd handlers run: params.url: ")


async def test_handlers_json_lists_each_handler_with_its_origin_and_schema() -> None:
    listed = await tickd("handlers", "--json")
    text = await tickd("handlers")

    assert listed.code == 0, listed.err
    by_name = {h["name"]: h for h in json.loads(listed.out)["items"]}
    greeting = by_name["example_greeting"]
    assert greeting["origin"].startswith("tickd-example-plugin 0.1.0")
    assert greeting["params_schema"]["required"] == ["name"]
    assert greeting["max_concurrency"] == 5
    assert (
        "example_greeting\ttickd-example-plugin 0.1.0 (tickd_example_plugin.handlers:greet)"
        in text.out.splitlines()
    )
