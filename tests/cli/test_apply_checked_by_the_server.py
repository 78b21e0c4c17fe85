"""`tickd diff` and `tickd apply --dry-run` ask the server: each planned create and update is
checked as the write would be, so the plan shown is what apply will do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.test_cli import Live
from tickd.scheduler.ports.backends import JobQuery

# The `tickd` command in a subprocess, against a real port: left out of `make quick`.
pytestmark = pytest.mark.slow

MISTYPED = """
[[jobs]]
name = "nap"
handler = "sleeep"
schedule = { kind = "interval", every_seconds = 60 }

[[jobs]]
name = "base-ping"
handler = "ping"
schedule = { kind = "cron", expr = "0 0 3 * * *", timezone = "Mars/Base" }
params = { url = "https://example.com/health" }

[[jobs]]
name = "often-ping"
handler = "ping"
schedule = { kind = "interval", every_seconds = 300 }
params = { url = "https://example.com/often" }
"""


@pytest.mark.parametrize("command", [("diff",), ("apply", "--dry-run")])
async def test_a_plan_names_each_job_and_field_the_server_refuses(
    live: Live, tmp_path: Path, command: tuple[str, ...]
) -> None:
    jobs_file = tmp_path / "jobs.toml"
    jobs_file.write_text(MISTYPED, encoding="utf-8")

    plan = await live.tickd(*command, "-f", str(jobs_file))

    assert plan.code == 1, plan.err
    refused = plan.err.splitlines()
    assert len(refused) == 2
    assert refused[0].startswith("tickd: refused: create nap: handler: no handler named 'sleeep'")
    assert refused[1].startswith("tickd: refused: create base-ping: schedule.timezone: ")
    assert "Mars/Base" in refused[1]
    assert plan.out.splitlines()[0] == "+ create often-ping"
    assert plan.out.splitlines()[-1] == "1 to create, 2 refused; 0 unchanged."
    assert await live.store.list_jobs(JobQuery()) == []


OFTEN_PING = MISTYPED[MISTYPED.index('[[jobs]]\nname = "often-ping"') :]


async def test_a_refused_update_is_named_before_the_plan(live: Live, tmp_path: Path) -> None:
    jobs_file = tmp_path / "jobs.toml"
    jobs_file.write_text(OFTEN_PING, encoding="utf-8")
    assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
    before = await live.store.list_jobs(JobQuery())
    jobs_file.write_text(OFTEN_PING.replace('"ping"', '"sleeep"'), encoding="utf-8")

    plan = await live.tickd("diff", "--json", "-f", str(jobs_file))

    assert plan.code == 1, plan.err
    shown = json.loads(plan.out)
    assert shown["changes"] == []
    assert [(r["action"], r["name"]) for r in shown["refused"]] == [("update", "often-ping")]
    assert [e["field"] for e in shown["refused"][0]["errors"]] == ["handler"]
    assert await live.store.list_jobs(JobQuery()) == before
