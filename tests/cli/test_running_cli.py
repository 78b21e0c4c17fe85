"""`tickd runs running`, `tickd runs instances` and `tickd runs cancel`, as on-call runs them
against a live API."""

from __future__ import annotations

from tests.api.conftest import READ
from tests.api.test_cli import Live, columns
from tests.conftest import T0, make_job
from tickd.scheduler.model import Execution, Status


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


async def test_runs_instances_lists_each_instance_and_the_runs_it_holds(live: Live) -> None:
    await a_running_run(live)
    await live.store.beat("worker-2", T0)

    result = await live.tickd("runs", "instances")

    assert result.code == 0, result.err
    header, row = result.out.splitlines()
    assert header.split() == ["INSTANCE", "LAST", "BEAT", "RUNNING"]
    assert row.split()[0] == "worker-2" and row.split()[-1] == "1"
