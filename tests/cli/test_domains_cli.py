"""A job's domain from the command line, against a real API (tests/api/test_cli.py's `live`
server): `--domain` on create, replace and patch, shown by `jobs show`, a filter of `jobs list`,
a field of `tickd apply`'s files; a name that breaks the rule is a usage error, and nothing is
sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.test_cli import Live
from tickd.scheduler.ports.backends import JobQuery

# The `tickd` command in a subprocess, against a real port: left out of `make quick`.
pytestmark = pytest.mark.slow

PING = ("--handler", "ping", "--every", "60", "--param", "url=https://example.com/x")
JOBS_TOML = """
[[jobs]]
name = "payments-sync"
handler = "ping"
schedule = { kind = "interval", every_seconds = 300 }
params = { url = "https://example.com/sync" }
domain = "payments"

[[jobs]]
name = "cleanup"
handler = "ping"
schedule = { kind = "interval", every_seconds = 3600 }
params = { url = "https://example.com/cleanup" }
"""


async def domains(live: Live) -> dict[str, str]:
    return {job.name: job.domain for job in await live.store.list_jobs(JobQuery())}


async def listed(live: Live, *args: str) -> list[str]:
    run = await live.tickd("jobs", "list", "--json", *args)
    assert run.code == 0, run.err
    return [job["name"] for job in json.loads(run.out)["items"]]


async def test_create_patch_and_replace_set_the_domain_and_list_filters_by_it(
    live: Live,
) -> None:
    created = await live.tickd("jobs", "create", "--name", "a.sync", "--domain", "payments", *PING)
    assert created.code == 0, created.err
    assert ["domain", "payments"] in [line.split() for line in created.out.splitlines()]
    assert (await live.tickd("jobs", "create", "--name", "b.sync", *PING)).code == 0

    assert await listed(live, "--domain", "payments") == ["a.sync"]
    assert await listed(live, "--domain", "default") == ["b.sync"]
    patched = await live.tickd("jobs", "patch", "b.sync", "--domain", "payments")
    assert patched.code == 0, patched.err
    assert await listed(live, "--domain", "payments", "--limit", "1", "--all") == [
        "a.sync",
        "b.sync",
    ]
    replaced = await live.tickd(
        "jobs", "replace", "a.sync", "--name", "a.sync", "--domain", "search", *PING
    )
    assert replaced.code == 0, replaced.err
    assert await domains(live) == {"a.sync": "search", "b.sync": "payments"}
    shown = await live.tickd("jobs", "show", "a.sync")
    assert ["domain", "search"] in [line.split() for line in shown.out.splitlines()]


@pytest.mark.parametrize(
    "args",
    [
        ("jobs", "create", "--name", "x", "--domain", "Payments", *PING),
        ("jobs", "patch", "x", "--domain", "team a"),
        ("jobs", "list", "--domain", "payments/eu"),
    ],
)
async def test_a_bad_domain_is_a_usage_error_and_nothing_is_sent(
    live: Live, args: tuple[str, ...]
) -> None:
    run = await live.tickd(*args)

    assert run.code == 2 and run.out == ""
    assert "argument --domain: " in run.err and "lowercase letters" in run.err
    assert await live.store.list_jobs(JobQuery()) == []


async def test_apply_keeps_the_files_domains(live: Live, tmp_path: Path) -> None:
    jobs_file = tmp_path / "jobs.toml"
    jobs_file.write_text(JOBS_TOML, encoding="utf-8")

    first = await live.tickd("apply", "-f", str(jobs_file))
    assert first.code == 0, first.err
    assert await domains(live) == {"payments-sync": "payments", "cleanup": "default"}
    assert (await live.tickd("diff", "-f", str(jobs_file))).code == 0, "applied: no change"

    jobs_file.write_text(JOBS_TOML.replace('"payments"', '"billing"'), encoding="utf-8")
    diff = await live.tickd("diff", "-f", str(jobs_file))
    assert diff.code == 3
    assert diff.out.splitlines()[:2] == [
        "~ update payments-sync",
        '    domain: "payments" -> "billing"',
    ]
    assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
    assert await domains(live) == {"payments-sync": "billing", "cleanup": "default"}


async def test_apply_refuses_a_file_with_a_bad_domain_naming_the_field(
    live: Live, tmp_path: Path
) -> None:
    jobs_file = tmp_path / "jobs.toml"
    jobs_file.write_text(JOBS_TOML.replace('"payments"', '"Payments"'), encoding="utf-8")

    run = await live.tickd("apply", "-f", str(jobs_file))

    assert run.code == 2 and run.out == ""
    assert "jobs[0] (payments-sync): domain: " in run.err
    assert await live.store.list_jobs(JobQuery()) == []


async def test_the_lists_of_runs_keep_the_domain_named(live: Live) -> None:
    for name, domain in (("alpha", "team-a"), ("bravo", "team-b")):
        await live.post(
            "/v1/jobs",
            {
                "name": name,
                "handler": "boom",
                "schedule": {"kind": "interval", "every_seconds": 60},
                "domain": domain,
            },
        )
    live.clock.advance(60)
    await live.harness.engine.drain()

    async def names(*args: str) -> list[str]:
        run = await live.tickd(*args, "--json")
        assert run.code == 0, run.err
        return sorted(item["job_name"] for item in json.loads(run.out)["items"])

    assert await names("executions", "list") == ["alpha", "bravo"]
    assert await names("executions", "list", "--domain", "team-b") == ["bravo"]
    assert await names("dead-letters", "list", "--domain", "team-a") == ["alpha"]
    assert await names("runs", "running", "--domain", "team-a") == []
    refused = await live.tickd("executions", "list", "--domain", "Team A")
    assert refused.code == 2 and "--domain" in refused.err
