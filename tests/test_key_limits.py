"""A concurrency key's runs within its limit, on every store: the engine end to end (fake clock,
drain mode), and the admission's count (scheduler/admission/key_limits.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from tests.conftest import T0, EngineFactory, make_job
from tickd.scheduler.admission.key_limits import KeyLimits
from tickd.scheduler.model import Job, Priority
from tickd.scheduler.plugin.api import HandlerContext, Result


async def test_a_keys_runs_in_flight_never_exceed_its_limit_and_all_run_in_order(
    make_engine: EngineFactory,
) -> None:
    in_flight, most = 0, 0
    started: list[str] = []

    async def call(ctx: HandlerContext) -> Result:
        nonlocal in_flight, most
        started.append(ctx.job_name)
        in_flight += 1
        most = max(most, in_flight)
        for _ in range(20):  # the other workers start their runs meanwhile
            await asyncio.sleep(0)
        in_flight -= 1
        return None

    h = make_engine({"call": call}, workers=10, batch_size=20)
    for n in range(12):
        due = T0 - timedelta(seconds=12 - n)  # job-00 waits longest
        keyed = make_job(
            f"job-{n:02}",
            "call",
            next_run_at=due,
            concurrency_key="endpoint:x",
            concurrency_limit=3,
        )
        await h.add(keyed)
    await h.engine.drain()

    assert most == 3
    assert started == [f"job-{n:02}" for n in range(12)]


async def test_a_key_at_its_limit_holds_back_no_other_work(make_engine: EngineFactory) -> None:
    release = asyncio.Event()
    started: list[str] = []

    async def hang(ctx: HandlerContext) -> Result:
        started.append(ctx.job_name)
        await release.wait()
        return None

    async def quick(ctx: HandlerContext) -> Result:
        started.append(ctx.job_name)
        return None

    h = make_engine({"hang": hang, "quick": quick}, workers=10, batch_size=5)
    for n in range(40):  # due first, and more urgent: every read would start with them
        await h.add(
            make_job(
                f"slow-{n:02}",
                "hang",
                priority=Priority.HIGH,
                next_run_at=T0 - timedelta(seconds=5),
                concurrency_key="endpoint:slow",
                concurrency_limit=1,
                timeout_seconds=3600,
            )
        )
    for n in range(10):
        await h.add(make_job(f"quick-{n}", "quick", next_run_at=T0))
    h.engine.start()
    try:
        for _ in range(10):
            await h.engine.tick()
            for _ in range(20):
                await asyncio.sleep(0)
        assert Counter(name.split("-")[0] for name in started) == {"slow": 1, "quick": 10}
    finally:
        release.set()
    await h.engine.drain()


@dataclass
class Read:
    job: Job
    claimed: bool = False


class Leases:
    """running_by_key as a store answers it: the leases held of each key."""

    def __init__(self, **held: int) -> None:
        self.held = held
        self.asked: list[list[str]] = []

    async def running_by_key(self, keys: list[str]) -> dict[str, int]:
        self.asked.append(list(keys))
        return {key: self.held[key] for key in keys if self.held.get(key)}


def keyed(name: str, key: str = "k", limit: int = 3) -> Job:
    return make_job(name, concurrency_key=key, concurrency_limit=limit)


async def test_runs_claimed_as_read_are_not_counted_twice() -> None:
    store = Leases(k=3)  # two of them are this fetch's own claims
    limits = KeyLimits(store)  # type: ignore[arg-type]
    runs = [Read(keyed(f"j{n}"), claimed=True) for n in range(2)] + [Read(keyed("j2"), True)]
    assert [run.job.name for run in await limits.within(runs)] == ["j0", "j1", "j2"]
    store.held["k"] = 4  # two of this fetch's, two in flight before: room for one more
    kept = await limits.within([Read(keyed(f"j{n}"), claimed=True) for n in range(2)])
    assert [run.job.name for run in kept] == ["j0"]


async def test_a_full_key_is_left_out_of_the_reads_until_a_count_finds_room() -> None:
    store = Leases(k=2)
    limits = KeyLimits(store)  # type: ignore[arg-type]
    plain = Read(make_job("plain"))
    assert await limits.still_full() == []  # nothing full yet: no count
    kept = await limits.within([Read(keyed("a", limit=2)), plain])
    assert kept == [plain]
    assert await limits.still_full() == ["k"]
    store.held["k"] = 1  # a run ended
    assert await limits.still_full() == []
    # Counted at the fetch's start: its runs read then are admitted without another count.
    assert [r.job.name for r in await limits.within([Read(keyed("b", limit=2))])] == ["b"]
    assert store.asked == [["k"], ["k"], ["k"]]


async def test_no_key_read_and_none_full_costs_no_count() -> None:
    store = Leases()
    limits = KeyLimits(store)  # type: ignore[arg-type]
    runs = [Read(make_job("plain"))]
    assert await limits.within(runs) == runs
    assert store.asked == []


async def test_a_count_from_before_the_reads_is_not_lessened_by_their_claims() -> None:
    store = Leases(k=4)  # three in flight, and the one this fetch claimed
    limits = KeyLimits(store)  # type: ignore[arg-type]
    assert await limits.within([Read(keyed("a"), claimed=True)]) == []
    store.held["k"] = 0  # they ended, and the one left over went back
    assert await limits.still_full() == []
    store.held["k"] = 5  # this fetch's reads claim five
    kept = await limits.within([Read(keyed(f"j{n}"), claimed=True) for n in range(5)])
    assert [run.job.name for run in kept] == ["j0", "j1", "j2"]
