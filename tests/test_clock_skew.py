"""Clocks apart across instances: one instance's wall clock stepped an hour forward (NTP, a
restored VM) or ten minutes ahead from the start, while another runs a long handler. Instances
judge each other by whether their beats change, on their own monotonic time, and reap by their
own clock only their own leases: no occurrence runs twice, no live instance's run is abandoned,
and a real crash is still taken over within about the heartbeat timeout of real time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from tests.conftest import T0, EngineFactory, Harness, make_job
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.model import Execution, IntervalSchedule, Job, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import OCCURRENCE_OWNER, ExecutionQuery
from tickd.scheduler.ports.clock import FakeClock

WAIT = 5.0
HOUR = 3600.0
LAPSE, EVERY = 10.0, 3.0  # the heartbeat's defaults (Settings)
STEP = 1.0  # real seconds a round: the tick interval
# A crash is seen once the dead instance's beat has stood still for a lapse; its last beat may be
# a beat interval old when it dies, and seen a beat interval late; a round more to reap and claim.
TAKEOVER_BOUND = LAPSE + 2 * EVERY + 2 * STEP

APART = pytest.mark.parametrize(
    ("offset", "jump"),
    [(0.0, HOUR), (600.0, 0.0)],
    ids=["observer-jumps-an-hour-forward", "observer-ten-minutes-ahead"],
)


class OffsetClock(FakeClock):
    """Another instance's wall clock: the shared fake clock's, `offset` seconds apart and
    stepped on its own by `jump`. Real (monotonic) time passes for both alike."""

    def __init__(self, shared: FakeClock, offset: float) -> None:
        super().__init__()
        self._shared = shared
        self._offset = timedelta(seconds=offset)

    def now(self) -> datetime:
        return self._shared.now() + self._offset

    def monotonic(self) -> float:
        return self._shared.monotonic()

    def advance(self, seconds: float) -> datetime:
        self._shared.advance(seconds)
        return self.now()

    def jump(self, seconds: float) -> datetime:
        self._offset += timedelta(seconds=seconds)
        return self.now()

    def set(self, when: datetime) -> None:
        self._offset = when - self._shared.now()

    async def sleep(self, seconds: float) -> None:
        await self._shared.sleep(seconds)


@dataclass
class Runs:
    """The long handler of both instances: who started which occurrence; each run waits for
    the gate (the runner's, a dead process's, for ever)."""

    started: list[tuple[str, datetime]] = field(default_factory=list)  # (instance, occurrence)
    first_started: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    def handler(self, instance: str) -> Callable[[HandlerContext], Awaitable[Result]]:
        async def long(ctx: HandlerContext) -> Result:
            self.started.append((instance, ctx.scheduled_at))
            self.first_started.set()
            await self.gate.wait()
            return None

        return long


@dataclass
class TwoInstances:
    """`runner` on the shared clock runs the long handler first; `observer` on a clock of its
    own. One store, one lock service."""

    runner: Harness
    observer: Harness
    clock: FakeClock
    runs: Runs

    async def rounds(
        self,
        instances: Sequence[Harness],
        seconds: float,
        until: Callable[[], Awaitable[bool]] | None = None,
    ) -> float:
        """What each daemon's loop does (Engine.run), a round a tick interval of real time:
        tick, and beat when due. Returns the real time it took (until `until` held)."""
        began = self.clock.monotonic()
        while self.clock.monotonic() - began < seconds:
            self.clock.advance(STEP)
            for h in instances:
                await h.engine.tick()
                await h.engine.heartbeat.beat_if_due()
            if until is not None and await until():
                break
        return self.clock.monotonic() - began

    async def start_the_long_run(self, *, max_retries: int = 0) -> Job:
        job = await self.runner.add(
            make_job(
                "long",
                "long",
                timeout_seconds=600,
                schedule=IntervalSchedule(every_seconds=HOUR),
                max_retries=max_retries,
            )
        )
        for h in (self.runner, self.observer):
            h.engine.start()
            await h.engine.heartbeat.beat_if_due()
        assert (await self.runner.engine.tick()).claimed == 1
        await asyncio.wait_for(self.runs.first_started.wait(), WAIT)
        return job

    async def all_executions(self) -> list[Execution]:
        return list(reversed(await self.runner.store.list_executions(ExecutionQuery(limit=1000))))

    async def executions_at(self, scheduled_at: datetime) -> list[Execution]:
        return [e for e in await self.all_executions() if e.scheduled_at == scheduled_at]


@pytest.fixture
def two_instances(make_engine: EngineFactory, clock: FakeClock) -> Callable[[float], TwoInstances]:
    def build(offset: float) -> TwoInstances:
        lock = MemoryLock(monotonic=clock.monotonic)
        runs = Runs()
        runner = make_engine({"long": runs.handler("runner")}, instance_id="runner", lock=lock)
        observer = make_engine(
            {"long": runs.handler("observer")},
            instance_id="observer",
            lock=lock,
            own_clock=OffsetClock(clock, offset),
        )
        return TwoInstances(runner, observer, clock, runs)

    return build


@APART
async def test_a_clock_apart_on_one_instance_neither_abandons_nor_reruns_anothers_run(
    two_instances: Callable[[float], TwoInstances], offset: float, jump: float
) -> None:
    pair = two_instances(offset)
    await pair.start_the_long_run()
    pair.observer.clock.jump(jump)
    await pair.rounds([pair.runner, pair.observer], 120)  # two minutes of the long run

    [run] = await pair.executions_at(T0)
    assert (run.status, run.owner) == (Status.RUNNING, "runner"), "not abandoned, run once"
    assert pair.observer.engine.metrics.leases_reaped._value.get() == 0

    pair.runs.gate.set()
    await asyncio.wait_for(pair.runner.engine.settled(), WAIT)
    [run] = await pair.executions_at(T0)
    assert (run.status, run.owner, run.token) == (Status.SUCCESS, "runner", 1)


@APART
async def test_a_crash_is_taken_over_by_an_instance_whose_clock_is_apart_within_the_timeout(
    two_instances: Callable[[float], TwoInstances], offset: float, jump: float
) -> None:
    pair = two_instances(offset)
    await pair.start_the_long_run(max_retries=1)  # a retry left: abandoned, it runs again
    pair.observer.clock.jump(jump)
    await pair.rounds([pair.runner, pair.observer], 30)
    alive = [(e.owner, e.status) for e in await pair.executions_at(T0)]
    assert alive == [("runner", Status.RUNNING)], "alive: left alone"

    # The runner dies: it beats and ticks no more; its handler hangs as a dead process's would.
    async def run_again() -> bool:
        return len(await pair.executions_at(T0)) == 2

    took = await pair.rounds([pair.observer], 60, until=run_again)

    assert took <= TAKEOVER_BOUND, f"taken over {took} s after the crash"
    first, second = await pair.executions_at(T0)
    assert (first.status, first.owner) == (Status.ABANDONED, "runner")
    assert (second.owner, second.token) == ("observer", 2)
    pair.runs.gate.set()
    await asyncio.wait_for(pair.observer.engine.settled(), WAIT)
    assert pair.runs.started == [("runner", T0), ("observer", T0)]


async def test_a_clock_stepped_back_on_the_survivor_does_not_put_off_the_takeover(
    two_instances: Callable[[float], TwoInstances],
) -> None:
    """The crashed instance's run is given back within the timeout of real time, not an hour
    later; its occurrence then runs when the survivor's wall clock reaches it again, as every
    run there does."""
    pair = two_instances(0.0)
    job = await pair.start_the_long_run()
    # The runner dies now, and the survivor's wall clock steps an hour back.
    pair.observer.clock.jump(-HOUR)

    async def given_back() -> bool:
        stored = await pair.observer.store.get_job(job.id)
        return stored is not None and stored.lease is None

    took = await pair.rounds([pair.observer], 60, until=given_back)

    assert took <= TAKEOVER_BOUND, f"given back {took} s after the crash"
    [run] = await pair.executions_at(T0)
    assert (run.status, run.owner) == (Status.ABANDONED, "runner")
    pair.runs.gate.set()


async def test_a_sharded_occurrence_is_not_run_again_by_an_instance_whose_clock_jumped(
    two_instances: Callable[[float], TwoInstances],
) -> None:
    """The occurrence's lease is no instance's: to a clock an hour ahead it looks expired, but
    it lives while its shards run on the other instance."""
    pair = two_instances(0.0)
    job = await pair.runner.add(
        make_job(
            "long",
            "long",
            timeout_seconds=600,
            shards=2,
            schedule=IntervalSchedule(every_seconds=HOUR),
        )
    )
    for h in (pair.runner, pair.observer):
        h.engine.start()
        await h.engine.heartbeat.beat_if_due()
    for _ in range(2):  # the occurrence, then its shards
        await pair.runner.engine.tick()
    await asyncio.wait_for(pair.runs.first_started.wait(), WAIT)
    pair.observer.clock.jump(HOUR)
    await pair.rounds([pair.runner, pair.observer], 120)

    held = await pair.runner.store.get_job(job.id)
    assert held is not None and held.lease is not None
    assert (held.lease.owner, held.lease.token) == (OCCURRENCE_OWNER, 1), "still the occurrence's"
    runs = sorted((e.shard, e.owner, e.status) for e in await pair.all_executions())
    assert runs == [(0, "runner", Status.RUNNING), (1, "runner", Status.RUNNING)], "no other"

    pair.runs.gate.set()
    await asyncio.wait_for(pair.runner.engine.settled(), WAIT)
    runs = sorted((e.shard, e.owner, e.status) for e in await pair.all_executions())
    assert runs == [(0, "runner", Status.SUCCESS), (1, "runner", Status.SUCCESS)]
    ended = await pair.runner.store.get_job(job.id)
    assert ended is not None and ended.lease is None, "its shards ended the occurrence"
    assert ended.next_run_at is not None and ended.next_run_at > T0, "and moved the schedule on"
