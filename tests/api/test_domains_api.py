"""A job's domain through the API: set on a create, a replace or a patch, shown on every job,
recorded in the history when it moves, a filter of the jobs list, stated in the OpenAPI document;
a name that breaks the rule is refused naming `domain`, and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import READ, Api
from tickd.scheduler.domains import DOMAIN_PATTERN
from tickd.scheduler.ports.backends import JobQuery

JOB: dict[str, Any] = {
    "name": "payments-sync",
    "handler": "ping",
    "schedule": {"kind": "interval", "every_seconds": 60},
    "params": {"url": "https://example.com/sync"},
}
BAD_DOMAINS = ["Payments", "-payments", "team a", "team/a", "x" * 64, "", 7]


async def create(api: Api, **fields: Any) -> dict[str, Any]:
    status, job, _ = await api.call("POST", "/v1/jobs", json={**JOB, **fields})
    assert status == 201, job
    assert isinstance(job, dict)
    return job


async def test_a_job_is_in_the_domain_it_names_or_in_default(api: Api) -> None:
    named = await create(api, domain="payments")
    unnamed = await create(api, name="cleanup")
    assert (named["domain"], unnamed["domain"]) == ("payments", "default")

    status, read, _ = await api.call("GET", f"/v1/jobs/{named['id']}", token=READ)
    assert (status, read["domain"]) == (200, "payments")
    stored = await api.store.get_job(named["id"])
    assert stored is not None and stored.domain == "payments"


async def test_a_patch_or_a_replace_moves_a_job_and_the_history_says_so(api: Api) -> None:
    job = await create(api, domain="payments")
    path = f"/v1/jobs/{job['id']}"

    status, patched, _ = await api.call("PATCH", path, json={"domain": "billing.eu"})
    assert (status, patched["domain"], patched["revision"]) == (200, "billing.eu", 2)
    _, kept, _ = await api.call("PATCH", path, json={"max_retries": 3})
    assert kept["domain"] == "billing.eu", "a patch that does not name it keeps it"
    _, history, _ = await api.call("GET", f"{path}/history")
    updates = [entry["changes"] for entry in history["items"] if entry["action"] == "update"]
    assert updates == [
        {"max_retries": {"from": 0, "to": 3}},
        {"domain": {"from": "payments", "to": "billing.eu"}},
    ]

    status, replaced, _ = await api.call("PUT", path, json={**JOB, "domain": "search"})
    assert (status, replaced["domain"]) == (200, "search")
    _, whole, _ = await api.call("PUT", path, json=JOB)
    assert whole["domain"] == "default", "a replace is the whole definition"


async def test_the_jobs_list_keeps_the_jobs_of_a_domain(api: Api) -> None:
    for name, domain in [("a.sync", "payments"), ("b.sync", "search"), ("c.export", "payments")]:
        await create(api, name=name, domain=domain)
    await create(api, name="d.sync")

    async def names(query: str) -> tuple[list[str], int]:
        status, page, _ = await api.call("GET", f"/v1/jobs?total=true&{query}", token=READ)
        assert status == 200, page
        return [job["name"] for job in page["items"]], page["total"]

    assert await names("domain=payments") == (["a.sync", "c.export"], 2)
    assert await names("domain=default") == (["d.sync"], 1)
    assert await names("domain=payments&q=sync") == (["a.sync"], 1)
    assert await names("domain=payments&sort=next_run&limit=1") == (["a.sync"], 2)
    assert await names("domain=nobody") == ([], 0)


@pytest.mark.parametrize("domain", BAD_DOMAINS)
async def test_a_create_with_a_bad_domain_is_refused_and_writes_nothing(
    api: Api, domain: object
) -> None:
    status, problem, headers = await api.call("POST", "/v1/jobs", json={**JOB, "domain": domain})
    assert status == 422, problem
    assert headers["content-type"].startswith("application/problem+json")
    assert [error["field"] for error in problem["errors"]] == ["domain"]
    assert await api.store.list_jobs(JobQuery()) == []


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
async def test_a_change_to_a_bad_domain_is_refused_and_changes_nothing(
    api: Api, method: str
) -> None:
    job = await create(api, domain="payments")
    body = {"domain": "Payments"} if method == "PATCH" else {**JOB, "domain": "Payments"}
    status, problem, _ = await api.call(method, f"/v1/jobs/{job['id']}", json=body)
    assert status == 422, problem
    assert [error["field"] for error in problem["errors"]] == ["domain"]
    stored = await api.store.get_job(job["id"])
    assert stored is not None and (stored.domain, stored.revision) == ("payments", 1)


async def test_a_list_filtered_by_a_bad_domain_is_a_bad_request(api: Api) -> None:
    status, problem, _ = await api.call("GET", "/v1/jobs?domain=Payments", token=READ)
    assert status == 400, problem
    assert [error["field"] for error in problem["errors"]] == ["query.domain"]


async def test_the_openapi_document_states_the_domain_rule(api: Api) -> None:
    _, doc, _ = await api.call("GET", "/openapi.json", token=None)
    schemas = doc["components"]["schemas"]
    domain = schemas["JobCreate"]["properties"]["domain"]
    assert (domain["pattern"], domain["default"]) == (DOMAIN_PATTERN, "default")
    assert "team or tenant" in domain["description"]
    assert "domain" in schemas["JobPatch"]["properties"]
    assert "team or tenant" in schemas["JobOut"]["properties"]["domain"]["description"]
    listing = doc["paths"]["/v1/jobs"]["get"]["parameters"]
    [parameter] = [p for p in listing if p["name"] == "domain"]
    assert parameter["in"] == "query"
