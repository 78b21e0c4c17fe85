"""The loop-stall watchdog: a handler blocking the event loop inside an `async def` is noticed,
counted and named."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tests.conftest import EngineFactory, make_job
from tickd.scheduler.maintenance.watchdog import LoopWatchdog
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.plugin.api import HandlerContext, Result

# Bounds every wait on a real event in these tests.
WAIT = 5.0


def stalls(metrics: Metrics) -> tuple[float | None, float | None]:
    sample = metrics.registry.get_sample_value
    return sample("tickd_loop_stalls_total"), sample("tickd_loop_stall_seconds_sum")


async def test_a_wake_up_later_than_the_threshold_is_a_stall_naming_the_running_jobs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    running = ["still-running"]
    watchdog = LoopWatchdog(threshold_seconds=0.5, metrics=metrics, running_jobs=lambda: running)
    with caplog.at_level(logging.WARNING, logger="tickd.watchdog"):
        assert not watchdog.woke(100.0, 100.499, ["ended-since"]), "under the threshold"
        assert stalls(metrics) == (0, 0)
        assert watchdog.woke(100.0, 102.0, ["ended-since"])
    assert stalls(metrics) == (1, 2.0)
    [line] = caplog.records
    fields = line.tickd_fields  # type: ignore[attr-defined]
    assert line.getMessage() == "loop.stalled" and fields["stalled_seconds"] == 2.0
    assert fields["running_jobs"] == ["ended-since", "still-running"]


async def test_a_handler_blocking_the_loop_is_noticed_and_named(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async def blocks(ctx: HandlerContext) -> Result:
        time.sleep(0.3)  # noqa: ASYNC251 - the misbehaviour under test
        return None

    h = make_engine({"blocks": blocks}, loop_stall_threshold_seconds=0.15)
    await h.add(make_job("the-blocker", "blocks"))
    stop = asyncio.Event()
    watching = asyncio.create_task(h.engine.watchdog.run(stop))
    try:
        with caplog.at_level(logging.WARNING, logger="tickd.watchdog"):
            await asyncio.wait_for(h.engine.drain(), WAIT)
            await asyncio.wait_for(h.engine.watchdog.noticed.wait(), WAIT)
    finally:
        stop.set()
        await asyncio.wait_for(watching, WAIT)
    count, seconds = stalls(h.engine.metrics)
    assert count is not None and count >= 1 and seconds is not None and seconds >= 0.15
    named = [r.tickd_fields["running_jobs"] for r in caplog.records]  # type: ignore[attr-defined]
    assert any("the-blocker" in jobs for jobs in named), named
