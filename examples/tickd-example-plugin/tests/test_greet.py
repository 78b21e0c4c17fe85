"""The example handler, called the way tickd calls it, and found the way tickd finds it."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime

from tickd_example_plugin.handlers import PARAMS, compose, greet

from tickd import HandlerContext, Result
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.plugin.testing import handler_context

SCHEDULED = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def test_compose() -> None:
    assert compose("Ada") == "Hello, Ada!"
    assert compose("Ada", "Good morning") == "Good morning, Ada!"


async def run(ctx: HandlerContext) -> Result:
    """Calls the handler as tickd does: a plain function's result as is, an async one's
    awaited."""
    outcome = greet(ctx)
    return await outcome if inspect.isawaitable(outcome) else outcome


async def test_the_handler_returns_its_greeting() -> None:
    # handler_context: what tickd hands a handler, on throwaway backends and a fake clock.
    async with handler_context(
        params={"name": "Ada", "greeting": "Hi"}, scheduled_at=SCHEDULED
    ) as ctx:
        result = await run(ctx)
    assert result == {"message": "Hi, Ada!", "scheduled_at": "2026-01-01T09:00:00+00:00"}


def test_the_handler_declares_its_params() -> None:
    assert greet.params_schema is PARAMS
    assert PARAMS["required"] == ["name"]
    assert greet.max_concurrency == 5


def test_tickd_finds_the_handler_by_name() -> None:
    """Needs the plug-in installed (`pip install -e examples/tickd-example-plugin`): the
    entry point in pyproject.toml is what tickd reads."""
    registry = HandlerRegistry()
    registry.load_entry_points()
    registered = registry.get("example_greeting")
    assert registered is not None
    assert registered.handler is greet
    assert registered.origin.startswith("tickd-example-plugin 0.1.0")
