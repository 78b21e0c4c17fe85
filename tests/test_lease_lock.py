"""Which stores' runs need the lock service: where the store's claim is atomic (it locks the row
while it compares and sets), the lease is the lock and an outage of the lock service stops no run;
elsewhere, no run starts without it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tests.conftest import T0, EngineFactory, make_job
from tickd.scheduler.model import IntervalSchedule
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import ExecutionQuery, LockUnavailable


class LockServiceDown:
    """A lock service that cannot be reached: every call raises, as Redis's client does."""

    def __init__(self) -> None:
        self.calls = 0

    def _down(self) -> LockUnavailable:
        self.calls += 1
        return LockUnavailable("connection refused")

    async def acquire_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        raise self._down()

    async def extend(self, key: str, token: str, ttl_seconds: float) -> bool:
        raise self._down()

    async def extend_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        raise self._down()

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        raise self._down()

    async def break_many(self, keys: Sequence[str]) -> None:
        raise self._down()

    async def ping(self) -> None:
        raise self._down()

    async def close(self) -> None:
        return None


async def noop(ctx: HandlerContext) -> Result:
    return {}


async def test_a_run_needs_the_lock_service_only_where_the_claim_is_not_the_lock(
    make_engine: EngineFactory,
) -> None:
    lock = LockServiceDown()
    h = make_engine({"noop": noop}, lock=lock)
    job = await h.add(make_job(schedule=IntervalSchedule(every_seconds=60), next_run_at=T0))

    if h.store.claim_is_the_lock:
        await h.engine.drain()
        assert lock.calls == 0
    else:
        with pytest.raises(LockUnavailable):
            await h.engine.drain()
        assert lock.calls > 0

    runs = await h.store.list_executions(ExecutionQuery(job_id=job.id, limit=10))
    assert len(runs) == (1 if h.store.claim_is_the_lock else 0)
