"""`tickd jobs ...` and `tickd executions ...` against a real server: the API as in
tests/api/conftest.py but on a real TCP port, and the command in a subprocess (`python -m
tickd`), as ops run it; the command talks to it through tickd.client."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.api.conftest import ADMIN, READ, api_app
from tests.conftest import EngineFactory, Harness
from tickd import cli
from tickd.scheduler.plugin.api import Handler, HandlerFunc
from tickd.scheduler.ports.backends import ExecutionQuery, JobQuery, Store
from tickd.scheduler.ports.clock import FakeClock

ROOT = Path(__file__).resolve().parents[2]
WRONG = "not-the-token-" + "x" * 12
NIGHTLY: dict[str, Any] = {
    "name": "nightly-ping",
    "handler": "ping",
    "schedule": {"kind": "cron", "expr": "0 30 2 * * *", "timezone": "Europe/Berlin"},
    "params": {"url": "https://example.com/health", "api_key": "sk-live-secret"},
    "timeout_seconds": 30,
    "max_retries": 2,
}


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


@dataclass
class Live:
    """The API on 127.0.0.1:<free port>, served by the test's own event loop."""

    url: str
    harness: Harness
    clock: FakeClock
    store: Store
    outputs: list[str] = field(default_factory=list)

    async def tickd(self, *args: str, token: str = ADMIN, stdin: str | None = None) -> Run:
        """The command in a subprocess; the loop keeps serving while it runs."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKD_")}
        env |= {"TICKD_URL": self.url, "TICKD_TOKEN": token}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tickd",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        out, err = await asyncio.wait_for(
            process.communicate(stdin.encode() if stdin is not None else None), timeout=30
        )
        assert process.returncode is not None
        run = Run(process.returncode, out.decode(), err.decode())
        self.outputs += [run.out, run.err]
        return run

    async def post(self, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url + path, json=body, headers=headers) as response,
        ):
            assert response.status < 300, await response.text()
            return await response.json()

    async def get(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, headers=headers) as response,
        ):
            return await response.json()


@pytest.fixture
async def live(make_engine: EngineFactory) -> AsyncIterator[Live]:
    async with serving_live(make_engine) as server:
        yield server


@asynccontextmanager
async def serving_live(
    make_engine: EngineFactory, handlers: dict[str, Handler | HandlerFunc] | None = None
) -> AsyncIterator[Live]:
    """The API (with the test handlers, or `handlers`) on a real port of loopback."""
    harness, app = api_app(make_engine, handlers)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    server = Live(f"http://{host}:{port}", harness, harness.clock, harness.store)
    try:
        yield server
        # Whatever a test did, no token ever reached the output.
        for text in server.outputs:
            assert ADMIN not in text and READ not in text and WRONG not in text
    finally:
        await runner.cleanup()


def columns(header: str, *names: str) -> list[int]:
    return [header.index(name) for name in names]


async def test_jobs_list_is_an_aligned_table(live: Live) -> None:
    await live.post("/v1/jobs", NIGHTLY)
    await live.post(
        "/v1/jobs",
        {
            "name": "every-minute",
            "handler": "sleep",
            "schedule": {"kind": "interval", "every_seconds": 60},
            "enabled": False,
        },
    )

    run = await live.tickd("jobs", "list")

    assert run.code == 0, run.err
    header, *rows = run.out.splitlines()
    names = ("NAME", "HANDLER", "SCHEDULE", "ENABLED", "NEXT RUN", "LAST STATUS")
    starts = columns(header, *names)
    assert starts == sorted(starts)
    cells = [
        [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)] for row in rows
    ]
    assert cells == [
        ["every-minute", "sleep", "every 1m", "no", "2026-03-02 09:01:00 UTC", "-"],
        [
            "nightly-ping",
            "ping",
            "cron 0 30 2 * * * (Europe/Berlin)",
            "yes",
            "2026-03-03 01:30:00 UTC",
            "-",
        ],
    ]
    assert "sk-live-secret" not in run.out


async def test_jobs_list_json_is_the_api_page(live: Live) -> None:
    await live.post("/v1/jobs", NIGHTLY)
    run = await live.tickd("jobs", "list", "--json")
    assert run.code == 0, run.err
    assert json.loads(run.out) == await live.get("/v1/jobs")


async def test_jobs_list_filters_and_follows_the_cursors(live: Live) -> None:
    for name in ("a-1", "a-2", "a-3", "b-1"):
        await live.post("/v1/jobs", {**NIGHTLY, "name": name})
    await live.post(
        f"/v1/jobs/{(await live.post('/v1/jobs', {**NIGHTLY, 'name': 'a-4'}))['id']}/pause"
    )

    first = await live.tickd("jobs", "list", "--prefix", "a-", "--limit", "2", "--json")
    page = json.loads(first.out)
    assert [j["name"] for j in page["items"]] == ["a-1", "a-2"] and page["next_cursor"]

    every = await live.tickd("jobs", "list", "--prefix", "a-", "--limit", "2", "--all", "--json")
    assert [j["name"] for j in json.loads(every.out)["items"]] == ["a-1", "a-2", "a-3", "a-4"]

    table = await live.tickd("jobs", "list", "--limit", "2")
    assert table.code == 0 and len(table.out.splitlines()) == 3
    assert "--all" in table.err
    table = await live.tickd("jobs", "list", "--limit", "2", "--all")
    assert len(table.out.splitlines()) == 6 and table.err == ""

    disabled = await live.tickd("jobs", "list", "--disabled", "--json")
    assert [j["name"] for j in json.loads(disabled.out)["items"]] == ["a-4"]
    enabled = await live.tickd("jobs", "list", "--enabled", "--handler", "ping", "--json")
    assert len(json.loads(enabled.out)["items"]) == 4


async def test_jobs_create_from_flags(live: Live) -> None:
    run = await live.tickd(
        "jobs",
        "create",
        "--name",
        "nap",
        "--handler",
        "sleep",
        "--every",
        "90",
        "--param",
        "seconds=0.5",
        "--param",
        "fail=false",
        "--timeout",
        "30",
        "--retries",
        "2",
    )
    assert run.code == 0, run.err
    assert "every 1m30s" in run.out and "nap" in run.out
    [job] = await live.store.list_jobs(JobQuery())
    assert (job.name, job.handler, job.params) == ("nap", "sleep", {"seconds": 0.5, "fail": False})
    assert (job.timeout_seconds, job.max_retries) == (30, 2)


async def test_jobs_create_from_a_file_and_from_stdin(live: Live, tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(NIGHTLY))
    run = await live.tickd("jobs", "create", "-f", str(path), "--json")
    assert run.code == 0, run.err
    created = json.loads(run.out)
    assert created["name"] == "nightly-ping" and created["params"]["api_key"] == "***"

    cron = {**NIGHTLY, "name": "from-stdin"}
    run = await live.tickd("jobs", "create", "-f", "-", "--cron", "@hourly", stdin=json.dumps(cron))
    assert run.code == 0, run.err
    job = await live.store.get_job_by_name("from-stdin")
    assert job is not None and job.schedule.kind == "cron"
    assert getattr(job.schedule, "expr", None) == "@hourly"


async def test_a_validation_error_is_printed_as_the_api_sent_it(live: Live) -> None:
    run = await live.tickd(
        "jobs", "create", "--name", "bad", "--handler", "ping", "--cron", "61 * * * * *"
    )

    assert run.code == 1
    assert run.out == ""
    # The title, then each field at fault once (the detail repeats them: not printed).
    lines = run.err.splitlines()
    assert lines[0] == "tickd: 422 Invalid request"
    assert lines[1:] == [
        "  schedule.expr: second field: 61 is out of range 0-59",
        "  params: 'url' is a required property",
    ]
    assert await live.store.list_jobs(JobQuery()) == []

    as_json = await live.tickd(
        "jobs", "create", "--name", "bad", "--handler", "nope", "--every", "5", "--json"
    )
    problem = json.loads(as_json.err)
    assert as_json.code == 1 and problem["status"] == 422
    assert problem["errors"][0]["field"] == "handler"


async def test_a_wrong_token_is_a_401_and_never_printed(live: Live) -> None:
    run = await live.tickd("jobs", "list", token=WRONG)
    assert run.code == 1
    assert run.err.startswith("tickd: 401 Unauthorized")
    scoped = await live.tickd("jobs", "pause", "whatever", token=READ)
    assert scoped.code == 1 and "404" in scoped.err  # looked up first: nothing to pause
    await live.post("/v1/jobs", NIGHTLY)
    scoped = await live.tickd("jobs", "pause", "nightly-ping", token=READ)
    assert scoped.code == 1 and scoped.err.startswith("tickd: 403 Forbidden")


async def test_pause_resume_trigger_and_delete_by_name(live: Live) -> None:
    job = await live.post("/v1/jobs", NIGHTLY)

    paused = await live.tickd("jobs", "pause", "nightly-ping")
    assert paused.code == 0 and paused.out.startswith("Paused nightly-ping")
    stored = await live.store.get_job(job["id"])
    assert stored is not None and not stored.enabled

    resumed = await live.tickd("jobs", "resume", job["id"])
    assert resumed.code == 0 and "next run 2026-03-03 01:30:00 UTC" in resumed.out

    triggered = await live.tickd("jobs", "trigger", "nightly-ping", "--json")
    assert triggered.code == 0 and json.loads(triggered.out)["reason"] == "trigger"
    await live.harness.engine.drain()
    runs = await live.store.list_executions(ExecutionQuery(job_id=job["id"]))
    assert len(runs) == 1

    shown = await live.tickd("jobs", "show", "nightly-ping")
    assert "last run  success" in shown.out

    deleted = await live.tickd("jobs", "delete", "nightly-ping")
    assert deleted.code == 0 and deleted.out.startswith("Deleted nightly-ping")
    assert await live.store.get_job(job["id"]) is None
    gone = await live.tickd("jobs", "show", "nightly-ping")
    assert gone.code == 1 and gone.err.startswith("tickd: 404 Not Found")


async def test_executions_list_show_and_retry(live: Live) -> None:
    job = await live.post(
        "/v1/jobs",
        {
            "name": "flaky",
            "handler": "ping",
            "schedule": {"kind": "interval", "every_seconds": 3600},
            "params": {"url": "https://x.example", "attempts_to_fail": 1},
        },
    )
    live.clock.advance(3600)
    await live.harness.engine.drain()

    listed = await live.tickd("executions", "list", "--job", "flaky", "--status", "failed")
    assert listed.code == 0, listed.err
    header, row = listed.out.splitlines()
    starts = columns(header, "ID", "JOB", "STATUS", "SCHEDULED", "DURATION", "ATTEMPTS")
    assert starts == sorted(starts)
    [failed] = await live.store.list_executions(ExecutionQuery(job_id=job["id"]))
    assert row.split() == [
        *(failed.id, "flaky", "failed", "2026-03-02", "10:00:00", "UTC", "0ms", "1"),
        *("RuntimeError:", "upstream", "said", "no"),
    ]

    shown = await live.tickd("executions", "show", failed.id)
    assert "RuntimeError: upstream said no" in shown.out

    retried = await live.tickd("executions", "retry", failed.id)
    assert retried.code == 0 and retried.out.startswith(f"Queued a retry of execution {failed.id}")
    again = await live.tickd("executions", "retry", failed.id)
    assert again.code == 1 and again.err.startswith("tickd: 409 Conflict")

    as_json = await live.tickd("executions", "list", "--handler", "ping", "--limit", "1", "--json")
    assert json.loads(as_json.out) == await live.get("/v1/executions?handler=ping&limit=1")


async def test_a_sharded_job_from_the_command_line_and_its_shards_listed(live: Live) -> None:
    created = await live.tickd(
        "jobs", "create", "--name", "wide", "--handler", "ping", "--every", "3600",
        "--param", "url=https://x.example", "--shards", "2",
    )  # fmt: skip
    assert created.code == 0, created.err
    assert ["shards", "2"] in [line.split() for line in created.out.splitlines()]
    live.clock.advance(3600)
    await live.harness.engine.drain()

    listed = await live.tickd("executions", "list", "--job", "wide")
    assert listed.code == 0, listed.err
    header, *rows = listed.out.splitlines()
    assert header.split()[-2:] == ["SHARD", "ERROR"]
    assert sorted(row.split()[-2] for row in rows) == ["0/2", "1/2"]
    bad = await live.tickd(
        "jobs", "create", "--name", "w", "--handler", "ping", "--every", "60",
        "--param", "url=https://x.example", "--shards", "0",
    )  # fmt: skip
    assert bad.code == 1 and "shards" in bad.err


async def test_command_line_mistakes_exit_with_2(live: Live, tmp_path: Path) -> None:
    missing = await live.tickd("jobs", "create", "--name", "x")
    assert missing.code == 2 and "--handler" in missing.err
    (tmp_path / "job.json").write_text("{not json")
    unreadable = await live.tickd("jobs", "create", "-f", str(tmp_path / "job.json"))
    assert unreadable.code == 2 and "not JSON" in unreadable.err
    bad = await live.tickd("executions", "list", "--status", "exploded")
    assert bad.code == 2


async def test_an_unreachable_api_is_one_line_and_exit_1(live: Live) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run = await live.tickd("jobs", "list", "--url", f"http://127.0.0.1:{port}")
    assert run.code == 1
    assert run.err.startswith(f"tickd: cannot reach the tickd API at http://127.0.0.1:{port}")


async def test_client_commands_need_no_settings_and_no_handlers(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a client command loaded the daemon's settings or handlers")

    monkeypatch.setattr(cli, "load_settings", refuse)
    monkeypatch.setattr("tickd.app.load_registry", refuse)
    monkeypatch.setenv("TICKD_URL", live.url)
    monkeypatch.setenv("TICKD_TOKEN", ADMIN)
    monkeypatch.setenv("TICKD_LOG_LEVEL", "not-a-level")  # would stop load_settings
    # In a thread: the client is synchronous and the API answers on this loop.
    code = await asyncio.to_thread(
        cli.main, ["--config", "/no/such/file.toml", "jobs", "list", "--json"]
    )
    assert code == 0
    run = await live.tickd("--config", "/no/such/file.toml", "jobs", "list")
    assert run.code == 0 and run.out == "No jobs.\n"


# -- a URL that is no URL, a server that is not tickd ---------------------------------------------


async def run_tickd(*args: str, url: str) -> Run:
    """The command in a subprocess, with TICKD_URL and nothing else of the caller's TICKD_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKD_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**env, "TICKD_URL": url}, cwd=ROOT,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


