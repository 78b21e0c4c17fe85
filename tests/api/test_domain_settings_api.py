"""The domains' settings through the API: the list of every domain in use or with a record (its
settings, the defaults without one, and its job count, read in one count whatever the number of
domains), a domain read, stored whole and removed; a bad name or value is refused naming the
field and writes nothing; writing needs a write token."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import READ, WRITE, Api
from tests.conftest import make_job
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.domains import DOMAIN_PATTERN

DEFAULTS = {
    "weight": 1,
    "max_running": None,
    "max_jobs": None,
    "lag_objective_seconds": None,
    "updated_at": None,
}
SETTINGS = {"weight": 5, "max_running": 20, "max_jobs": 1000, "lag_objective_seconds": 2.5}
BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"weight": 0}, "weight"),
    ({"weight": 1001}, "weight"),
    ({"weight": 2.5}, "weight"),
    ({"weight": True}, "weight"),
    ({"weight": "3"}, "weight"),
    ({"max_running": 0}, "max_running"),
    ({"max_running": 100_001}, "max_running"),
    ({"max_jobs": 0}, "max_jobs"),
    ({"max_jobs": 10_000_001}, "max_jobs"),
    ({"lag_objective_seconds": 0}, "lag_objective_seconds"),
    ({"lag_objective_seconds": -1}, "lag_objective_seconds"),
    ({"lag_objective_seconds": 86_401}, "lag_objective_seconds"),
    ({"lag_objective_seconds": "1s"}, "lag_objective_seconds"),
    ({"name": "payments"}, "name"),  # the name is the path's
    ({"weigth": 2}, "weigth"),
]
BAD_NAMES = ["Payments", "-payments", "team%20a", "x" * 64, "%C3%A9quipe"]


async def add_jobs(api: Api, *domains: str) -> None:
    jobs = [make_job(f"job-{i}", "ping", domain=domain) for i, domain in enumerate(domains)]
    await api.store.insert_missing_jobs(jobs)


async def test_the_list_has_every_domain_in_use_or_with_a_record(api: Api) -> None:
    await add_jobs(api, "payments", "payments", "search", "default")
    now = api.clock.now()
    await api.store.put_domain(DomainSettings(name="payments", weight=3, updated_at=now))
    await api.store.put_domain(DomainSettings(name="reserved", max_jobs=10))

    status, page, _ = await api.call("GET", "/v1/domains", token=READ)

    assert status == 200, page
    assert [(d["name"], d["job_count"], d["has_record"]) for d in page["items"]] == [
        ("default", 1, False),
        ("payments", 2, True),
        ("reserved", 0, True),
        ("search", 1, False),
    ]
    default, payments, reserved, search = page["items"]
    assert {key: default[key] for key in DEFAULTS} == DEFAULTS
    assert {key: search[key] for key in DEFAULTS} == DEFAULTS
    assert payments["weight"] == 3 and payments["updated_at"] == now.isoformat().replace(
        "+00:00", "Z"
    )
    assert reserved["max_jobs"] == 10


async def test_the_list_counts_the_jobs_in_one_read_not_one_a_domain(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_jobs(api, *[f"team-{i}" for i in range(20)])

    async def one_a_domain(*args: Any) -> Any:
        raise AssertionError("a read for one domain")

    for method in ("count_jobs", "get_domain", "search_jobs", "list_jobs"):
        monkeypatch.setattr(api.store, method, one_a_domain)
    status, page, _ = await api.call("GET", "/v1/domains", token=READ)

    assert status == 200, page
    assert len(page["items"]) == 20
    assert {d["job_count"] for d in page["items"]} == {1}


async def test_a_domain_without_a_record_reads_as_the_defaults(api: Api) -> None:
    await add_jobs(api, "search", "search")

    status, search, _ = await api.call("GET", "/v1/domains/search", token=READ)
    assert status == 200, search
    assert search == {"name": "search", **DEFAULTS, "job_count": 2, "has_record": False}
    _, nobody, _ = await api.call("GET", "/v1/domains/nobody", token=READ)
    assert nobody == {"name": "nobody", **DEFAULTS, "job_count": 0, "has_record": False}


async def test_a_put_stores_the_whole_record_and_a_read_gives_it_back(api: Api) -> None:
    await add_jobs(api, "payments")

    status, stored, _ = await api.call("PUT", "/v1/domains/payments", json=SETTINGS, token=WRITE)
    assert status == 200, stored
    assert stored == {
        "name": "payments",
        **SETTINGS,
        "updated_at": api.clock.now().isoformat().replace("+00:00", "Z"),
        "job_count": 1,
        "has_record": True,
    }
    assert (await api.call("GET", "/v1/domains/payments", token=READ))[1] == stored

    api.clock.advance(60)
    _, replaced, _ = await api.call("PUT", "/v1/domains/payments", json={"weight": 2})
    assert {key: replaced[key] for key in SETTINGS} == {
        "weight": 2,
        "max_running": None,
        "max_jobs": None,
        "lag_objective_seconds": None,
    }, "a put is the whole record: the fields it leaves out take their defaults"
    record = await api.store.get_domain("payments")
    assert record == DomainSettings(name="payments", weight=2, updated_at=api.clock.now())


async def test_a_put_of_an_empty_body_stores_the_defaults(api: Api) -> None:
    status, stored, _ = await api.call("PUT", "/v1/domains/eu.billing_2", json={})
    assert status == 200, stored
    assert (stored["weight"], stored["max_jobs"], stored["has_record"]) == (1, None, True)
    assert [d.name for d in await api.store.list_domains()] == ["eu.billing_2"]


async def test_a_delete_removes_the_record_and_keeps_the_jobs(api: Api) -> None:
    await add_jobs(api, "payments")
    await api.call("PUT", "/v1/domains/payments", json=SETTINGS)

    status, body, _ = await api.call("DELETE", "/v1/domains/payments", token=WRITE)
    assert (status, body) == (204, None)
    _, payments, _ = await api.call("GET", "/v1/domains/payments", token=READ)
    assert payments == {"name": "payments", **DEFAULTS, "job_count": 1, "has_record": False}

    status, problem, _ = await api.call("DELETE", "/v1/domains/payments")
    assert status == 404, problem
    assert "no settings stored" in problem["detail"]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
async def test_a_bad_value_is_refused_naming_the_field_and_writes_nothing(
    api: Api, body: dict[str, Any], field: str
) -> None:
    await api.store.put_domain(DomainSettings(name="payments", weight=7))

    status, problem, headers = await api.call("PUT", "/v1/domains/payments", json=body)

    assert status == 422, problem
    assert headers["content-type"].startswith("application/problem+json")
    assert [error["field"] for error in problem["errors"]] == [field]
    assert await api.store.list_domains() == [DomainSettings(name="payments", weight=7)]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_a_bad_name_is_a_bad_request_naming_it_and_writes_nothing(
    api: Api, method: str, name: str
) -> None:
    body: dict[str, Any] = {"json": SETTINGS} if method == "PUT" else {}

    status, problem, _ = await api.call(method, f"/v1/domains/{name}", **body)

    assert status == 400, problem
    assert [error["field"] for error in problem["errors"]] == ["path.name"]
    assert "should match pattern" in problem["errors"][0]["reason"]
    assert await api.store.list_domains() == []


async def test_writing_needs_a_write_token_and_reading_a_read_one(api: Api) -> None:
    assert (await api.call("PUT", "/v1/domains/payments", json={}, token=READ))[0] == 403
    assert (await api.call("DELETE", "/v1/domains/payments", token=READ))[0] == 403
    assert (await api.call("GET", "/v1/domains", token=None))[0] == 401
    assert (await api.call("GET", "/v1/domains/payments", token=None))[0] == 401
    assert await api.store.list_domains() == []


async def test_the_openapi_document_describes_the_domains_and_their_rules(api: Api) -> None:
    _, doc, _ = await api.call("GET", "/openapi.json", token=None)

    assert set(doc["paths"]["/v1/domains/{name}"]) == {"get", "put", "delete"}
    [name] = doc["paths"]["/v1/domains/{name}"]["put"]["parameters"]
    assert (name["in"], name["schema"]["pattern"]) == ("path", DOMAIN_PATTERN)
    body = doc["components"]["schemas"]["DomainSettingsIn"]["properties"]
    assert (body["weight"]["minimum"], body["weight"]["maximum"]) == (1, 1000)
    assert "split between the instances" in body["max_running"]["description"]
    assert "fair share" in body["weight"]["description"]
    out = doc["components"]["schemas"]["DomainOut"]["properties"]
    assert all(field.get("description") for field in out.values())
    assert doc["paths"]["/v1/domains/{name}"]["put"]["description"].startswith(
        "Needs a token with the `write` scope"
    )
