"""A job's concurrency key and limit through the API: set on a create, a replace or a patch,
removed by null, shown on every job, stated in the OpenAPI document; a key without a limit, a
limit without a key, or either out of its rule is a 422 naming the field, and changes nothing.
A job that calls a URL (webhook, http_check) and names no key gets its host's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.api.conftest import READ, Api, ping, serving
from tests.conftest import EngineFactory
from tickd.handlers.http_check import http_check
from tickd.handlers.webhook import webhook
from tickd.scheduler.keys import KEY_PATTERN, MAX_CONCURRENCY_LIMIT
from tickd.scheduler.plugin.api import Handler, HandlerContext, HandlerFunc, Result, handler

JOB: dict[str, Any] = {
    "name": "vendor-sync",
    "handler": "ping",
    "schedule": {"kind": "interval", "every_seconds": 60},
    "params": {"url": "https://example.com/sync"},
}
KEYED = {"concurrency_key": "endpoint:api.vendor.com", "concurrency_limit": 5}


async def create(api: Api, **fields: Any) -> dict[str, Any]:
    status, job, _ = await api.call("POST", "/v1/jobs", json={**JOB, **fields})
    assert status == 201, job
    assert isinstance(job, dict)
    return job


async def test_a_job_names_its_key_and_limit_and_every_answer_shows_them(api: Api) -> None:
    keyed, plain = await create(api, **KEYED), await create(api, name="plain")
    assert (keyed["concurrency_key"], keyed["concurrency_limit"]) == ("endpoint:api.vendor.com", 5)
    assert (plain["concurrency_key"], plain["concurrency_limit"]) == (None, None)
    status, read, _ = await api.call("GET", f"/v1/jobs/{keyed['id']}", token=READ)
    assert (status, read["concurrency_limit"]) == (200, 5)
    stored = await api.store.get_job(keyed["id"])
    assert stored is not None and stored.concurrency_key == "endpoint:api.vendor.com"


async def test_a_patch_changes_the_limit_and_null_removes_the_key(api: Api) -> None:
    job = await create(api, **KEYED)
    status, patched, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"concurrency_limit": 2}
    )
    assert (status, patched["concurrency_key"], patched["concurrency_limit"]) == (
        200,
        "endpoint:api.vendor.com",
        2,
    )
    status, patched, _ = await api.call(
        "PATCH",
        f"/v1/jobs/{job['id']}",
        json={"concurrency_key": None, "concurrency_limit": None},
    )
    assert (status, patched["concurrency_key"], patched["concurrency_limit"]) == (200, None, None)
    status, replaced, _ = await api.call("PUT", f"/v1/jobs/{job['id']}", json={**JOB, **KEYED})
    assert (status, replaced["concurrency_limit"]) == (200, 5)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"concurrency_key": "endpoint:x"}, "concurrency_limit"),
        ({"concurrency_limit": 3}, "concurrency_key"),
        ({"concurrency_key": "has space", "concurrency_limit": 3}, "concurrency_key"),
        ({"concurrency_key": "", "concurrency_limit": 3}, "concurrency_key"),
        ({"concurrency_key": "k", "concurrency_limit": 0}, "concurrency_limit"),
        (
            {"concurrency_key": "k", "concurrency_limit": MAX_CONCURRENCY_LIMIT + 1},
            "concurrency_limit",
        ),
        ({"concurrency_key": "k", "concurrency_limit": 3, "shards": 2}, "concurrency_key"),
    ],
)
async def test_a_bad_key_or_limit_is_refused_naming_the_field(
    api: Api, fields: dict[str, Any], field: str
) -> None:
    status, problem, _ = await api.call("POST", "/v1/jobs", json={**JOB, **fields})
    assert status == 422, problem
    assert field in {error["field"] for error in problem["errors"]}, problem
    assert await api.store.get_job_by_name(JOB["name"]) is None


async def test_a_patch_that_leaves_a_limit_without_its_key_is_refused_and_changes_nothing(
    api: Api,
) -> None:
    job = await create(api, **KEYED)
    status, problem, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"concurrency_key": None}
    )
    assert status == 422, problem
    assert "concurrency_key" in {error["field"] for error in problem["errors"]}
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.concurrency_key == "endpoint:api.vendor.com"


async def test_the_openapi_document_states_the_key_and_limit_rules(api: Api) -> None:
    _, doc, _ = await api.call("GET", "/openapi.json", token=None)
    create = doc["components"]["schemas"]["JobCreate"]["properties"]
    key = next(s for s in create["concurrency_key"]["anyOf"] if s.get("type") == "string")
    limit = next(s for s in create["concurrency_limit"]["anyOf"] if s.get("type") == "integer")
    assert key["pattern"] == KEY_PATTERN
    assert (limit["minimum"], limit["maximum"]) == (1, MAX_CONCURRENCY_LIMIT)


# -- the endpoint's key a webhook and an http_check get by default ---------------------------------

CALLS: dict[str, Handler | HandlerFunc] = {
    "webhook": webhook,
    "http_check": http_check,
    "ping": ping,
}


def hook(url: str, **fields: Any) -> dict[str, Any]:
    return {**JOB, "handler": "webhook", "params": {"url": url}, **fields}


@pytest.fixture
async def calls(make_engine: EngineFactory) -> AsyncIterator[Api]:
    """The API with the handlers that call a URL."""
    async with serving(make_engine, CALLS) as served:
        yield served


async def test_a_job_calling_a_url_without_a_key_gets_its_hosts_with_the_default_limit(
    calls: Api,
) -> None:
    made = {}
    for name, body in {
        "host": hook("https://API.Vendor.com/sync?x=1", name="host"),
        "port": hook("http://api.vendor.com:443/", name="port"),
        "usual": hook("https://api.vendor.com:443/", name="usual"),
        "check": {**hook("https://status.example.org/"), "name": "check", "handler": "http_check"},
        "own": hook("https://api.vendor.com/", name="own", **KEYED),
        "sharded": hook("https://api.vendor.com/", name="sharded", shards=2),
        "plain": {**JOB, "name": "plain"},
    }.items():
        status, job, _ = await calls.call("POST", "/v1/jobs", json=body)
        assert status == 201, job
        made[name] = (job["concurrency_key"], job["concurrency_limit"])
    assert made == {
        "host": ("endpoint:api.vendor.com", 10),
        "port": ("endpoint:api.vendor.com:443", 10),
        "usual": ("endpoint:api.vendor.com", 10),
        "check": ("endpoint:status.example.org", 10),
        "own": ("endpoint:api.vendor.com", 5),
        "sharded": (None, None),  # a sharded job cannot name a key
        "plain": (None, None),  # its handler gives none
    }


async def test_a_default_key_follows_the_url_and_a_key_set_by_hand_stays(calls: Api) -> None:
    status, job, _ = await calls.call("POST", "/v1/jobs", json=hook("https://a.example.com/"))
    assert status == 201, job
    path = f"/v1/jobs/{job['id']}"

    async def patched(**fields: Any) -> tuple[str | None, int | None]:
        status, changed, _ = await calls.call("PATCH", path, json=fields)
        assert status == 200, changed
        return changed["concurrency_key"], changed["concurrency_limit"]

    assert await patched(params={"url": "https://b.example.com/"}) == ("endpoint:b.example.com", 10)
    assert await patched(concurrency_key="team:b", concurrency_limit=2) == ("team:b", 2)
    assert await patched(params={"url": "https://c.example.com/"}) == ("team:b", 2)
    # null gives the job its handler's key again.
    assert await patched(concurrency_key=None, concurrency_limit=None) == (
        "endpoint:c.example.com",
        10,
    )
    stored = await calls.store.get_job(job["id"])
    assert stored is not None and stored.concurrency_key == "endpoint:c.example.com"


async def test_no_default_key_when_ops_set_the_default_limit_to_zero(
    make_engine: EngineFactory,
) -> None:
    async with serving(make_engine, CALLS, default_concurrency_limit=0) as api:
        status, job, _ = await api.call("POST", "/v1/jobs", json=hook("https://a.example.com/"))
    assert (status, job["concurrency_key"], job["concurrency_limit"]) == (201, None, None)


@handler(default_key=lambda params: params["host"].upper() + " key")
async def picky(ctx: HandlerContext) -> Result:
    return None


async def test_a_plug_ins_default_key_that_fails_or_is_no_key_gives_none(
    make_engine: EngineFactory,
) -> None:
    async with serving(make_engine, {"picky": picky}) as api:
        for name, params in (("no-host", {}), ("spaced", {"host": "a"})):
            body = {**JOB, "name": name, "handler": "picky", "params": params}
            status, job, _ = await api.call("POST", "/v1/jobs", json=body)
            assert (status, job["concurrency_key"]) == (201, None), job