def one_line(run: Run) -> str:
    assert "Traceback" not in run.err, run.err
    assert run.err.count("\n") == 1 and run.err.startswith("tickd"), run.err
    return run.err


@pytest.mark.parametrize(
    "url",
    ["http://[::1", "ftp://x", "localhost:8080", "http://", "http://host:99999", "http://h:port"],
)
async def test_a_malformed_url_is_one_line_and_exit_2(url: str) -> None:
    run = await run_tickd("jobs", "list", url=url)
    assert run.code == 2, run
    assert "TICKD_URL" in one_line(run)


PASSWORD = "pw-" + "q" * 20


@pytest.mark.parametrize(
    "userinfo", [f"user:{PASSWORD}", f"{PASSWORD}", f":{PASSWORD}", f"a@b:{PASSWORD}"]
)
async def test_credentials_in_the_url_are_refused_by_name_never_dialled_or_printed(
    live: Live, userinfo: str
) -> None:
    """`user:pw@` in the URL of a server that is up: a clear refusal naming the options, not a
    DNS error for a host named `user:pw@127.0.0.1`, and the password (or a user name that may
    be a token) shown masked."""
    url = live.url.replace("http://", f"http://{userinfo}@")
    for run in (
        await live.tickd("jobs", "list", "--url", url),
        await run_tickd("jobs", "list", url=url),
    ):
        assert run.code == 2, run
        line = one_line(run)
        assert "credentials in the URL" in line
        assert "--url" in line and "--token" in line
        assert "Name or service not known" not in line
        assert PASSWORD not in line and userinfo not in line
        assert live.url.replace("http://", "http://***@") in line


