"""Tokens limited to domains, endpoint by endpoint: jobs, executions and dead letters, the
overview, the domains' settings and the session. A limited token gets its domains' objects as
any token does, another domain's as a 404 identical to a missing one's, and lists and figures
without them; writing a job into a domain it does not hold is a 403 naming `domain` that
changes nothing. Unlimited and admin tokens see every domain, as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.api.conftest import ADMIN, READ, TOKENS, Api, serving
from tests.conftest import EngineFactory
from tickd.scheduler.config.api_tokens import ApiToken
from tickd.scheduler.model import new_id

A_WRITE = "a-write-V7kq2Zx9Lm4Tn8Rw3Hc6Jp1Fs5Dy0G"
A_READ = "a-read-Ux3Kd8Wq5Zm1Tr7Vn2Jh6Pc9Lf4Gs0B"
SCOPED = (
    ApiToken(name="team-a-ci", scope="write", token=A_WRITE, domains=frozenset({"team-a"})),
    ApiToken(name="team-a-view", scope="read", token=A_READ, domains=frozenset({"team-a"})),
)
FAILING: dict[str, Any] = {"handler": "boom", "schedule": {"kind": "interval", "every_seconds": 60}}


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine, tokens=(*TOKENS, *SCOPED)) as served:
        yield served


async def two_domains(api: Api) -> dict[str, dict[str, Any]]:
    """A failing job in team-a and one in team-b (created by admin), each with a dead letter."""
    jobs = {}
    for name, domain in (("alpha", "team-a"), ("bravo", "team-b")):
        status, job, _ = await api.call(
            "POST", "/v1/jobs", json={**FAILING, "name": name, "domain": domain}
        )
        assert status == 201, job
        jobs[name] = job
    api.clock.advance(60)
    await api.harness.engine.drain()
    return jobs


async def only_run(api: Api, job: dict[str, Any]) -> dict[str, Any]:
    _, page, _ = await api.call("GET", f"/v1/jobs/{job['id']}/executions")
    [run] = page["items"]
    return dict(run)


async def test_jobs_of_another_domain_are_not_listed_and_answer_404(api: Api) -> None:
    jobs = await two_domains(api)
    bravo = jobs["bravo"]["id"]
    for token in (A_READ, A_WRITE):
        _, page, _ = await api.call("GET", "/v1/jobs?total=true", token=token)
        assert [j["name"] for j in page["items"]] == ["alpha"] and page["total"] == 1
        _, page, _ = await api.call("GET", "/v1/jobs?domain=team-b&total=true", token=token)
        assert page["items"] == [] and page["total"] == 0

    missing = new_id()
    for suffix in ("", "/history", "/executions", "/preview"):
        seen = await api.call("GET", f"/v1/jobs/{bravo}{suffix}", token=A_READ)
        absent = await api.call("GET", f"/v1/jobs/{missing}{suffix}", token=A_READ)
        assert seen[0] == absent[0] == 404
        assert seen[1] == {**absent[1], "detail": absent[1]["detail"].replace(missing, bravo)}
    for method, suffix in (("DELETE", ""), ("POST", "/pause"), ("POST", "/trigger")):
        status, _, _ = await api.call(method, f"/v1/jobs/{bravo}{suffix}", token=A_WRITE)
        assert status == 404
    status, job, _ = await api.call("GET", f"/v1/jobs/{bravo}")
    assert status == 200 and job["enabled"] and job["revision"] == 1, "admin sees it unchanged"


async def test_a_job_written_into_a_domain_the_token_lacks_is_refused_naming_domain(
    api: Api,
) -> None:
    jobs = await two_domains(api)
    for body in (
        {**FAILING, "name": "sneaky", "domain": "team-b"},
        {**FAILING, "name": "sneaky"},  # in `default`, which the token does not hold either
    ):
        for query in ("", "?dry_run=true"):
            status, problem, _ = await api.call(
                "POST", f"/v1/jobs{query}", json=body, token=A_WRITE
            )
            assert status == 403, problem
            assert [e["field"] for e in problem["errors"]] == ["domain"]
    _, page, _ = await api.call("GET", "/v1/jobs?q=sneaky&total=true")
    assert page["total"] == 0, "nothing was written"

    alpha = jobs["alpha"]["id"]
    moved = await api.call("PATCH", f"/v1/jobs/{alpha}", json={"domain": "team-b"}, token=A_WRITE)
    assert moved[0] == 403 and moved[1]["errors"][0]["field"] == "domain"
    _, job, _ = await api.call("GET", f"/v1/jobs/{alpha}", token=A_READ)
    assert job["domain"] == "team-a" and job["revision"] == jobs["alpha"]["revision"]

    body = {**FAILING, "name": "alpha-2", "domain": "team-a"}
    status, created, _ = await api.call("POST", "/v1/jobs", json=body, token=A_WRITE)
    assert status == 201 and created["domain"] == "team-a"
    status, _, _ = await api.call("POST", "/v1/jobs", json=body, token=A_READ)
    assert status == 403, "a read token writes nothing, limited or not"


async def test_executions_and_dead_letters_are_kept_to_the_tokens_domains(api: Api) -> None:
    jobs = await two_domains(api)
    alpha_run, bravo_run = await only_run(api, jobs["alpha"]), await only_run(api, jobs["bravo"])
    for path in ("/v1/executions", "/v1/dead-letters", "/v1/executions?status=failed"):
        _, page, _ = await api.call("GET", path, token=A_READ)
        assert [r["job_name"] for r in page["items"]] == ["alpha"], path
        _, page, _ = await api.call("GET", path)
        assert len(page["items"]) == 2, f"{path}: admin sees both"
    _, groups, _ = await api.call("GET", "/v1/dead-letters/groups", token=A_READ)
    assert [g["job_name"] for g in groups["groups"]] == ["alpha"]
    _, page, _ = await api.call("GET", f"/v1/executions?job_id={jobs['bravo']['id']}", token=A_READ)
    assert page["items"] == []

    bravo = bravo_run["id"]
    for method, path in (
        ("GET", f"/v1/executions/{bravo}"),
        ("POST", f"/v1/executions/{bravo}/retry"),
        ("POST", f"/v1/executions/{bravo}/cancel"),
        ("POST", f"/v1/dead-letters/{bravo}/redrive"),
        ("POST", f"/v1/dead-letters/{bravo}/discard"),
    ):
        status, problem, _ = await api.call(method, path, token=A_WRITE)
        assert status == 404 and problem["detail"] == f"no execution with id {bravo!r}", path

    status, out, _ = await api.call(
        "POST", "/v1/dead-letters/redrive", json={"handler": "boom"}, token=A_WRITE
    )
    assert status == 202 and [r["job_id"] for r in out["requests"]] == [jobs["alpha"]["id"]]
    status, out, _ = await api.call(
        "POST", "/v1/dead-letters/discard", json={"ids": [bravo]}, token=A_WRITE
    )
    assert out["discarded"] == [] and [s["id"] for s in out["skipped"]] == [bravo]
    _, run, _ = await api.call("GET", f"/v1/executions/{bravo}")
    assert run["dead_letter"] == "open", "B's dead letter is untouched"
    assert alpha_run["dead_letter"] == "open"


async def test_the_overview_counts_only_the_tokens_domains(api: Api) -> None:
    await two_domains(api)
    _, mine, _ = await api.call("GET", "/v1/stats", token=A_READ)
    _, every, _ = await api.call("GET", "/v1/stats", token=READ)
    assert mine["totals"] == {"failed": 1} and every["totals"] == {"failed": 2}
    assert mine["open_dead_letters"] == 1 and every["open_dead_letters"] == 2
    assert [t["job_name"] for t in mine["attention"]["failing"]] == ["alpha"]
    assert mine["busy_workers"] is None

    _, running, _ = await api.call("GET", "/v1/running", token=A_READ)
    assert running["items"] == []


async def test_domain_settings_of_another_domain_answer_404(api: Api) -> None:
    await two_domains(api)
    for domain in ("team-a", "team-b"):
        status, _, _ = await api.call("PUT", f"/v1/domains/{domain}", json={"weight": 3})
        assert status == 200
    _, listed, _ = await api.call("GET", "/v1/domains", token=A_READ)
    assert [d["name"] for d in listed["items"]] == ["team-a"]
    for method, kwargs in (("GET", {}), ("PUT", {"json": {"weight": 9}}), ("DELETE", {})):
        status, problem, _ = await api.call(method, "/v1/domains/team-b", token=A_WRITE, **kwargs)
        assert status == 404 and problem["detail"] == "domain 'team-b' has no settings stored"
    status, domain, _ = await api.call("GET", "/v1/domains/team-b")
    assert status == 200 and domain["weight"] == 3
    status, domain, _ = await api.call(
        "PUT", "/v1/domains/team-a", json={"weight": 4}, token=A_WRITE
    )
    assert status == 200 and domain["weight"] == 4


async def test_the_session_names_the_tokens_domains(api: Api) -> None:
    _, limited, _ = await api.call("GET", "/v1/session", token=A_READ)
    assert (limited["actor"], limited["scope"], limited["domains"]) == (
        "team-a-view",
        "read",
        ["team-a"],
    )
    _, admin, _ = await api.call("GET", "/v1/session", token=ADMIN)
    assert admin["domains"] is None
