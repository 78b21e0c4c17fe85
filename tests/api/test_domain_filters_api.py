"""`domain` on every list and figure of runs (executions, dead letters and their groups, the
bulk actions, runs in flight, the overview), as on the jobs list: only what the jobs of that
domain ran. Under a token limited to other domains it matches nothing, as for a domain without
jobs; a name that breaks the domains' rule is a 400 naming `query.domain`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.api.conftest import TOKENS, Api, serving
from tests.api.test_scoped_tokens_api import A_READ, SCOPED, two_domains
from tests.conftest import EngineFactory


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine, tokens=(*TOKENS, *SCOPED)) as served:
        yield served


# A list's path -> the names of the jobs its items are of.
LISTS = {
    "/v1/executions": lambda page: {item["job_name"] for item in page["items"]},
    "/v1/dead-letters": lambda page: {item["job_name"] for item in page["items"]},
    "/v1/dead-letters/groups": lambda page: {group["job_name"] for group in page["groups"]},
}


async def listed(api: Api, path: str, query: str, token: str | None = None) -> set[str]:
    args = {"token": token} if token else {}
    status, page, _ = await api.call("GET", f"{path}?{query}", **args)
    assert status == 200, page
    names: set[str] = LISTS[path](page)
    return names


async def test_each_list_of_runs_keeps_the_domain_it_names(api: Api) -> None:
    await two_domains(api)  # alpha in team-a, bravo in team-b, each with a dead letter
    for path in LISTS:
        assert await listed(api, path, "") == {"alpha", "bravo"}, path
        assert await listed(api, path, "domain=team-b") == {"bravo"}, path
        assert await listed(api, path, "domain=team-c") == set(), path
        # A token limited to team-a names team-b: nothing, as for a domain it cannot see.
        assert await listed(api, path, "domain=team-b", token=A_READ) == set(), path
        assert await listed(api, path, "domain=team-a", token=A_READ) == {"alpha"}, path


async def test_the_overview_and_the_runs_in_flight_keep_the_domain_too(api: Api) -> None:
    await two_domains(api)
    status, whole, _ = await api.call("GET", "/v1/stats")
    assert status == 200 and whole["totals"].get("failed") == 2, whole
    status, one, _ = await api.call("GET", "/v1/stats?domain=team-a")
    assert status == 200 and one["totals"].get("failed") == 1 and one["open_dead_letters"] == 1
    assert one["busy_workers"] is None  # the workers are every domain's
    status, running, _ = await api.call("GET", "/v1/running?domain=team-a")
    assert (status, running["items"]) == (200, [])


async def test_a_bulk_action_by_filter_acts_on_the_domain_it_names_only(api: Api) -> None:
    jobs = await two_domains(api)
    body: dict[str, Any] = {"domain": "team-b", "limit": 10}
    status, done, _ = await api.call("POST", "/v1/dead-letters/discard", json=body)
    assert status == 200, done
    assert await listed(api, "/v1/dead-letters", "") == {"alpha"}
    # By ids, one of another domain than the one named is left alone.
    _, page, _ = await api.call("GET", "/v1/dead-letters")
    [alpha] = page["items"]
    assert alpha["job_id"] == jobs["alpha"]["id"]
    body = {"ids": [alpha["id"]], "domain": "team-b"}
    status, done, _ = await api.call("POST", "/v1/dead-letters/discard", json=body)
    assert status == 200, done
    assert await listed(api, "/v1/dead-letters", "") == {"alpha"}


async def test_a_domain_breaking_the_rule_is_refused_naming_the_parameter(api: Api) -> None:
    for path in (*LISTS, "/v1/running", "/v1/stats"):
        status, problem, _ = await api.call("GET", f"{path}?domain=Not%20A%20Domain")
        assert status == 400, (path, problem)
        assert [e["field"] for e in problem["errors"]] == ["query.domain"], problem
