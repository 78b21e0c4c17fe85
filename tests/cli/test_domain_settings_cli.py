"""`tickd domains list|show|set|delete` against a real API (tests/api/test_cli.py's `live`
server): settings stored whole and shown, the list with each domain's jobs, --json as the API
sends it; a bad name is a usage error and a bad value an API error naming the field, and neither
changes anything. `tickd apply` stops at a domain's max_jobs, job by job."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.api.conftest import READ
from tests.api.test_cli import Live
from tests.conftest import make_job
from tickd.cli.domains import DOMAIN_COLUMNS
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.ports.backends import JobQuery

# The `tickd` command in a subprocess, against a real port: left out of `make quick`.
pytestmark = pytest.mark.slow


def fields(out: str) -> dict[str, str]:
    """`name  value` lines as printed by show."""
    return dict(line.split(None, 1) for line in out.splitlines())


def cells(line: str) -> list[str]:
    """A table's line, cut where two spaces or more part its columns."""
    return re.split(r"\s{2,}", line.strip())


async def test_set_show_and_delete_a_domains_settings(live: Live) -> None:
    await live.store.insert_missing_jobs([make_job("sync", "ping", domain="payments")])

    stored = await live.tickd(
        "domains", "set", "payments", "--weight", "5", "--max-jobs", "100", "--lag-objective", "90"
    )
    assert stored.code == 0, stored.err
    shown = fields(stored.out)
    assert {k: shown[k] for k in ("name", "jobs", "weight", "max_running", "max_jobs")} == {
        "name": "payments",
        "jobs": "1",
        "weight": "5",
        "max_running": "no cap",
        "max_jobs": "100",
    }
    assert shown["lag_objective"] == "1m30s"
    assert await live.store.get_domain("payments") == DomainSettings(
        name="payments",
        weight=5,
        max_jobs=100,
        lag_objective_seconds=90,
        updated_at=live.clock.now(),
    )

    again = await live.tickd("domains", "set", "payments", "--max-running", "3")
    assert again.code == 0, again.err
    record = await live.store.get_domain("payments")
    assert record is not None
    assert (record.weight, record.max_running, record.max_jobs) == (1, 3, None), "whole"

    deleted = await live.tickd("domains", "delete", "payments")
    assert (deleted.code, deleted.out.strip()) == (
        0,
        "Removed the settings of domain payments: it has the defaults again.",
    )
    read = await live.tickd("domains", "show", "payments", token=READ)
    assert fields(read.out)["settings"] == "none: the defaults"
    assert fields(read.out)["jobs"] == "1", "its jobs stay"


async def test_list_shows_every_domain_with_its_jobs_and_json_is_the_apis(live: Live) -> None:
    await live.store.insert_missing_jobs(
        [make_job("a", "ping", domain="search"), make_job("b", "ping")]
    )
    await live.store.put_domain(DomainSettings(name="payments", max_running=10))

    table = await live.tickd("domains", "list", token=READ)
    assert table.code == 0, table.err
    header, *rows = [cells(line) for line in table.out.splitlines()]
    assert header == list(DOMAIN_COLUMNS)
    assert rows == [
        ["default", "1", "1", "no cap", "no cap", "none", "defaults"],
        ["payments", "0", "1", "10", "no cap", "none", "stored"],
        ["search", "1", "1", "no cap", "no cap", "none", "defaults"],
    ]
    as_json = await live.tickd("domains", "list", "--json")
    assert json.loads(as_json.out) == await live.get("/v1/domains")


@pytest.mark.parametrize(
    "args",
    [
        ("domains", "set", "Payments", "--weight", "2"),
        ("domains", "show", "team a"),
        ("domains", "delete", "payments/eu"),
    ],
)
async def test_a_bad_name_is_a_usage_error_and_nothing_is_sent(
    live: Live, args: tuple[str, ...]
) -> None:
    run = await live.tickd(*args)

    assert run.code == 2 and run.out == ""
    assert "argument NAME: " in run.err and "lowercase letters" in run.err
    assert await live.store.list_domains() == []


async def test_a_bad_value_is_refused_naming_the_field_and_nothing_is_stored(
    live: Live,
) -> None:
    await live.store.put_domain(DomainSettings(name="payments", weight=7))

    run = await live.tickd("domains", "set", "payments", "--weight", "0", "--max-jobs", "5")

    assert run.code == 1 and run.out == ""
    assert "weight" in run.err and "greater than or equal to 1" in run.err
    assert await live.store.list_domains() == [DomainSettings(name="payments", weight=7)]


async def test_deleting_settings_that_are_not_stored_fails_saying_so(live: Live) -> None:
    run = await live.tickd("domains", "delete", "payments")

    assert run.code == 1
    assert "no settings stored" in run.err


JOBS_TOML = """
[[jobs]]
name = "{name}"
handler = "ping"
schedule = {{ kind = "interval", every_seconds = 300 }}
params = {{ url = "https://example.com/sync" }}
domain = "payments"
"""


async def test_apply_creates_up_to_a_domains_max_jobs_and_names_the_rest(
    live: Live, tmp_path: Path
) -> None:
    await live.store.put_domain(DomainSettings(name="payments", max_jobs=2))
    jobs_file = tmp_path / "jobs.toml"
    jobs_file.write_text("".join(JOBS_TOML.format(name=n) for n in "abc"), encoding="utf-8")

    run = await live.tickd("apply", "-f", str(jobs_file))

    assert run.code == 1
    assert run.out.splitlines() == ["created a", "created b", "2 changed, 1 failed, 0 unchanged."]
    assert "tickd: create c: domain: domain 'payments' is full" in run.err
    assert "its max_jobs is 2" in run.err
    assert [job.name for job in await live.store.list_jobs(JobQuery())] == ["a", "b"]
