"""`?dry_run=true` on the job writes: every check of the write, its answer, and nothing written."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import WRITE, Api
from tickd.scheduler.ports.backends import JobSearch

JOB: dict[str, Any] = {
    "name": "nightly-ping",
    "handler": "ping",
    "schedule": {"kind": "cron", "expr": "0 30 2 * * *", "timezone": "Europe/Berlin"},
    "params": {"url": "https://example.com/health", "api_key": "sk-live-secret"},
    "timeout_seconds": 30,
}
# A job as a user mistyped it: the handler, the zone, the expression and the timeout.
FOUR_MISTAKES: dict[str, Any] = {
    **JOB,
    "handler": "sleeep",
    "schedule": {"kind": "cron", "expr": "*/70 * * * * *", "timezone": "Mars/Base"},
    "timeout_seconds": 100000,
}


async def stored(api: Api) -> tuple[int, dict[str, int]]:
    """How many jobs there are, and how many history entries each has."""
    jobs = await api.store.search_jobs(JobSearch(limit=1000))
    history = {job.name: len(await api.store.list_changes(job.id)) for job in jobs}
    return len(jobs), history


async def test_a_dry_run_create_answers_as_the_create_would_and_stores_nothing(api: Api) -> None:
    before = await stored(api)
    status, body, headers = await api.call("POST", "/v1/jobs?dry_run=true", json=JOB, token=WRITE)
    assert status == 201
    assert body["name"] == "nightly-ping" and body["next_run_at"] == "2026-03-03T01:30:00Z"
    assert body["params"]["api_key"] == "***"
    assert "location" not in headers
    assert await stored(api) == before
    assert (await api.store.outbox_backlog()).unsent == 0


async def test_a_dry_run_create_refuses_what_the_create_refuses(api: Api) -> None:
    dry = await api.call("POST", "/v1/jobs?dry_run=true", json=FOUR_MISTAKES, token=WRITE)
    real = await api.call("POST", "/v1/jobs", json=FOUR_MISTAKES, token=WRITE)
    assert dry[:2] == real[:2]
    assert dry[0] == 422
    assert await stored(api) == (0, {})


async def test_a_dry_run_create_of_a_taken_name_is_the_same_conflict(api: Api) -> None:
    await api.call("POST", "/v1/jobs", json=JOB)
    before = await stored(api)
    dry = await api.call("POST", "/v1/jobs?dry_run=true", json=JOB)
    real = await api.call("POST", "/v1/jobs", json=JOB)
    assert dry[0] == 409 and dry[:2] == real[:2]
    assert dry[1]["errors"] == [
        {"field": "name", "reason": "a job named 'nightly-ping' exists already"}
    ]
    assert await stored(api) == before


async def test_a_dry_run_update_answers_the_job_as_it_would_be_and_changes_nothing(
    api: Api,
) -> None:
    _, job, _ = await api.call("POST", "/v1/jobs", json=JOB)
    before = await stored(api)
    path = f"/v1/jobs/{job['id']}?dry_run=true"
    for method, body in (
        ("PUT", {**JOB, "timeout_seconds": 45}),
        ("PATCH", {"timeout_seconds": 45}),
    ):
        status, shown, headers = await api.call(
            method, path, json=body, headers={"If-Match": f'"{job["revision"]}"'}
        )
        assert status == 200, shown
        assert shown["timeout_seconds"] == 45 and shown["revision"] == job["revision"] + 1
        assert headers["etag"] == f'"{job["revision"] + 1}"'
    assert await stored(api) == before
    _, read, _ = await api.call("GET", f"/v1/jobs/{job['id']}")
    assert read == job


async def test_a_dry_run_update_refuses_what_the_update_refuses(api: Api) -> None:
    _, job, _ = await api.call("POST", "/v1/jobs", json=JOB)
    await api.call("POST", "/v1/jobs", json={**JOB, "name": "other"})
    before = await stored(api)
    path = f"/v1/jobs/{job['id']}"
    for body, headers in (
        ({"handler": "sleeep"}, {}),
        ({"schedule": {"kind": "cron", "expr": "0 0 3 * * *", "timezone": "Mars/Base"}}, {}),
        ({"name": "other"}, {}),
        ({"timeout_seconds": 45}, {"If-Match": '"99"'}),
    ):
        dry = await api.call("PATCH", path + "?dry_run=true", json=body, headers=headers)
        assert dry[0] in (409, 412, 422), dry
        assert await stored(api) == before
        real = await api.call("PATCH", path, json=body, headers=headers)
        assert dry[:2] == real[:2]
    assert await stored(api) == before


async def test_a_job_with_four_mistakes_gets_four_field_errors_at_once(api: Api) -> None:
    status, body, _ = await api.call("POST", "/v1/jobs", json=FOUR_MISTAKES)
    assert status == 422
    assert sorted(e["field"] for e in body["errors"]) == [
        "handler",
        "schedule.expr",
        "schedule.timezone",
        "timeout_seconds",
    ]
    assert "sleeep" in body["detail"] and "Mars/Base" in body["detail"]
