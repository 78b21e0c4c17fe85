"""Who may drive the API: a web page the operator opens must not, with or without tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import WRITE, Api
from tickd.scheduler.ports.backends import JobQuery

JOB: dict[str, Any] = {
    "name": "nightly",
    "handler": "sleep",
    "schedule": {"kind": "interval", "every_seconds": 60},
}
# What an HTML form or a no-cors fetch can send without a CORS preflight.
SIMPLE_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
]


async def created(api: Api, token: str | None = None) -> dict[str, Any]:
    status, job, _ = await api.call("POST", "/v1/jobs", json=JOB, token=token)
    assert status == 201, job
    assert isinstance(job, dict)
    return job


@pytest.mark.parametrize("content_type", SIMPLE_TYPES)
async def test_a_form_post_creates_nothing_without_tokens(open_api: Api, content_type: str) -> None:
    status, body, headers = await open_api.call(
        "POST",
        "/v1/jobs",
        token=None,
        data=json.dumps(JOB),
        headers={"Content-Type": content_type},
    )
    assert status == 415, body
    assert headers["content-type"].startswith("application/problem+json")
    assert body["errors"] == [{"field": "Content-Type", "reason": "must be application/json"}]
    assert await open_api.store.list_jobs(JobQuery()) == []


@pytest.mark.parametrize("content_type", [None, *SIMPLE_TYPES])
async def test_a_body_must_be_declared_json_with_tokens_too(
    api: Api, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    status, body, _ = await api.call(
        "POST", "/v1/jobs", token=WRITE, data=json.dumps(JOB).encode(), headers=headers
    )
    assert status == 415, body
    assert await api.store.list_jobs(JobQuery()) == []


@pytest.mark.parametrize(
    ("method", "suffix"), [("POST", "/pause"), ("POST", "/trigger"), ("DELETE", "")]
)
async def test_a_bodiless_write_with_a_form_content_type_is_refused(
    open_api: Api, method: str, suffix: str
) -> None:
    job = await created(open_api, None)
    status, body, _ = await open_api.call(
        method,
        f"/v1/jobs/{job['id']}{suffix}",
        token=None,
        data=b"",
        headers={"Content-Type": "text/plain"},
    )
    assert status == 415, body
    stored = await open_api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 1 and stored.enabled
    assert not await open_api.store.run_request_pending(job["id"], open_api.clock.now())


async def test_bodiless_writes_need_no_content_type(open_api: Api) -> None:
    job = await created(open_api, None)
    status, paused, _ = await open_api.call("POST", f"/v1/jobs/{job['id']}/pause", token=None)
    assert status == 200 and paused["enabled"] is False
    json_typed = {"Content-Type": "application/json; charset=utf-8"}
    status, _, _ = await open_api.call(
        "POST", f"/v1/jobs/{job['id']}/resume", token=None, headers=json_typed
    )
    assert status == 200


REBOUND = [
    "evil.example",
    "evil.example:8080",
    "127.0.0.1.evil.example",
    "localhost.evil",
    "10.0.0.1",
]


@pytest.mark.parametrize("host", REBOUND)
async def test_without_tokens_a_foreign_host_is_refused(open_api: Api, host: str) -> None:
    job = await created(open_api, None)
    for method, path in [("GET", "/v1/jobs"), ("GET", f"/v1/jobs/{job['id']}"), ("DELETE", "")]:
        target = path or f"/v1/jobs/{job['id']}"
        status, body, _ = await open_api.call(method, target, token=None, headers={"Host": host})
        assert status == 421, (method, target, body)
        assert [e["field"] for e in body["errors"]] == ["Host"]
        assert "items" not in body and "name" not in body
    assert await open_api.store.get_job(job["id"]) is not None


@pytest.mark.parametrize(
    "host",
    ["localhost", "LOCALHOST:8080", "127.0.0.1", "127.4.5.6:9", "[::1]", "[::1]:8080"],
)
async def test_without_tokens_loopback_names_are_served(open_api: Api, host: str) -> None:
    status, body, _ = await open_api.call("GET", "/v1/jobs", token=None, headers={"Host": host})
    assert status == 200, body


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_probes_answer_local_scrapers_whatever_the_host(open_api: Api, path: str) -> None:
    for host in ("127.0.0.1:8080", "tickd:8080"):
        async with open_api.client.get(path, headers={"Host": host}) as response:
            assert response.status == 200, await response.text()


async def test_with_tokens_the_token_is_the_protection_not_the_host(api: Api) -> None:
    status, body, _ = await api.call("GET", "/v1/jobs", headers={"Host": "tickd.internal:8080"})
    assert status == 200, body
    status, _, _ = await api.call(
        "GET", "/v1/jobs", token=None, headers={"Host": "tickd.internal:8080"}
    )
    assert status == 401


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "http://localhost:1", "http://evil.example:80"]
)
async def test_without_tokens_a_write_from_another_origin_is_refused(
    open_api: Api, origin: str
) -> None:
    job = await created(open_api, None)
    port = open_api.client.port
    headers = {"Origin": origin, "Host": f"localhost:{port}"}
    for method, suffix, body in [
        ("POST", "/pause", None),
        ("PATCH", "", {"max_retries": 5}),
        ("DELETE", "", None),
    ]:
        status, problem, _ = await open_api.call(
            method, f"/v1/jobs/{job['id']}{suffix}", token=None, headers=headers, json=body
        )
        assert status == 403, (method, problem)
        assert [e["field"] for e in problem["errors"]] == ["Origin"]
    status, _, _ = await open_api.call("POST", "/v1/jobs", token=None, headers=headers, json=JOB)
    assert status == 403
    stored = await open_api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 1
    assert len(await open_api.store.list_jobs(JobQuery())) == 1


async def test_without_tokens_a_write_from_the_same_origin_is_served(open_api: Api) -> None:
    port = open_api.client.port
    for i, (host, origin) in enumerate(
        [
            (f"localhost:{port}", f"http://localhost:{port}"),
            (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
            (f"[::1]:{port}", f"http://[::1]:{port}"),
        ]
    ):
        headers = {"Origin": origin, "Host": host}
        status, body, _ = await open_api.call(
            "POST", "/v1/jobs", token=None, headers=headers, json={**JOB, "name": f"j{i}"}
        )
        assert status == 201, (host, body)


async def test_the_document_lists_the_edge_refusals(api: Api) -> None:
    _, doc, _ = await api.call("GET", "/openapi.json", token=None)
    create_op = doc["paths"]["/v1/jobs"]["post"]["responses"]
    assert {"403", "415", "421"} <= set(create_op)
    assert "412" in doc["paths"]["/v1/jobs/{job_id}"]["delete"]["responses"]
    assert "421" not in doc["paths"]["/healthz"]["get"]["responses"]
