"""`tickd.testing`, what a plug-in's tests import: a handler run once as the daemon runs it, its
params checked as the API checks a job's and its result as an execution records it."""

from __future__ import annotations

import asyncio
import math
import threading

import pytest
from tickd_example_plugin.handlers import greet

from tickd import HandlerContext, InvalidParams, Result, handler
from tickd.scheduler.model import Status
from tickd.testing import handler_context, run_handler

PARAMS = {
    "type": "object",
    "properties": {"url": {"type": "string"}, "api_key": {"type": "string"}},
    "required": ["url"],
    "additionalProperties": False,
}


async def test_the_example_plugins_handler_runs_and_returns_its_greeting() -> None:
    run = await run_handler(greet, params={"name": "Ada", "greeting": "Hi"})

    assert run.status is Status.SUCCESS and run.succeeded
    assert run.result is not None and run.result["message"] == "Hi, Ada!"
    assert run.logs == ["INFO greeting Ada (attempt 1)"]
    assert 0 <= run.duration_seconds < 5


async def test_params_the_handlers_schema_refuses_are_refused_naming_the_param() -> None:
    with pytest.raises(InvalidParams) as missing:
        await run_handler(greet, params={})
    with pytest.raises(InvalidParams) as empty:
        await run_handler(greet, params={"name": ""})

    assert missing.value.field == "params" and "'name' is a required property" in str(missing.value)
    assert empty.value.field == "params.name"


async def test_a_result_that_is_not_json_fails_the_run_as_in_the_daemon() -> None:
    @handler()
    async def measures(ctx: HandlerContext) -> Result:
        return {"items": [1, math.nan]}

    run = await run_handler(measures)

    assert run.status is Status.FAILED and run.result is None
    assert run.error is not None and run.error.type == "BadResult"
    assert "result.items[1] is nan, which is no JSON number" in run.error.message


async def test_a_raising_handler_fails_with_its_error_and_no_secret_in_logs_or_error() -> None:
    @handler(params_schema=PARAMS)
    async def calls(ctx: HandlerContext) -> Result:
        ctx.logger.warning("calling %s with %s", ctx.params["url"], ctx.params["api_key"])
        raise RuntimeError(f"refused key {ctx.params['api_key']}")

    run = await run_handler(
        calls, params={"url": "https://example.com", "api_key": "sk-live-0123456789"}
    )

    assert run.status is Status.FAILED
    assert run.error is not None and run.error.type == "RuntimeError"
    assert "sk-live-0123456789" not in run.error.message
    assert run.logs and all("sk-live-0123456789" not in line for line in run.logs)
    assert run.logs[0].startswith("WARNING calling https://example.com with ")


async def test_a_handler_still_running_at_its_timeout_is_recorded_as_timeout() -> None:
    started = asyncio.Event()

    async def hangs(ctx: HandlerContext) -> Result:
        started.set()
        await asyncio.Event().wait()
        return None

    run = await run_handler(hangs, timeout_seconds=0.05)

    assert started.is_set()
    assert run.status is Status.TIMEOUT and run.error is not None
    assert run.error.type == "Timeout"


async def test_a_plain_function_runs_too_and_the_context_alone_is_still_there() -> None:
    def sync_handler(ctx: HandlerContext) -> Result:
        return {"attempt": ctx.attempt}

    run = await run_handler(sync_handler, attempt=3)
    async with handler_context(params={"name": "Ada"}) as ctx:
        called = await greet(ctx)  # type: ignore[misc]

    assert run.result == {"attempt": 3}
    assert called is not None and called["message"] == "Hello, Ada!"


async def test_a_plain_function_past_its_timeout_is_left_to_finish_on_its_own() -> None:
    release = threading.Event()

    def blocks(ctx: HandlerContext) -> Result:
        release.wait(timeout=30)
        return {"done": True}

    try:
        run = await run_handler(blocks, timeout_seconds=0.05)
        still_running = [t for t in threading.enumerate() if t.name == "tickd-handler-blocks"]
    finally:
        release.set()

    assert run.status is Status.TIMEOUT
    # A daemon thread: the process (`tickd handlers run`) exits without waiting for it.
    assert [thread.daemon for thread in still_running] == [True]
