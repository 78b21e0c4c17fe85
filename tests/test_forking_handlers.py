"""Handlers that fork, or leave threads behind, in a real `tickd run`: a forked child never runs
tickd's code (it ends as soon as it gets back into it), the daemon keeps dispatching, answering
and stopping, and a handler's leftover thread does not keep the stopped daemon alive."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.test_daemon import ROOT, STOP_WITHIN, free_port
from tests.test_daemon_signals import Log

# Far more than a run of any handler here takes: a test that waits this long has failed.
WITHIN = 20.0

# The plug-in, installed as pip would leave it: each handler reports what its child did.
HANDLERS = '''
import asyncio
import multiprocessing
import os
import select
import subprocess
import sys
import threading

# How long a parent waits for its child: one that is still running by then runs tickd's code.
CHILD_ENDS_WITHIN = 8.0


def child_exit_code(pid):
    """The child's exit code, or None if it is still running after CHILD_ENDS_WITHIN."""
    ended = os.pidfd_open(pid)
    try:
        readable, _, _ = select.select([ended], [], [], CHILD_ENDS_WITHIN)
    finally:
        os.close(ended)
    if not readable:
        return None
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


async def child_exit_code_async(pid):
    return await asyncio.to_thread(child_exit_code, pid)


def fork_then_exit(ctx):
    pid = os.fork()
    if pid == 0:
        sys.exit(0)
    return {"child": pid, "exit_code": child_exit_code(pid)}


def fork_then_exit_3(ctx):
    pid = os.fork()
    if pid == 0:
        sys.exit(3)
    return {"child": pid, "exit_code": child_exit_code(pid)}


def fork_then_return(ctx):
    pid = os.fork()
    if pid == 0:
        return {"from": "the child"}
    return {"child": pid, "exit_code": child_exit_code(pid)}


async def fork_then_exit_async(ctx):
    pid = os.fork()
    if pid == 0:
        sys.exit(0)
    return {"child": pid, "exit_code": await child_exit_code_async(pid)}


async def fork_then_return_async(ctx):
    pid = os.fork()
    if pid == 0:
        return {"from": "the child"}
    return {"child": pid, "exit_code": await child_exit_code_async(pid)}


async def fork_then_await_async(ctx):
    pid = os.fork()
    if pid == 0:
        await asyncio.sleep(0)
        return {"from": "the child"}
    return {"child": pid, "exit_code": await child_exit_code_async(pid)}


def square(number, answers):
    answers.put(number * number)


def multiprocessing_fork(ctx):
    forking = multiprocessing.get_context("fork")
    answers = forking.SimpleQueue()
    process = forking.Process(target=square, args=(7, answers))
    process.start()
    process.join(CHILD_ENDS_WITHIN)
    return {"child": process.pid, "exit_code": process.exitcode, "answer": answers.get()}


def multiprocessing_terminated(ctx):
    forking = multiprocessing.get_context("fork")
    process = forking.Process(target=threading.Event().wait)
    process.start()
    process.terminate()
    process.join(CHILD_ENDS_WITHIN)
    return {"child": process.pid, "exit_code": process.exitcode}


