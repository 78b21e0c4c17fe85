"""The route table: each handler gets the query and body its Call declares, or the route is
refused where it is declared (mypy cannot see a model left out)."""

from __future__ import annotations

import pytest

from tickd.api.models import JobCreate, JobListQuery
from tickd.api.routing import Call, Reply, Route


async def list_things(call: Call[JobListQuery, None]) -> Reply:
    return Reply(None)


async def create_thing(call: Call[None, JobCreate]) -> Reply:
    return Reply(None)


def test_a_route_that_leaves_out_the_query_its_handler_reads_is_refused() -> None:
    with pytest.raises(TypeError, match=r"list_things takes Call\[JobListQuery, None\]"):
        Route("GET", "/v1/things", list_things, "List things", "read", None)


def test_a_route_that_leaves_out_the_body_its_handler_reads_is_refused() -> None:
    with pytest.raises(TypeError, match="route declares query=None, body=None"):
        Route("POST", "/v1/things", create_thing, "Create a thing", "write", None, 201)


def test_a_route_that_declares_its_handlers_models_is_taken() -> None:
    route = Route("GET", "/v1/things", list_things, "List", "read", None, query=JobListQuery)
    assert (route.query, route.body) == (JobListQuery, None)
