"""Every operation of /openapi.json, called with a write token limited to domain A and pointed at
domain B's objects (its job, its execution and dead letter, its domain's settings): nothing of B
is read or changed.

The operations come from the document the server serves, not from a list here, so a route added
later is walked too; one that reads nothing of a domain is named in ALLOWED with the reason.
What each operation gets and what it must answer:

- a path parameter is filled from B (PATH_FILL): the answer is what an object that does not
  exist gets, the same status and body with the ids swapped (a 404; a 403 where the operation
  needs the admin scope, which a limited token never holds);
- a list or figure (a GET without path parameters) is called bare and with each filter that can
  name B (QUERY_FILL): it answers 200 and holds nothing of B;
- a write without path parameters takes the bodies of BODIES, which name B's objects: the
  answer is the one a body naming objects that do not exist gets.

Afterwards B's jobs, history, executions, dead letters, run requests, cancel requests and
settings are as they were, read with an unlimited token and from the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.api.conftest import TOKENS, Api, serving
from tests.conftest import EngineFactory
from tickd.scheduler.config.api_tokens import ApiToken
from tickd.scheduler.model import new_id

A_WRITE = "a-write-V7kq2Zx9Lm4Tn8Rw3Hc6Jp1Fs5Dy0G"
LIMITED = ApiToken(name="team-a-ci", scope="write", token=A_WRITE, domains=frozenset({"team-a"}))
B_DOMAIN, NO_DOMAIN = "team-b", "team-zz"
B_JOB_NAME = "bravo-nightly"
# Operations that read nothing of any domain, and why.
ALLOWED = {
    ("GET", "/healthz"): "a probe: the process is alive, no data",
    ("GET", "/readyz"): "a probe: the store and the dispatcher answer, no job data",
    ("GET", "/metrics"): "Prometheus figures, open to anyone as the probes are",
    ("GET", "/openapi.json"): "the document itself",
    ("GET", "/docs"): "the document's page",
    ("GET", "/v1/handlers"): "the handlers installed, the daemon's and no domain's",
    ("POST", "/v1/schedules/preview"): "computes a schedule sent in the body, reads nothing",
}
JOB_BODY: dict[str, Any] = {
    "handler": "boom",
    "schedule": {"kind": "interval", "every_seconds": 60},
}


class Fill:
    """B's objects, and objects that do not exist, to put in a request; `swap` turns an answer
    about one into the answer about the other."""

    def __init__(self, job_id: str, execution_id: str) -> None:
        self.b = {"job_id": job_id, "execution_id": execution_id, "name": B_DOMAIN}
        self.none = {"job_id": new_id(), "execution_id": new_id(), "name": NO_DOMAIN}
        self.b["address"] = self.none["address"] = "someone@example.org"

    def swap(self, text: str) -> str:
        for key, value in self.b.items():
            text = text.replace(value, self.none[key])
        return text

    def markers(self) -> list[str]:
        return [self.b["job_id"], self.b["execution_id"], B_DOMAIN, B_JOB_NAME]


# The filters a list may be asked for B with.
QUERY_FILL: dict[str, Callable[[Fill], str]] = {
    "job_id": lambda fill: fill.b["job_id"],
    "domain": lambda _: B_DOMAIN,
    "q": lambda _: B_JOB_NAME,
}


def bodies(fill: Fill, of: dict[str, str]) -> dict[tuple[str, str], list[Any]]:
    """The bodies each operation that takes one is sent, naming the objects of `of`."""
    past = {"start": "2025-01-01T00:00:00Z", "end": "2025-01-01T00:10:00Z"}
    dead_letters = [{"ids": [of["execution_id"]]}, {"job_id": of["job_id"]}]
    return {
        ("POST", "/v1/jobs"): [{**JOB_BODY, "name": "new-job", "domain": of["name"]}],
        ("PUT", "/v1/jobs/{job_id}"): [{**JOB_BODY, "name": "moved", "domain": "team-a"}],
        ("PATCH", "/v1/jobs/{job_id}"): [{"domain": "team-a", "enabled": False}],
        ("POST", "/v1/jobs/{job_id}/backfill"): [past],
        ("PUT", "/v1/domains/{name}"): [{"weight": 9}],
        ("POST", "/v1/dead-letters/redrive"): dead_letters,
        ("POST", "/v1/dead-letters/discard"): dead_letters,
    }  # fmt: skip


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine, tokens=(*TOKENS, LIMITED)) as served:
        yield served


async def failed_job(api: Api, name: str, domain: str) -> tuple[str, str]:
    """A job of `domain` whose first run failed for good: its id and its dead letter's."""
    body = {**JOB_BODY, "name": name, "domain": domain}
    status, job, _ = await api.call("POST", "/v1/jobs", json=body)
    assert status == 201, job
    api.clock.advance(60)
    await api.harness.engine.drain()
    _, runs, _ = await api.call("GET", f"/v1/jobs/{job['id']}/executions")
    [run] = runs["items"]
    assert run["dead_letter"] == "open", run
    return job["id"], run["id"]


