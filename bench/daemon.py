"""The daemon as users run it: `python -m tickd --config <file> run`, a process of its own.

Started with a TOML file the benchmark writes (and no TICKD_* variables of the caller's, so the
file is all it reads); stopped with SIGTERM, then SIGKILL if it has not ended in time, always (a
`with` block). Its log goes to a file beside the config. With `timed`, it runs as
`python -m bench.timed_daemon`, which times each fetch and claim and logs each store call into
files beside the log.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.stack import Stack, free_port
from bench.timed_daemon import CALL_LOG, FETCH_LOG

STOP_SECONDS = 60.0
PR_SET_PDEATHSIG = 1


class Daemon:
    def __init__(
        self,
        stack: Stack,
        name: str,
        *,
        log_level: str = "INFO",
        instance: str = "bench",
        timed: bool = False,
    ) -> None:
        self.stack = stack
        self.port = free_port()
        self.config = stack.folder / f"{name}-{instance}.toml"
        self.log = stack.folder / f"{name}-{instance}.log"
        # Where bench.timed_daemon writes its fetches, when timed.
        self.fetch_log = stack.folder / f"{name}-{instance}.fetches.jsonl" if timed else None
        self.call_log = stack.folder / f"{name}-{instance}.calls.jsonl" if timed else None
        self.config.write_text(
            "\n".join(
                [
                    f'instance_id = "{instance}"',
                    f'store_url = "{stack.store_url}"',
                    f'lock_url = "{stack.lock_url}"',
                    f'events_url = "{stack.events_url}"',
                    f'mail_url = "outbox://{stack.folder}/outbox"',
                    'api_host = "127.0.0.1"',
                    f"api_port = {self.port}",
                    f'log_level = "{log_level}"',
                    # The alert domain's products beside the jobs, or in SQLite where the
                    # product store has no backend for the jobs' store (PostgreSQL).
                    *stack.resource_lines,
                    "",
                ]
            )
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> Daemon:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKD_")}
        module = "tickd"
        if self.fetch_log is not None and self.call_log is not None:
            module, env[FETCH_LOG] = "bench.timed_daemon", str(self.fetch_log)
            env[CALL_LOG] = str(self.call_log)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, "--config", str(self.config), "run"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=Path(__file__).resolve().parent.parent,
                preexec_fn=_die_with_parent,
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def wait_ready(self, timeout_seconds: float) -> bool:
        """True once /readyz answers 200 (store and lock reachable), False on timeout or exit."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if self._get("/readyz", timeout=1.0) is not None:
                return True
            time.sleep(0.1)
        return False

    def metrics(self) -> str | None:
        return self._get("/metrics", timeout=5.0)

    def _get(self, path: str, *, timeout: float) -> str | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}{path}", timeout=timeout
            ) as reply:
                body: bytes = reply.read()
                return body.decode()
        except (urllib.error.URLError, OSError):
            return None

    def peak_rss_mb(self) -> float | None:
        """The process's peak resident set (VmHWM), while it still runs."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
        return None

    def stop(self) -> None:
        """SIGTERM (the runs in flight finish and are recorded), SIGKILL after STOP_SECONDS."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)

    def fetches(self) -> list[list[float]]:
        """The fetches bench.timed_daemon logged (once stopped; none if not timed)."""
        return _lines(self.fetch_log)

    def store_calls(self) -> list[tuple[float, str]]:
        """Its store calls as bench.timed_daemon logged them: (began, method); once stopped,
        none if not timed."""
        return [(began, name) for began, name in _lines(self.call_log)]

    def log_tail(self, lines: int = 5) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []


def _lines(path: Path | None) -> list[list[Any]]:
    """A JSON-lines file the timed daemon wrote; none if there is none."""
    if path is None:
        return []
    try:
        text = path.read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the benchmark dies, however it dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def metric_sum(text: str | None, name: str, **labels: str) -> float | None:
    """The sum of a metric's samples (those with all of `labels`) in Prometheus text; None if
    the metric is not exposed at all."""
    if text is None:
        return None
    total, seen = 0.0, False
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    for line in text.splitlines():
        sample = line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " ")
        if sample and all(label in line for label in wanted):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def has_metric(text: str | None, name: str) -> bool:
    return text is not None and any(
        line.startswith(name) for line in text.splitlines() if not line.startswith("#")
    )
