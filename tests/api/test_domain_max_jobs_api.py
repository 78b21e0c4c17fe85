"""A domain's max_jobs, checked by the job writes: a create, or a move into the domain (PUT or
PATCH changing `domain`), that would put it over its cap is a 409 naming `domain` and saying the
cap, a dry run too, and nothing is written; a write that keeps a job in its domain, a domain
without a cap and the other domains are not held back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.ports.backends import JobQuery

JOB: dict[str, Any] = {
    "handler": "ping",
    "schedule": {"kind": "interval", "every_seconds": 60},
    "params": {"url": "https://example.com/sync"},
}


async def create(api: Api, name: str, domain: str, **query: Any) -> tuple[int, Any]:
    body = {**JOB, "name": name, "domain": domain}
    status, answer, _ = await api.call("POST", "/v1/jobs", json=body, params=query)
    return status, answer


async def names_in(api: Api, domain: str) -> list[str]:
    return [job.name for job in await api.store.list_jobs(JobQuery(domain=domain))]


def refused_for_the_cap(status: int, problem: Any, domain: str, cap: int) -> bool:
    return (
        status == 409
        and [error["field"] for error in problem["errors"]] == ["domain"]
        and f"domain {domain!r} is full" in problem["detail"]
        and f"its max_jobs is {cap}" in problem["detail"]
    )


async def test_a_create_over_the_cap_is_refused_and_writes_nothing(api: Api) -> None:
    await api.store.put_domain(DomainSettings(name="payments", max_jobs=2))
    assert (await create(api, "a", "payments"))[0] == 201
    assert (await create(api, "b", "payments"))[0] == 201

    status, problem = await create(api, "c", "payments")

    assert refused_for_the_cap(status, problem, "payments", 2), problem
    assert "holds 2 jobs" in problem["detail"]
    assert await names_in(api, "payments") == ["a", "b"]
    assert (await create(api, "c", "search"))[0] == 201, "another domain is not held back"
    assert (await create(api, "d", "default"))[0] == 201


async def test_a_dry_run_is_refused_as_the_create_would_be(api: Api) -> None:
    await api.store.put_domain(DomainSettings(name="payments", max_jobs=1))
    await create(api, "a", "payments")

    status, problem = await create(api, "b", "payments", dry_run="true")

    assert refused_for_the_cap(status, problem, "payments", 1), problem
    assert await names_in(api, "payments") == ["a"]


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
async def test_a_move_into_a_full_domain_is_refused_and_changes_nothing(
    api: Api, method: str
) -> None:
    await api.store.put_domain(DomainSettings(name="payments", max_jobs=1))
    await create(api, "a", "payments")
    _, job = await create(api, "b", "search")
    body = (
        {"domain": "payments"} if method == "PATCH" else {**JOB, "name": "b", "domain": "payments"}
    )

    status, problem, _ = await api.call(method, f"/v1/jobs/{job['id']}", json=body)

    assert refused_for_the_cap(status, problem, "payments", 1), problem
    stored = await api.store.get_job(job["id"])
    assert stored is not None and (stored.domain, stored.revision) == ("search", 1)
    status, _, _ = await api.call(
        method, f"/v1/jobs/{job['id']}", json=body, params={"dry_run": "true"}
    )
    assert status == 409, "a dry run of the move too"


async def test_a_job_already_in_a_full_domain_is_still_changed_and_moved_out(api: Api) -> None:
    await api.store.put_domain(DomainSettings(name="payments", max_jobs=1))
    _, job = await create(api, "a", "payments")
    path = f"/v1/jobs/{job['id']}"

    status, patched, _ = await api.call("PATCH", path, json={"max_retries": 3})
    assert (status, patched["max_retries"]) == (200, 3), patched
    status, replaced, _ = await api.call(
        "PUT", path, json={**JOB, "name": "a", "domain": "payments"}
    )
    assert status == 200, replaced
    status, moved, _ = await api.call("PATCH", path, json={"domain": "search"})
    assert (status, moved["domain"]) == (200, "search"), moved
    assert (await create(api, "b", "payments"))[0] == 201, "the room it left"


async def test_a_cap_below_the_jobs_held_keeps_them_and_refuses_more(api: Api) -> None:
    for name in ("a", "b", "c"):
        await create(api, name, "payments")
    status, stored, _ = await api.call("PUT", "/v1/domains/payments", json={"max_jobs": 2})
    assert (status, stored["job_count"]) == (200, 3), stored

    status, problem = await create(api, "d", "payments")
    assert refused_for_the_cap(status, problem, "payments", 2), problem
    assert "holds 3 jobs" in problem["detail"]
    assert await names_in(api, "payments") == ["a", "b", "c"]

    await api.call("DELETE", "/v1/domains/payments")
    assert (await create(api, "d", "payments"))[0] == 201, "no record, no cap"


async def test_a_domain_without_a_cap_takes_any_number_of_jobs(api: Api) -> None:
    await api.store.put_domain(DomainSettings(name="payments", weight=5, max_running=1))
    for name in ("a", "b", "c"):
        assert (await create(api, name, "payments"))[0] == 201
    assert await names_in(api, "payments") == ["a", "b", "c"]
