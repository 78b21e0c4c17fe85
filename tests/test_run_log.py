"""What a handler logs through ctx.logger during a run is kept with the run's record, for its
run page: the first lines, each cut to a bounded length, the run's secrets and credentials in
text masked, on every store; the daemon's own log still has every line."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.conftest import EngineFactory
from tests.test_handler_output import run_once
from tickd.scheduler.model import Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.plugin.contexts import KEPT_LOG_CHARS, KEPT_LOG_LINES
from tickd.scheduler.secrets.masking import MASK

TOKEN = "s3cr3t-t0ken-4242"


async def test_a_runs_log_lines_are_kept_with_its_record_masked_on_every_store(
    make_engine: EngineFactory,
) -> None:
    async def talkative(ctx: HandlerContext) -> Result:
        ctx.logger.info("calling %s", "https://vendor.test/prices")
        ctx.logger.warning("vendor answered 401 for token %s", ctx.params["api_token"])
        return {"ok": True}

    run = await run_once(make_engine, talkative, params={"api_token": TOKEN})
    assert run.status is Status.SUCCESS
    assert [(line.level, line.message) for line in run.log] == [
        ("INFO", "calling https://vendor.test/prices"),
        ("WARNING", f"vendor answered 401 for token {MASK}"),
    ]
    assert all(line.at == run.log[0].at for line in run.log), "timed by the injected clock"


async def test_a_run_that_logs_without_end_keeps_its_first_lines_and_says_how_many_more(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async def flood(ctx: HandlerContext) -> Result:
        for i in range(KEPT_LOG_LINES + 10):
            ctx.logger.info("line %d %s", i, "x" * (KEPT_LOG_CHARS * 2))
        raise RuntimeError("gave up")

    caplog.set_level(logging.INFO, logger="tickd.handler")
    run = await run_once(make_engine, flood)
    assert run.status is Status.FAILED
    kept, last = run.log[:-1], run.log[-1]
    assert len(kept) == KEPT_LOG_LINES
    assert kept[0].message.startswith("line 0 x") and kept[-1].message.startswith("line 49 x")
    assert all(len(line.message) <= KEPT_LOG_CHARS for line in kept)
    assert last.message == "10 more lines not kept (the daemon's log has them)"
    assert sum("line 59 " in r.getMessage() for r in caplog.records) == 1, "all in the log"


async def test_a_run_that_logs_nothing_records_no_lines(make_engine: EngineFactory) -> None:
    async def quiet(ctx: HandlerContext) -> Result:
        return None

    run = await run_once(make_engine, quiet)
    assert (run.status, run.log) == (Status.SUCCESS, ())


async def test_a_sync_handlers_lines_from_its_thread_are_kept_across_its_attempts(
    make_engine: EngineFactory,
) -> None:
    def flaky(ctx: HandlerContext) -> Any:
        ctx.logger.info("attempt %d", ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")
        return None

    run = await run_once(make_engine, flaky, max_retries=1)
    assert (run.status, run.attempts) == (Status.SUCCESS, 2)
    assert [line.message for line in run.log] == ["attempt 1", "attempt 2"]