def run_subprocess(ctx):
    done = subprocess.run(
        [sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True
    )
    return {"output": done.stdout.strip()}


def leak_thread(ctx):
    threading.Thread(target=threading.Event().wait, name="left-behind", daemon=False).start()
    return None


async def leak_work_on_a_thread(ctx):
    asyncio.get_running_loop().run_in_executor(None, threading.Event().wait)
    return None
'''

ENTRY_POINTS = [
    "fork_then_exit",
    "fork_then_exit_3",
    "fork_then_return",
    "fork_then_exit_async",
    "fork_then_return_async",
    "fork_then_await_async",
    "multiprocessing_fork",
    "multiprocessing_terminated",
    "run_subprocess",
    "leak_thread",
    "leak_work_on_a_thread",
]


def install_plugin(root: Path) -> None:
    info = root / "forking_handlers-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: forking-handlers\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = forking_handlers:{name}" for name in ENTRY_POINTS)
    (info / "entry_points.txt").write_text(f"[tickd.handlers]\n{lines}\n")
    (root / "forking_handlers.py").write_text(HANDLERS)


@dataclass
class Daemon:
    process: asyncio.subprocess.Process
    log: Log
    port: int
    http: aiohttp.ClientSession

    async def run(self, handler: str) -> dict[str, Any]:
        """Create a job of `handler`, trigger it and wait for its run's end: the execution."""
        job = {
            "name": handler.replace("_", "-"),
            "handler": handler,
            "timeout_seconds": 60,
            "schedule": {"kind": "interval", "every_seconds": 3600},
        }
        async with self.http.post("/v1/jobs", json=job) as response:
            assert response.status == 201, await response.text()
            job_id = str((await response.json())["id"])
        async with self.http.post(f"/v1/jobs/{job_id}/trigger") as response:
            assert response.status == 202, await response.text()
        await self.log.line_with('"type":"job.execution.', job_id, '"finished_at":"')
        async with self.http.get("/v1/executions", params={"job_id": job_id}) as response:
            assert response.status == 200, await response.text()
            runs: list[dict[str, Any]] = (await response.json())["items"]
        return runs[0]

    async def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(STOP_WITHIN):
            await self.process.wait()
            return await self.log.whole()


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    install_plugin(tmp_path / "site")
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]),
        "TICKD_STORE_URL": f"sqlite:///{tmp_path}/tickd.db",
        "TICKD_MAIL_URL": f"outbox:///{tmp_path}/outbox",
        "TICKD_API_PORT": str(port),
        "TICKD_SHUTDOWN_GRACE_SECONDS": "5",
        "TICKD_SEED_DEMO": "false",
        "TICKD_EVENTS_URL": "log://",  # each run's end as an INFO line
    }
    env.pop("TICKD_API_TOKENS", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", "--config", str(ROOT / "config" / "tickd.toml"), "run",
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # the daemon and whatever its handlers fork: one group to end
    )  # fmt: skip
    assert process.stderr is not None
    log = Log(process.stderr)
    try:
        await log.line_with("api.listening")
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            yield Daemon(process, log, port, http)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


def nobody_listens_on(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def still_works_and_stops(daemon: Daemon) -> None:
    """Another job runs, /healthz answers, SIGTERM stops it cleanly and frees its port."""
    assert (await daemon.run("noop"))["status"] == "success"
    async with daemon.http.get("/healthz") as response:
        assert response.status == 200
    log = await daemon.stop()
    assert daemon.process.returncode == 0, log[-3000:]
    assert "daemon.stopped" in log
    assert nobody_listens_on(daemon.port)


@pytest.mark.parametrize(
    "handler",
    [
        "fork_then_exit",
        "fork_then_return",
        "fork_then_exit_async",
        "fork_then_return_async",
        "fork_then_await_async",
    ],
)
async def test_a_forked_child_that_gets_back_into_tickd_ends_and_the_daemon_carries_on(
    daemon: Daemon, handler: str
) -> None:
    run = await daemon.run(handler)

    assert run["status"] == "success", run
    assert run["result"]["exit_code"] is not None, "the child was still running tickd's code"
    assert "from" not in run["result"], "the child's return became the run's result"
    await still_works_and_stops(daemon)


async def test_a_sys_exit_in_a_forked_child_ends_it_with_its_code(daemon: Daemon) -> None:
    run = await daemon.run("fork_then_exit_3")

    assert run["status"] == "success", run
    assert run["result"]["exit_code"] == 3
    await still_works_and_stops(daemon)


async def test_a_handler_using_multiprocessing_with_fork_gets_its_childs_work(
    daemon: Daemon,
) -> None:
    run = await daemon.run("multiprocessing_fork")

    assert run["status"] == "success", run
    assert run["result"]["exit_code"] == 0
    assert run["result"]["answer"] == 49
    await still_works_and_stops(daemon)


async def test_terminating_a_forked_child_ends_the_child_not_the_daemon(daemon: Daemon) -> None:
    run = await daemon.run("multiprocessing_terminated")

    assert run["status"] == "success", run
    assert run["result"]["exit_code"] == -signal.SIGTERM
    await still_works_and_stops(daemon)


async def test_a_handler_running_a_subprocess_gets_its_output(daemon: Daemon) -> None:
    run = await daemon.run("run_subprocess")

    assert run["status"] == "success", run
    assert run["result"] == {"output": "42"}
    await still_works_and_stops(daemon)


@pytest.mark.parametrize(
    ("handler", "thread"), [("leak_thread", "left-behind"), ("leak_work_on_a_thread", "asyncio")]
)
async def test_a_thread_a_handler_left_running_does_not_keep_the_stopped_daemon_alive(
    daemon: Daemon, handler: str, thread: str
) -> None:
    assert (await daemon.run(handler))["status"] == "success"

    log = await daemon.stop()

    assert daemon.process.returncode == 0, log[-3000:]
    assert "daemon.stopped" in log
    assert "daemon.threads_left_running" in log
    assert thread in log  # named, so that its handler can be found
