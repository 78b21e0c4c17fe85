"""Running work through the API: the runs on the workers now with their age and instance, the
instances and what they hold, and a cancel that stops a run and says who asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.api.conftest import READ, WRITE, Api, serving
from tests.conftest import T0, EngineFactory, make_job
from tests.test_engine import WAIT
from tickd.scheduler.model import Job
from tickd.scheduler.plugin.api import HandlerContext, Result


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
