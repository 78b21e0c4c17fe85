"""The runs list across jobs, as the dashboard's Runs page asks for it: a time range of
scheduled times that is empty by its own bounds is refused, naming the bound at fault."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api


@pytest.mark.parametrize(
    "path",
    [
        "/v1/executions?since=2026-12-07T10:00:00Z&until=2026-12-07T09:00:00Z",
        "/v1/executions?since=2026-12-07T10:00:00Z&until=2026-12-07T10:00:00Z",
        "/v1/jobs/any/executions?since=2026-12-07T10:00:00Z&until=2026-12-07T09:00:00Z",
    ],
)
async def test_a_range_that_ends_before_it_starts_is_refused_naming_until(
    api: Api, path: str
) -> None:
    status, body, _ = await api.call("GET", path)
    assert status == 400, body
    assert [e["field"] for e in body["errors"]] == ["query.until"]
    assert "after since" in body["detail"]


async def test_the_api_description_says_what_since_and_until_bound(api: Api) -> None:
    _, doc, _ = await api.call("GET", "/openapi.json")
    listed = doc["paths"]["/v1/executions"]["get"]["parameters"]
    described = {p["name"]: p.get("description", "") for p in listed}
    assert "scheduled at or after" in described["since"]
    assert "must be after since" in described["until"]