async def b_as_stored(api: Api, job_id: str, execution_id: str) -> list[Any]:
    """Everything of B, read with the admin token and from the store."""
    reads = [
        f"/v1/jobs?domain={B_DOMAIN}",
        f"/v1/jobs/{job_id}/history",
        f"/v1/jobs/{job_id}/executions",
        f"/v1/dead-letters?job_id={job_id}&state=open",
        f"/v1/domains/{B_DOMAIN}",
    ]
    seen: list[Any] = [(await api.call("GET", path))[:2] for path in reads]
    store = api.store
    seen += [
        await store.count_pending_requests(job_id, reason=reason)
        for reason in ("trigger", "backfill", "retry", "redrive")
    ]
    execution = await store.get_execution(execution_id)
    assert execution is not None
    seen.append(await store.run_request_pending(job_id, execution.scheduled_at))
    seen.append(await store.cancel_requests([execution_id]))
    return seen


async def answer(api: Api, method: str, path: str, body: Any = None) -> tuple[int, str]:
    kwargs: dict[str, Any] = {} if body is None else {"json": body}
    async with api.client.request(
        method, path, headers={"Authorization": f"Bearer {A_WRITE}"}, **kwargs
    ) as response:
        return response.status, await response.text()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


def needs_admin(operation: dict[str, Any]) -> bool:
    return "`admin` scope" in operation.get("description", "")


async def test_a_token_of_domain_a_reads_and_changes_nothing_of_domain_b(api: Api) -> None:
    await failed_job(api, "alpha-nightly", "team-a")
    b_job, b_run = await failed_job(api, B_JOB_NAME, B_DOMAIN)
    for domain in ("team-a", B_DOMAIN):
        status, _, _ = await api.call("PUT", f"/v1/domains/{domain}", json={"weight": 2})
        assert status == 200
    fill = Fill(b_job, b_run)
    before = await b_as_stored(api, b_job, b_run)
    status, document, _ = await api.call("GET", "/openapi.json", token=None)
    assert status == 200
    walked = 0
    for method, path, operation in operations(document):
        if (method, path) in ALLOWED:
            continue
        walked += 1
        await check(api, fill, method, path, operation)
    assert walked >= 30, "the document lists the API's operations"
    assert await b_as_stored(api, b_job, b_run) == before, "nothing of B changed"

    # The token works within its own domain: the walk above is not of a token refused outright.
    _, listed, _ = await api.call("GET", "/v1/jobs", token=A_WRITE)
    assert [job["name"] for job in listed["items"]] == ["alpha-nightly"]


async def check(api: Api, fill: Fill, method: str, path: str, operation: dict[str, Any]) -> None:
    where = f"{method} {path}"
    names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
    unknown = [name for name in names if name not in fill.b]
    assert not unknown, f"{where}: say which of B's objects fills {unknown} (Fill)"
    sent = bodies(fill, fill.b).get((method, path))
    if "requestBody" in operation:
        assert sent is not None, f"{where}: give the bodies it is sent (bodies)"
    if names:
        await check_on_b(api, fill, method, path, operation, names, sent)
    elif method == "GET":
        await check_list(api, fill, path, operation)
    else:
        assert sent is not None, f"{where}: a write without path parameters needs bodies"
        none_bodies = bodies(fill, fill.none)[(method, path)]
        for of_b, of_none in zip(sent, none_bodies, strict=True):
            got = await answer(api, method, path, of_b)
            expected = await answer(api, method, path, of_none)
            assert (got[0], fill.swap(got[1])) == expected, f"{where} {of_b}"


async def check_on_b(
    api: Api,
    fill: Fill,
    method: str,
    path: str,
    operation: dict[str, Any],
    names: list[str],
    sent: list[Any] | None,
) -> None:
    """B's object answers as one that does not exist."""
    on_b = path.format(**{name: fill.b[name] for name in names})
    on_none = path.format(**{name: fill.none[name] for name in names})
    if method == "GET":
        status, _, _ = await api.call("GET", on_b)
        assert status == 200, f"{on_b}: B's object is real (the admin token reads it)"
    wanted = 403 if needs_admin(operation) else 404
    for body in sent or [None]:
        got = await answer(api, method, on_b, body)
        expected = await answer(api, method, on_none, body)
        assert got[0] == wanted, f"{method} {on_b}: {got}"
        assert (got[0], fill.swap(got[1])) == expected, f"{method} {on_b}"


async def check_list(api: Api, fill: Fill, path: str, operation: dict[str, Any]) -> None:
    """A list or figure, bare and filtered on B, holds nothing of B."""
    queries = [""] + [
        f"?{parameter['name']}={QUERY_FILL[parameter['name']](fill)}"
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "query" and parameter["name"] in QUERY_FILL
    ]
    for query in queries:
        status, text = await answer(api, "GET", path + query)
        assert status == 200, f"GET {path}{query}: {text[:200]}"
        leaked = [marker for marker in fill.markers() if marker in text]
        assert not leaked, f"GET {path}{query} shows {leaked}: {text[:300]}"