def impostor_app() -> web.Application:
    """Servers that answer, but not as tickd does: each under a prefix of its own."""

    async def html(request: web.Request) -> web.Response:
        return web.Response(
            text="<html><body>Welcome to nginx!</body></html>", content_type="text/html"
        )

    async def other_json(request: web.Request) -> web.Response:
        return web.json_response({"hello": "world"})

    async def odd_items(request: web.Request) -> web.Response:
        return web.json_response({"items": [1, "two"], "next_cursor": None})

    async def bad_gateway(request: web.Request) -> web.Response:
        page = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>\n</html>"
        return web.Response(status=502, text=page, content_type="text/html")

    async def redirect_loop(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.path)

    async def deep_json(request: web.Request) -> web.Response:
        return web.Response(body=b"[" * 5000 + b"]" * 5000, content_type="application/json")

    async def not_utf8(request: web.Request) -> web.Response:
        return web.Response(body=b'{"items": ["\xff"]}', content_type="application/json")

    app = web.Application()
    for prefix, serve in [
        ("html", html),
        ("other-json", other_json),
        ("odd-items", odd_items),
        ("bad-gateway", bad_gateway),
        ("redirect-loop", redirect_loop),
        ("deep-json", deep_json),
        ("not-utf8", not_utf8),
    ]:
        app.router.add_route("*", f"/{prefix}/{{tail:.*}}", serve)
    return app


