"""The example handler, run the way tickd runs it, and found the way tickd finds it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tickd_example_plugin.handlers import PARAMS, compose, greet

from tickd import InvalidParams
from tickd.testing import handler_context, installed_handler, run_handler

SCHEDULED = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def test_compose() -> None:
    assert compose("Ada") == "Hello, Ada!"
    assert compose("Ada", "Good morning") == "Good morning, Ada!"


async def test_the_handler_returns_its_greeting() -> None:
    # run_handler: one run as tickd runs it (params checked against the schema, the result
    # checked as an execution records it), on throwaway backends and a fake clock.
    run = await run_handler(greet, params={"name": "Ada", "greeting": "Hi"}, scheduled_at=SCHEDULED)

    assert run.succeeded, run.error
    assert run.result == {"message": "Hi, Ada!", "scheduled_at": "2026-01-01T09:00:00+00:00"}
    assert run.logs == ["INFO greeting Ada (attempt 1)"]


async def test_params_the_schema_refuses_never_reach_the_handler() -> None:
    with pytest.raises(InvalidParams) as refused:
        await run_handler(greet, params={"name": "Ada", "greting": "Hi"})

    assert refused.value.field == "params"
    assert "'greting' was unexpected" in refused.value.reason


async def test_the_context_alone_for_a_handler_called_by_hand() -> None:
    async with handler_context(params={"name": "Ada"}, scheduled_at=SCHEDULED) as ctx:
        result = await greet(ctx)  # type: ignore[misc]  # greet is async

    assert result == {"message": "Hello, Ada!", "scheduled_at": "2026-01-01T09:00:00+00:00"}


def test_the_handler_declares_its_params() -> None:
    assert greet.params_schema is PARAMS
    assert PARAMS["required"] == ["name"]
    assert greet.max_concurrency == 5


def test_tickd_finds_the_handler_by_name() -> None:
    """Needs the plug-in installed (`pip install -e examples/tickd-example-plugin`): the
    entry point in pyproject.toml is what tickd reads."""
    registered = installed_handler("example_greeting")

    assert registered.handler is greet
    assert registered.origin.startswith("tickd-example-plugin 0.1.0")
