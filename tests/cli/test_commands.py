"""The `tickd` client commands against a real API (tests/api/test_cli.py's `live` server): a
command for every operation, options anywhere on the line, errors printed once in plain words,
and the exit codes scripts rely on."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from tests.api.conftest import ADMIN
from tests.api.test_cli import NIGHTLY, Live
from tickd import cli
from tickd.cli.completion import command_words, completion_script
from tickd.cli.parser import build_parser
from tickd.cli.reads import NOT_VERBS, VERBS
from tickd.scheduler.ports.backends import JobQuery

# The `tickd` command in a subprocess, against a real port: left out of `make quick`.
pytestmark = pytest.mark.slow


async def test_every_operation_of_the_api_has_a_command(live: Live) -> None:
    document = await live.get("/openapi.json")
    operations = {
        f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item
    }
    commands = {path.strip() for path, _ in command_words(build_parser())}

    assert sorted(operations - set(VERBS) - set(NOT_VERBS)) == []
    assert sorted(set(VERBS) - operations) == []
    for operation, verb in VERBS.items():
        words = [w for w in verb.split()[1:] if not w.startswith("-")]
        assert " ".join(words) in commands, operation


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "jobs", "list"],
        ["jobs", "--json", "list"],
        ["jobs", "list", "--json"],
        ["--config", "/no/such.toml", "jobs", "list", "--json"],
        ["jobs", "list", "--json", "--config", "/no/such.toml"],
    ],
)
async def test_options_go_anywhere_on_the_line(live: Live, args: list[str]) -> None:
    await live.post("/v1/jobs", NIGHTLY)

    run = await live.tickd(*args)

    assert run.code == 0, run.err
    assert [job["name"] for job in json.loads(run.out)["items"]] == ["nightly-ping"]


async def test_the_url_before_the_command_wins_over_the_environment(live: Live) -> None:
    run = await live.tickd("--url", "http://127.0.0.1:1", "jobs", "list")
    after = await live.tickd("jobs", "list", "--url", "http://127.0.0.1:1")

    assert run.code == after.code == 1
    assert run.err.startswith("tickd: cannot reach the tickd API at http://127.0.0.1:1")
    assert after.err == run.err


async def test_a_validation_error_is_printed_once_in_plain_words(live: Live) -> None:
    run = await live.tickd(
        "jobs", "create", "--name", "once", "--handler", "ping", "--at", "tomorrow",
        "--param", "url=https://example.com/x",
    )  # fmt: skip

    assert run.code == 1 and run.out == ""
    assert run.err.splitlines() == [
        "tickd: 422 Invalid request",
        "  schedule.at: must be an RFC 3339 date-time with an offset, in the years 1970 to "
        "8999, e.g. 2026-03-02T09:00:00Z",
    ]


async def test_usage_errors_exit_2_and_api_errors_1(live: Live) -> None:
    no_fields = await live.tickd("jobs", "patch", "nope")
    bad_redrive = await live.tickd("jobs", "patch", "nightly-ping", "--redrive", "three")
    unknown = await live.tickd("jobs", "show", "nope")

    assert no_fields.code == 2 and "nothing to change" in no_fields.err
    assert bad_redrive.code == 2
    assert "--redrive 'three': expected ATTEMPTS:BACKOFF" in bad_redrive.err
    assert unknown.code == 1 and unknown.err.count("\n") == 1


async def test_patch_preview_history_and_backfill_of_a_job(live: Live) -> None:
    await live.post("/v1/jobs", NIGHTLY)

    patched = await live.tickd(
        "jobs", "patch", "nightly-ping", "--priority", "high", "--misfire", "skip",
        "--jitter", "5", "--redrive", "3:60", "--param", "attempts_to_fail=1",
    )  # fmt: skip
    preview = await live.tickd("jobs", "preview", "nightly-ping", "--count", "3", "--json")
    history = await live.tickd("jobs", "history", "nightly-ping")
    backfill = await live.tickd(
        "jobs", "backfill", "nightly-ping",
        "--start", "2026-01-01T00:00:00Z", "--end", "2026-01-03T00:00:00Z",
    )  # fmt: skip

    assert patched.code == 0, patched.err
    job = (await live.get("/v1/jobs"))["items"][0]
    assert (job["priority"], job["misfire"]["policy"], job["jitter_seconds"]) == (
        "high", "skip", 5.0,
    )  # fmt: skip
    assert job["misfire"]["grace_seconds"] == 60.0  # kept: only the policy was given
    assert job["redrive"] == {"max_attempts": 3, "backoff_seconds": 60.0}
    [stored] = await live.store.list_jobs(JobQuery())
    assert stored.params == {**NIGHTLY["params"], "attempts_to_fail": 1}  # the secret kept
    assert len(json.loads(preview.out)["times"]) == 3
    assert [line.split()[4] for line in history.out.splitlines()[1:]] == ["update", "create"]
    assert backfill.code == 0 and backfill.out.startswith("Would run 2 occurrences")


async def test_the_other_reads_have_commands(live: Live) -> None:
    schedule = await live.tickd("schedules", "preview", "--cron", "0 0 9 * * *", "--count", "2")
    stats = await live.tickd("stats")
    whoami = await live.tickd("whoami")
    handlers = await live.tickd("handlers", "--api")

    assert schedule.code == 0 and len(schedule.out.splitlines()) == 3
    assert stats.code == 0 and "due backlog" in stats.out
    assert whoami.out == "root (admin)\n"
    assert handlers.code == 0 and "ping" in handlers.out


def test_the_version_and_the_help_of_the_exit_codes() -> None:
    with pytest.raises(SystemExit) as version:
        cli.main(["--version"])
    assert version.value.code == 0
    apply_help = _help(build_parser(), "apply")
    assert "3 with --dry-run" in apply_help


def _help(parser: argparse.ArgumentParser, command: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return str(action.choices[command].format_help())
    raise AssertionError(command)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_bash_completion_completes_commands_and_options() -> None:
    script = completion_script(build_parser(), "bash")
    probe = (
        script
        + 'COMP_WORDS=(tickd jobs pa); COMP_CWORD=2; _tickd; echo "${COMPREPLY[@]}"\n'
        + 'COMP_WORDS=(tickd jobs list --li); COMP_CWORD=3; _tickd; echo "${COMPREPLY[@]}"\n'
    )

    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)

    assert done.stdout.splitlines() == ["patch pause", "--limit"]


async def test_executions_show_prints_each_attempt_and_the_traceback(live: Live) -> None:
    job = await live.post(
        "/v1/jobs",
        {
            "name": "flaky",
            "handler": "ping",
            "schedule": {"kind": "interval", "every_seconds": 3600},
            "params": {"url": "https://x.example", "attempts_to_fail": 5},
            "max_retries": 1,
        },
    )
    live.clock.advance(3600)
    await live.harness.engine.drain()
    [failed] = (await live.get(f"/v1/jobs/{job['id']}/executions"))["items"]

    shown = await live.tickd("executions", "show", failed["id"])

    assert shown.code == 0, shown.err
    attempts = [line for line in shown.out.splitlines() if line.startswith("attempt ")]
    assert attempts == [
        "attempt 1: 2026-03-02 10:00:00 UTC to 2026-03-02 10:00:00 UTC, RuntimeError: "
        "upstream said no, retried after 1s",
        "attempt 2: 2026-03-02 10:00:01 UTC to 2026-03-02 10:00:01 UTC, RuntimeError: "
        "upstream said no",
    ]
    traceback = shown.out.split("traceback:\n", 1)[1]
    assert traceback.startswith("Traceback (most recent call last):")
    assert 'raise RuntimeError("upstream said no")' in traceback


def ctrl_c_as_at_a_terminal() -> None:
    """In the child before it starts: SIGINT's default action, which Python turns into
    KeyboardInterrupt. A test run started in the background by a shell without job control
    ignores SIGINT, and a child would inherit that and never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_follow_prints_each_ended_execution_once_and_ctrl_c_ends_it_cleanly(
    live: Live,
) -> None:
    job = {**NIGHTLY, "schedule": {"kind": "interval", "every_seconds": 3600}}
    await live.post("/v1/jobs", job)
    live.clock.advance(3600)
    await live.harness.engine.drain()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKD_")}
    env |= {"TICKD_URL": live.url, "TICKD_TOKEN": ADMIN}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd", "executions", "follow", "--recent", "--interval", "0.5",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        preexec_fn=ctrl_c_as_at_a_terminal,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        first = await asyncio.wait_for(process.stdout.readline(), timeout=20)
        live.clock.advance(3600)
        await live.harness.engine.drain()
        second = await asyncio.wait_for(process.stdout.readline(), timeout=20)
    finally:
        process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), timeout=20)
    err = await process.stderr.read()

    assert first.decode().split()[1:3] == ["nightly-ping", "success"]
    assert second.decode().split()[1:5] == ["nightly-ping", "success", "2026-03-02", "11:00:00"]
    assert code == 130 and err == b""