@pytest.fixture
async def impostor() -> AsyncIterator[str]:
    runner = web.AppRunner(impostor_app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    "prefix",
    ["html", "other-json", "odd-items", "bad-gateway", "redirect-loop", "deep-json", "not-utf8"],
)
@pytest.mark.parametrize(
    "command", [("jobs", "list"), ("jobs", "show", "x"), ("executions", "retry", "x")]
)
async def test_a_server_that_is_not_tickd_is_one_line_and_exit_1(
    impostor: str, prefix: str, command: tuple[str, ...]
) -> None:
    run = await run_tickd(*command, url=f"{impostor}/{prefix}")
    assert run.code == 1, run
    line = one_line(run)
    assert "tickd API" in line or "502" in line, line


async def test_dead_letters_list_redrive_and_discard(live: Live) -> None:
    for name in ("doomed", "hopeless"):
        await live.post(
            "/v1/jobs",
            {
                "name": name,
                "handler": "boom",
                "schedule": {"kind": "interval", "every_seconds": 60},
            },
        )
    live.clock.advance(60)
    await live.harness.engine.drain()

    listed = await live.tickd("dead-letters", "list", "--job", "doomed")
    assert listed.code == 0, listed.err
    header, row = listed.out.splitlines()
    assert header.startswith("ID") and "doomed" in row and "failed" in row
    dead_id = row.split()[0]

    redriven = await live.tickd("dead-letters", "redrive", dead_id)
    assert redriven.code == 0 and f"Queued a re-drive of {dead_id}" in redriven.out
    again = await live.tickd("dead-letters", "redrive", dead_id)
    assert again.code == 1 and "409" in again.err
    both = await live.tickd("dead-letters", "redrive", dead_id, "--handler", "boom")
    assert both.code == 2

    [hopeless] = (await live.get("/v1/dead-letters"))["items"]
    discarded = await live.tickd("dead-letters", "discard", hopeless["id"], "--json")
    assert discarded.code == 0 and json.loads(discarded.out)["dead_letter"] == "discarded"
    empty = await live.tickd("dead-letters", "redrive", "--handler", "boom")
    assert (empty.code, empty.out.strip()) == (0, "Queued 0 re-drives.")
