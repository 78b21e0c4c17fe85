"""The events contract, run against every event backend (see EVENT_BACKENDS)."""

from __future__ import annotations

from datetime import timedelta

from tests.fixtures.events import PublisherUnderTest
from tests.fixtures.times import T0
from tickd.scheduler.events import execution_event
from tickd.scheduler.model import Execution, ExecutionError, Status


def execution(status: Status, job_id: str = "job-1") -> Execution:
    return Execution(
        job_id=job_id,
        job_name="nightly",
        handler="noop",
        scheduled_at=T0,
        status=status,
        started_at=T0,
        finished_at=None if status is Status.RUNNING else T0 + timedelta(seconds=2),
        error=ExecutionError(type="E", message="boom") if status is Status.FAILED else None,
        result={"secret-ish": "never in events"},
        owner="instance-a",
        token=7,
    )


async def test_events_arrive_in_order_as_cloudevents(publisher: PublisherUnderTest) -> None:
    runs = [execution(Status.RUNNING), execution(Status.FAILED, job_id="job-2")]
    for run in runs:
        publisher.publisher.publish(execution_event(run, source="instance-a", time=T0))

    received = await publisher.published(expected=2)

    assert [e["type"] for e in received] == ["job.execution.started", "job.execution.failed"]
    assert [e["subject"] for e in received] == ["job-1", "job-2"]
    assert publisher.keys == ["job-1", "job-2"], "keyed by job id"
    first = received[0]
    assert first["specversion"] == "1.0"
    assert first["source"] == "tickd/instance-a"
    assert first["datacontenttype"] == "application/json"
    assert first["data"]["id"] == runs[0].id
    assert first["data"]["scheduled_at"] == T0.isoformat()
    assert first["data"]["token"] == 7
    assert "result" not in first["data"], "results stay in the store, out of events"
    assert received[1]["data"]["error"] == {"type": "E", "message": "boom"}
    assert len({e["id"] for e in received}) == 2
