"""Running work through the API: the runs on the workers now with their age and instance, the
instances, how each one says it is and what it holds, and a cancel that stops a run and says who
asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.api.conftest import READ, WRITE, Api, serving
from tests.conftest import T0, EngineFactory, make_job
from tests.test_engine import WAIT
from tickd.scheduler.metrics import tickd_version
from tickd.scheduler.model import Job
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import InstanceStatus


@dataclass
class Stuck:
    api: Api
    job: Job
    execution_id: str


@pytest.fixture
async def stuck(make_engine: EngineFactory) -> AsyncIterator[Stuck]:
    """A run whose handler waits for ever, on the workers of the API's engine."""
    started = asyncio.Event()

    async def hangs(ctx: HandlerContext) -> Result:
        started.set()
        await asyncio.Event().wait()
        return None

    async with serving(make_engine, {"hangs": hangs}) as api:
        job = await api.harness.add(make_job("nightly-export", "hangs", timeout_seconds=600))
        api.harness.engine.start()
        await api.harness.engine.tick()
        await asyncio.wait_for(started.wait(), WAIT)
        _, page, _ = await api.call("GET", "/v1/running")
        yield Stuck(api, job, page["items"][0]["id"])


async def test_the_running_view_lists_each_run_with_its_age_instance_and_attempt(
    stuck: Stuck,
) -> None:
    stuck.api.clock.advance(90)
    status, body, _ = await stuck.api.call("GET", "/v1/running", token=READ)
    assert status == 200, body
    [run] = body["items"]
    assert run["id"] == stuck.execution_id
    assert (run["job_name"], run["handler"], run["instance"]) == (
        "nightly-export",
        "hangs",
        "test-instance",
    )
    assert run["age_seconds"] == 90.0
    assert (run["shard"], run["shards"], run["cancel_requested_by"]) == (0, 1, None)
    assert "attempts" in run


async def test_the_instances_list_says_each_ones_last_beat_and_runs_held(stuck: Stuck) -> None:
    await stuck.api.store.beat("test-instance", T0)
    await stuck.api.store.beat("idle-instance", T0)
    status, body, _ = await stuck.api.call("GET", "/v1/instances", token=READ)
    assert status == 200, body
    assert [(i["id"], i["running"]) for i in body["items"]] == [
        ("idle-instance", 0),
        ("test-instance", 1),
    ]


def said(instance: dict[str, Any]) -> tuple[Any, ...]:
    """What an instance of GET /v1/instances says of itself, its start as a time."""
    started = instance["started_at"]
    return (
        instance["version"],
        None if started is None else datetime.fromisoformat(started),
        instance["partitions"],
        instance["runs_in_flight"],
    )


async def test_the_instances_list_says_what_each_one_wrote_of_itself(api: Api) -> None:
    started = T0 - timedelta(hours=5)
    await api.store.beat("worker-a", T0, InstanceStatus("1.4.0", started, 3))
    await api.store.take_partitions("worker-a", [0, 1, 2, 7])
    await api.store.beat("worker-b", T0 + timedelta(seconds=2))  # says nothing of itself

    status, body, _ = await api.call("GET", "/v1/instances", token=READ)

    assert status == 200, body
    listed = {i["id"]: i for i in body["items"]}
    assert said(listed["worker-a"]) == ("1.4.0", started, 4, 3)
    assert said(listed["worker-b"]) == (None, None, 0, None)
    assert datetime.fromisoformat(listed["worker-b"]["last_beat_at"]) == T0 + timedelta(seconds=2)
    assert (listed["worker-a"]["running"], listed["worker-b"]["running"]) == (0, 0)


async def test_a_beat_without_a_status_leaves_the_last_one_listed(api: Api) -> None:
    await api.store.beat("worker-a", T0, InstanceStatus("1.4.0", T0, 2))
    await api.store.beat("worker-a", T0 + timedelta(seconds=3))

    _, body, _ = await api.call("GET", "/v1/instances", token=READ)

    [listed] = [i for i in body["items"] if i["id"] == "worker-a"]
    assert said(listed) == ("1.4.0", T0, 0, 2)
    assert datetime.fromisoformat(listed["last_beat_at"]) == T0 + timedelta(seconds=3)


async def test_an_instances_own_heartbeat_lists_its_version_start_partitions_and_runs(
    stuck: Stuck,
) -> None:
    api = stuck.api
    api.clock.advance(90)
    await api.harness.engine.heartbeat.beat(api.clock.now())

    _, body, _ = await api.call("GET", "/v1/instances", token=READ)

    [me] = [i for i in body["items"] if i["id"] == "test-instance"]
    # Started when its engine was built, at T0; alone, it holds every partition.
    assert said(me) == (tickd_version(), T0, api.harness.settings.partitions, 1)
    assert me["running"] == 1
    assert datetime.fromisoformat(me["last_beat_at"]) == T0 + timedelta(seconds=90)


async def test_a_cancel_stops_the_run_and_the_record_says_who_asked(stuck: Stuck) -> None:
    api = stuck.api
    path = f"/v1/executions/{stuck.execution_id}/cancel"
    status, body, _ = await api.call("POST", path, token=WRITE, json={"reason": "upstream is down"})
    assert status == 202, body
    assert (body["requested_by"], body["reason"]) == ("deployer", "upstream is down")
    assert "sync handler" in body["interrupts"]
    _, running, _ = await api.call("GET", "/v1/running")
    assert running["items"][0]["cancel_requested_by"] == "deployer"

    await api.harness.engine.tick()
    await asyncio.wait_for(api.harness.engine.settled(), WAIT)

    status, run, _ = await api.call("GET", f"/v1/executions/{stuck.execution_id}")
    assert (run["status"], run["error"]["message"]) == (
        "cancelled",
        "cancelled by deployer: upstream is down",
    )
    assert run["dead_letter"] is None
    status, again, _ = await api.call("POST", path, token=WRITE)
    assert status == 409, again
    assert "cancelled" in again["detail"]
    assert (await api.call("GET", "/v1/running"))[1]["items"] == []


async def test_a_read_token_cannot_cancel_and_changes_nothing(stuck: Stuck) -> None:
    path = f"/v1/executions/{stuck.execution_id}/cancel"
    status, _, _ = await stuck.api.call("POST", path, token=READ)
    assert status == 403
    assert await stuck.api.store.cancel_requests([stuck.execution_id]) == []


async def test_cancelling_an_unknown_execution_is_not_found(api: Api) -> None:
    status, body, _ = await api.call("POST", "/v1/executions/no-such-run/cancel")
    assert status == 404, body
    assert "no-such-run" in body["detail"]


async def test_a_reason_that_is_not_text_is_refused_naming_the_field(stuck: Stuck) -> None:
    path = f"/v1/executions/{stuck.execution_id}/cancel"
    status, body, _ = await stuck.api.call("POST", path, json={"reason": 42})
    assert status == 422, body
    assert [e["field"] for e in body["errors"]] == ["reason"]
    assert await stuck.api.store.cancel_requests([stuck.execution_id]) == []
