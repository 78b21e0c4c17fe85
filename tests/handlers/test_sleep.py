"""`sleep` with `fail_percent`: that share of attempts fails, the same attempt of the same run
always alike, so a run that failed may succeed on a retry."""

from __future__ import annotations

import inspect

import pytest

from tickd.handlers.sleep import attempt_fails, sleep
from tickd.scheduler.plugin.testing import handler_context

KEY = "test-job-id:2026-01-01T00:00:00Z"


async def run_attempt(attempt: int, percent: float) -> object:
    params = {"seconds": 0, "fail_percent": percent}
    async with handler_context(params=params, attempt=attempt) as ctx:
        run = sleep(ctx)
        assert inspect.isawaitable(run)
        return await run


async def test_an_attempt_fails_as_its_run_and_number_say_and_a_retry_can_succeed() -> None:
    async with handler_context() as ctx:
        key = ctx.idempotency_key
    fates = [attempt_fails(key, attempt, 50) for attempt in range(1, 21)]
    failing, succeeding = fates.index(True) + 1, fates.index(False) + 1
    with pytest.raises(RuntimeError, match=rf"^attempt {failing} failed on purpose"):
        await run_attempt(failing, 50)
    assert await run_attempt(succeeding, 50) == {"slept_seconds": 0.0}


def test_the_share_of_attempts_that_fail_is_the_percent_asked() -> None:
    failed = sum(attempt_fails(f"{KEY}:{run}", 1, 20) for run in range(10_000))
    assert 1800 < failed < 2200
    assert not any(attempt_fails(f"{KEY}:{run}", 1, 0) for run in range(1000))
    assert all(attempt_fails(f"{KEY}:{run}", 1, 100) for run in range(1000))
