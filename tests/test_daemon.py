"""The daemon as ops run it: `tickd run` in a process of its own, on the shipped config."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tickd.scheduler.model import Status
from tickd.scheduler.ports.backends import ExecutionQuery
from tickd.scheduler.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent
# `make run` promises executions within ten seconds; the bound here is the same promise.
FIRST_EXECUTIONS_WITHIN = 10.0
STOP_WITHIN = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_daemon(
    tmp_path: Path, port: int, *extra: str, **variables: str
) -> asyncio.subprocess.Process:
    """`tickd run` on the shipped config, its files in `tmp_path`; `variables` add to or
    override its environment (TICKD_SEED_DEMO="false", say)."""
    env = {
        **os.environ,
        "TICKD_STORE_URL": f"sqlite:///{tmp_path}/tickd.db",
        "TICKD_MAIL_URL": f"outbox:///{tmp_path}/outbox",
        "TICKD_API_PORT": str(port),
        "TICKD_SHUTDOWN_GRACE_SECONDS": "5",
        **variables,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tickd",
        "--config",
        str(ROOT / "config" / "tickd.toml"),
        *extra,
        "run",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, int]]:
    port = free_port()
    process = await start_daemon(tmp_path, port)
    try:
        yield process, port
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def wait_for_successes(db: Path, count: int) -> list[str]:
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        async with asyncio.timeout(FIRST_EXECUTIONS_WITHIN):
            while True:
                runs = await store.list_executions(ExecutionQuery(status=Status.SUCCESS))
                if len(runs) >= count:
                    return sorted({r.job_name for r in runs})
                await asyncio.sleep(0.2)
    finally:
        await store.close()


async def test_make_run_shows_executions_then_stops_cleanly_on_sigterm(
    daemon: tuple[asyncio.subprocess.Process, int], tmp_path: Path
) -> None:
    process, port = daemon
    names = await wait_for_successes(tmp_path / "tickd.db", count=2)
    assert "demo-heartbeat" in names

    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        async with http.get("/healthz") as response:
            assert response.status == 200
        async with http.get("/readyz") as response:
            assert response.status == 200
            assert (await response.json())["ready"] is True
        async with http.get("/metrics") as response:
            text = await response.text()
            assert (
                'tickd_executions_total{domain="default",handler="noop",status="success"}' in text
            )
            assert "tickd_fire_lag_seconds_bucket" in text

    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(STOP_WITHIN):
        _, stderr = await process.communicate()
    log = stderr.decode()
    assert process.returncode == 0, log[-2000:]
    assert "daemon.stopping signal=SIGTERM" in log
    assert "daemon.stopped" in log


async def test_a_bad_setting_stops_startup_naming_it() -> None:
    env = {**os.environ, "TICKD_WORKERS": "none"}
    bad = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tickd",
        "run",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(STOP_WITHIN):
        _, stderr = await bad.communicate()
    assert bad.returncode == 2
    assert "TICKD_WORKERS" in stderr.decode()


async def test_without_tokens_the_api_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TICKD_API_HOST": "0.0.0.0",
        "TICKD_STORE_URL": f"sqlite:///{tmp_path}/tickd.db",
    }
    refused = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", "run", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(STOP_WITHIN):
        _, stderr = await refused.communicate()
    assert refused.returncode == 2
    assert "api_host" in stderr.decode() and "api_tokens" in stderr.decode()
    assert not (tmp_path / "tickd.db").exists(), "it stops before it opens anything"


async def test_tickd_api_serves_the_api_alone_and_runs_nothing(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "TICKD_STORE_URL": f"sqlite:///{tmp_path}/tickd.db",
        "TICKD_API_PORT": str(port),
        "TICKD_SEED_DEMO": "true",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", "api", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            async with asyncio.timeout(FIRST_EXECUTIONS_WITHIN):
                while True:
                    try:
                        async with http.get("/v1/handlers") as response:
                            names = [h["name"] for h in (await response.json())["items"]]
                            break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.1)
            assert "noop" in names
            async with http.get("/v1/jobs") as response:
                assert (await response.json())["items"] == [], "no dispatcher: nothing seeded"
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(STOP_WITHIN):
            _, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()[-2000:]
        assert "dispatcher=false" in stderr.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def refused_start(tmp_path: Path, **environ: str) -> tuple[int | None, str]:
    """`tickd run` with these variables, on a store of its own: its exit code and stderr."""
    env = {
        **os.environ,
        "TICKD_STORE_URL": f"sqlite:///{tmp_path}/tickd.db",
        "TICKD_MAIL_URL": f"outbox:///{tmp_path}/outbox",
        "TICKD_API_PORT": "0",
        **environ,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", "run", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(STOP_WITHIN):
            _, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode, stderr.decode()


@pytest.mark.parametrize(
    ("environ", "setting"),
    [
        ({"TICKD_LOOKAHEAD_SECONDS": "nan"}, "lookahead_seconds"),
        ({"TICKD_HTTP_ALLOW": "not-an-ip"}, "http_allow"),
        ({"TICKD_WORKRES": "8"}, "TICKD_WORKRES"),
        ({"TICKD_HANDLER_SETTINGS__WEBHOOK__REGION": "eu"}, "handler_settings.webhook.region"),
        ({"TICKD_STORE_URL": "cassandra://tickd:hunter2-pw@db/tickd"}, "store_url"),
    ],
)
async def test_a_setting_that_would_break_the_daemon_later_stops_it_in_one_line(
    tmp_path: Path, environ: dict[str, str], setting: str
) -> None:
    code, stderr = await refused_start(tmp_path, **environ)
    assert code == 2, stderr[-2000:]
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"tickd: configuration: {setting}: ")
    assert "hunter2-pw" not in stderr


LOG_LINE = re.compile(r"\d{4}-\d\d-\d\dT\S+ +[A-Z]+ +tickd\.")


@pytest.mark.parametrize("fault", ["not a database", "under a file", "events level"])
async def test_a_backend_that_cannot_be_opened_stops_startup_in_one_line(
    tmp_path: Path, fault: str
) -> None:
    environ: dict[str, str] = {}
    setting, url = "store_url", f"sqlite:///{tmp_path}/tickd.db"
    if fault == "not a database":
        (tmp_path / "tickd.db").write_bytes(b"these bytes are no SQLite database, " * 200)
    elif fault == "under a file":
        (tmp_path / "a-file").write_text("")
        url = f"sqlite:///{tmp_path}/a-file/tickd.db"
        environ["TICKD_STORE_URL"] = url
    else:
        setting, url = "events_url", "log://?level=loud"
        environ["TICKD_EVENTS_URL"] = url
    code, stderr = await refused_start(tmp_path, **environ)
    assert code == 2, stderr[-2000:]
    assert "Traceback" not in stderr
    *logged, last = stderr.splitlines()
    assert last.startswith(f"tickd: configuration: {setting}: cannot open {url}: "), stderr
    assert all(LOG_LINE.match(line) for line in logged), "only the daemon's own log lines"
    if fault == "not a database":
        assert "not a database" in last
