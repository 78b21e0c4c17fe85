"""What a busy dispatcher asks the store: a burst's ticks run back to back, one batch after
another, and the rare work (expired leases) is looked for once a tick interval, not per batch.
Counted with the injected clock, never timed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from scheduler.model import Execution
from scheduler.ports import Store
from tests.conftest import EngineFactory, make_job
from tests.test_engine import executions, noop


def count_reaps(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """The times the store was asked for expired leases."""
    asked: list[datetime] = []
    reap = store.reap_expired_leases

    async def counted(now: datetime, **kwargs: Any) -> list[Execution]:
        asked.append(now)
        return await reap(now, **kwargs)

    monkeypatch.setattr(store, "reap_expired_leases", counted)
    return asked


async def test_a_busy_dispatcher_looks_for_expired_leases_once_a_tick_interval(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = make_engine({"noop": noop}, batch_size=2, tick_seconds=1)
    for i in range(10):
        await h.add(make_job(f"job-{i}"))
    asked = count_reaps(store, monkeypatch)

    await h.engine.drain()  # five full batches, back to back, in the same instant
    assert len(await executions(store)) == 10
    assert asked == [h.clock.now()]

    h.clock.advance(0.5)
    await h.engine.tick()
    assert len(asked) == 1
    h.clock.advance(0.5)
    await h.engine.tick()
    assert asked[1:] == [h.clock.now()]
