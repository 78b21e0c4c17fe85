"""`tickd runs running`, `tickd instances` (and `tickd runs instances`) and `tickd runs cancel`,
as on-call runs them against a live API."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.api.conftest import READ
from tests.api.test_cli import Live, columns
from tests.conftest import T0, make_job
from tickd.cli.running import INSTANCE_COLUMNS
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports.backends import InstanceStatus


async def a_running_run(live: Live) -> Execution:
    job = await live.harness.add(make_job("nightly-export", "ping", params={"url": "https://x"}))
    run = Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=T0,
        status=Status.RUNNING,
        started_at=T0,
        owner="worker-2",
        token=1,
        attempts=1,
    )
    await live.store.insert_executions([run])
    return run


async def test_runs_running_lists_each_run_with_its_instance_attempt_and_age(live: Live) -> None:
    run = await a_running_run(live)
    live.clock.advance(125)

    result = await live.tickd("runs", "running", token=READ)

    assert result.code == 0, result.err
    header, row = result.out.splitlines()
    starts = columns(header, "ID", "JOB", "HANDLER", "INSTANCE", "ATTEMPTS", "STARTED", "AGE")
    assert starts == sorted(starts)
    assert row.startswith(run.id)
    assert "nightly-export" in row and "worker-2" in row
    assert row[starts[6] :].split()[0] == "2m5s", "the age, by the server's clock"


async def test_runs_running_says_so_when_nothing_runs(live: Live) -> None:
    result = await live.tickd("runs", "running")
    assert (result.code, result.out.strip()) == (0, "Nothing is running.")


async def test_runs_cancel_asks_the_run_to_stop_naming_who_asked(live: Live) -> None:
    run = await a_running_run(live)

    result = await live.tickd("runs", "cancel", run.id, "--reason", "upstream is down")

    assert result.code == 0, result.err
    assert f"Asked execution {run.id} to stop (as root)" in result.out
    [request] = await live.store.cancel_requests([run.id])
    assert (request.requested_by, request.reason) == ("root", "upstream is down")
    listed = await live.tickd("runs", "running")
    assert "asked by root" in listed.out


async def test_runs_cancel_of_an_ended_run_fails_naming_its_status(live: Live) -> None:
    job = await live.harness.add(make_job("done-job", "ping", params={"url": "https://x"}))
    done = Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=T0,
        status=Status.SUCCESS,
        started_at=T0,
        finished_at=T0,
    )
    await live.store.insert_executions([done])

    result = await live.tickd("runs", "cancel", done.id)

    assert result.code != 0
    assert "success" in result.err
    assert await live.store.cancel_requests([done.id]) == []


def cells(table: str) -> list[list[str]]:
    """The rows of a table `print_table` printed, cut at its columns' starts."""
    header, *rows = table.splitlines()
    starts = columns(header, *INSTANCE_COLUMNS)
    assert starts == sorted(starts)
    ends = [*starts[1:], None]
    return [[row[a:b].strip() for a, b in zip(starts, ends, strict=True)] for row in rows]


@pytest.mark.parametrize("command", [["instances"], ["runs", "instances"]])
async def test_instances_lists_each_ones_version_start_partitions_and_runs(
    live: Live, command: list[str]
) -> None:
    await a_running_run(live)
    started = T0 - timedelta(hours=2)
    await live.store.beat("worker-2", T0, InstanceStatus("1.4.0", started, 3))
    await live.store.take_partitions("worker-2", [0, 1, 2])
    await live.store.beat("worker-9", T0 + timedelta(seconds=1))  # says nothing of itself

    result = await live.tickd(*command, token=READ)

    assert result.code == 0, result.err
    assert cells(result.out) == [
        ["worker-2", "1.4.0", "2026-03-02 07:00:00 UTC", "3", "3", "1", "2026-03-02 09:00:00 UTC"],
        ["worker-9", "-", "-", "0", "-", "0", "2026-03-02 09:00:01 UTC"],
    ]


async def test_instances_as_json_is_the_apis_page(live: Live) -> None:
    await live.store.beat("worker-2", T0, InstanceStatus("1.4.0", T0, 0))

    result = await live.tickd("instances", "--json")

    assert result.code == 0, result.err
    assert json.loads(result.out) == await live.get("/v1/instances")


async def test_instances_says_so_when_none_has_beat(live: Live) -> None:
    result = await live.tickd("instances")
    assert (result.code, result.out.strip()) == (0, "No instance has beat.")
