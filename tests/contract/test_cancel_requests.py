"""Cancel requests on every store: kept by execution, the first for a run stands, and the
instance holding runs reads theirs in one query."""

from __future__ import annotations

from datetime import timedelta

from tests.conftest import T0
from tickd.scheduler.model import CancelRequest
from tickd.scheduler.ports.backends import Store


def request(execution_id: str, by: str, reason: str = "", seconds: int = 0) -> CancelRequest:
    return CancelRequest(
        execution_id=execution_id,
        requested_by=by,
        requested_at=T0 + timedelta(seconds=seconds),
        reason=reason,
    )


async def test_the_cancel_requests_of_the_runs_asked_about_are_read_back_as_written(
    store: Store,
) -> None:
    await store.request_cancel(request("run-1", "ops", "stuck on a dead upstream", 5))
    await store.request_cancel(request("run-2", "oncall"))
    await store.request_cancel(request("run-elsewhere", "ops"))

    found = await store.cancel_requests(["run-1", "run-2", "run-without-request"])

    assert sorted(found, key=lambda r: r.execution_id) == [
        request("run-1", "ops", "stuck on a dead upstream", 5),
        request("run-2", "oncall"),
    ]


async def test_the_first_cancel_request_of_a_run_stands(store: Store) -> None:
    await store.request_cancel(request("run-1", "ops", "first"))
    await store.request_cancel(request("run-1", "someone-else", "second", 30))

    assert await store.cancel_requests(["run-1"]) == [request("run-1", "ops", "first")]


async def test_asking_about_no_runs_reads_nothing(store: Store) -> None:
    assert await store.cancel_requests([]) == []
