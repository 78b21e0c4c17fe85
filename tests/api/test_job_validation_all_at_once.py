"""A job write with mistakes of every kind (a value of the wrong type, a schedule the scheduler
refuses, an unknown handler) is answered once, naming each field at fault, and changes nothing."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api
from tickd.scheduler.ports.backends import JobSearch

JOB: dict[str, Any] = {
    "name": "nightly-ping",
    "handler": "ping",
    "schedule": {"kind": "cron", "expr": "0 30 2 * * *", "timezone": "Europe/Berlin"},
    "params": {"url": "https://example.com/health"},
    "timeout_seconds": 30,
}
# A malformed value and two the scheduler refuses, in one body.
THREE_MISTAKES: dict[str, Any] = {
    **JOB,
    "timeout_seconds": "abc",
    "schedule": {"kind": "cron", "expr": "*/70 * * * * *"},
    "handler": "sleeep",
}


def fields(body: dict[str, Any]) -> set[str]:
    return {error["field"] for error in body["errors"]}


async def job_names(api: Api) -> list[str]:
    return [job.name for job in await api.store.search_jobs(JobSearch(limit=100))]


async def test_a_create_names_a_malformed_field_and_the_refused_ones_in_one_answer(
    api: Api,
) -> None:
    status, body, _ = await api.call("POST", "/v1/jobs", json=THREE_MISTAKES)
    assert status == 422
    assert fields(body) == {"timeout_seconds", "schedule.expr", "handler"}
    assert await job_names(api) == []


async def test_a_dry_run_create_names_every_field_at_fault_at_once(api: Api) -> None:
    status, body, _ = await api.call("POST", "/v1/jobs?dry_run=true", json=THREE_MISTAKES)
    assert status == 422
    assert fields(body) == {"timeout_seconds", "schedule.expr", "handler"}
    assert await job_names(api) == []


async def test_a_replace_names_every_field_at_fault_at_once_and_keeps_the_job(api: Api) -> None:
    _, created, _ = await api.call("POST", "/v1/jobs", json=JOB)
    path = f"/v1/jobs/{created['id']}"
    for query in ("", "?dry_run=true"):
        status, body, _ = await api.call("PUT", path + query, json=THREE_MISTAKES)
        assert status == 422
        assert fields(body) == {"timeout_seconds", "schedule.expr", "handler"}
    _, after, _ = await api.call("GET", path)
    assert after == created


async def test_a_change_names_every_field_at_fault_at_once_and_keeps_the_job(api: Api) -> None:
    _, created, _ = await api.call("POST", "/v1/jobs", json=JOB)
    path = f"/v1/jobs/{created['id']}"
    change = {"timeout_seconds": "abc", "schedule": THREE_MISTAKES["schedule"]}
    status, body, _ = await api.call("PATCH", path, json=change)
    assert status == 422
    assert fields(body) == {"timeout_seconds", "schedule.expr"}
    _, after, _ = await api.call("GET", path)
    assert after == created


async def test_a_field_of_the_wrong_type_is_named_once_with_what_it_must_be(api: Api) -> None:
    mistakes = {**THREE_MISTAKES, "handler": 5, "timeout_seconds": 30}
    status, body, _ = await api.call("POST", "/v1/jobs", json=mistakes)
    assert status == 422
    assert [e["field"] for e in body["errors"]] == ["handler", "schedule.expr"]
    assert body["errors"][0]["reason"] == "Input should be a valid string"


async def test_a_refusal_that_depends_on_a_malformed_field_is_left_to_its_fix(api: Api) -> None:
    # The params are checked against the handler's schema: with no valid handler named, the
    # handler is the one mistake to report.
    mistakes = {**JOB, "handler": ["ping"], "params": {"url": "ftp://example.com"}}
    status, body, _ = await api.call("POST", "/v1/jobs", json=mistakes)
    assert status == 422
    assert fields(body) == {"handler"}
