"""The worker pool's queue: bounded for the dispatcher's batches (a full queue holds the
dispatcher back), not for runs fired at their time, which are queued at once."""

from __future__ import annotations

import asyncio

from tests.conftest import T0, make_job
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports.clock import FakeClock
from tickd.scheduler.run.execute import Executor
from tickd.scheduler.run.ledger import Ledger, Task
from tickd.scheduler.run.pool import WorkerPool
from tickd.scheduler.schedule.planning import Plan

WAIT = 5.0


class GatedExecutor:
    """Runs nothing until the gate opens: what the pool does around its runs is what is seen."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.ran: list[str] = []

    async def run(self, task: Task) -> None:
        await self.gate.wait()
        self.ran.append(task.job.name)


def task(name: str, *, fired: bool = False) -> Task:
    job = make_job(name)
    execution = Execution(
        job_id=job.id,
        job_name=name,
        handler=job.handler,
        scheduled_at=T0,
        status=Status.RUNNING,
        started_at=T0,
    )
    plan = Plan(run_at=T0, advance_from=T0)
    return Task(job=job, execution=execution, plan=plan, lock_token="t", claimed_at=T0, fired=fired)


def pool_of(runner: GatedExecutor, ledger: Ledger, *, workers: int, queue_size: int) -> WorkerPool:
    fake: Executor = runner  # type: ignore[assignment]  # the pool calls only its run()
    pool = WorkerPool(
        executor=fake,
        ledger=ledger,
        workers=workers,
        queue_size=queue_size,
        metrics=Metrics(),
        clock=FakeClock(),
    )
    pool.start()
    return pool


async def _turns(count: int = 10) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_full_queue_holds_the_dispatcher_back_until_a_worker_takes_a_run() -> None:
    runner, ledger = GatedExecutor(), Ledger()
    pool = pool_of(runner, ledger, workers=1, queue_size=2)
    await pool.submit(task("first"))
    await _turns()  # the worker takes it, and waits at the gate
    await pool.submit(task("second"))
    await pool.submit(task("third"))
    assert pool.free_slots() == 0
    fourth = asyncio.ensure_future(pool.submit(task("fourth")))
    await _turns()
    assert not fourth.done(), "the queue is full: the dispatcher waits"
    runner.gate.set()
    await asyncio.wait_for(fourth, WAIT)
    await asyncio.wait_for(pool.join(), WAIT)
    assert runner.ran == ["first", "second", "third", "fourth"]
    assert ledger.on_workers() == 0, "each run let go once its worker was done with it"
    await pool.stop(0)


async def test_runs_fired_at_their_time_are_queued_at_once_beyond_the_bound() -> None:
    runner, ledger = GatedExecutor(), Ledger()
    pool = pool_of(runner, ledger, workers=1, queue_size=2)
    for i in range(5):
        pool.submit_fired(task(f"fired-{i}", fired=True))
    assert (ledger.fired_waiting(), pool.free_slots()) == (5, 0)
    assert not ledger.fired_started.is_set()
    await _turns()
    assert ledger.fired_waiting() == 4, "the one worker took the first"
    runner.gate.set()
    await asyncio.wait_for(ledger.fired_started.wait(), WAIT)
    await asyncio.wait_for(pool.join(), WAIT)
    assert runner.ran == [f"fired-{i}" for i in range(5)]
    await pool.stop(0)


class Waves:
    """Runs that end together, a wave at a time, on a clock the test moves."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self._wave = asyncio.Event()

    async def run(self, task: Task) -> None:
        wave = self._wave  # the wave under way when this run started
        await wave.wait()

    def end_wave(self, *, at: float) -> None:
        self.clock.advance(at - self.clock.monotonic())
        ending, self._wave = self._wave, asyncio.Event()
        ending.set()


async def test_runs_that_end_together_do_not_make_the_pool_seem_faster_than_it_is() -> None:
    # Thirty one-second runs end at once and the next thirty start within microseconds: the
    # pool still starts thirty a second, and that is what the arming stage must be told, or it
    # records hundreds `running` that wait seconds for a worker.
    waves, ledger = Waves(), Ledger()
    fake: Executor = waves  # type: ignore[assignment]  # the pool calls only its run()
    pool = WorkerPool(
        executor=fake,
        ledger=ledger,
        workers=30,
        queue_size=0,
        metrics=Metrics(),
        clock=waves.clock,
    )
    pool.start()
    for i in range(90):
        pool.submit_fired(task(f"run-{i}", fired=True))
    await _turns()
    assert pool.starts_within(0.1) == 0, "no run has ended: the pace is not known yet"
    waves.end_wave(at=1.0)
    await _turns()
    assert ledger.fired_waiting() == 30, "the first thirty ended and the next thirty started"
    assert (pool.starts_within(0.1), pool.starts_within(1.0)) == (3, 30)
    waves.end_wave(at=3.0)  # thirty slower runs, two seconds each: the pace follows them
    await _turns()
    assert pool.starts_within(1.0) == 20  # the median of thirty at 1 s and thirty at 2 s
    waves.end_wave(at=5.0)
    await _turns()
    assert pool.starts_within(1.0) == 15
    await asyncio.wait_for(pool.join(), WAIT)
    await pool.stop(0)


async def test_the_slow_last_runs_of_a_wave_do_not_hold_back_the_next_one() -> None:
    # At 1,000 runs a second, most runs keep a worker a millisecond; the last few of each
    # second's wave wait tens of milliseconds for their ends to be written. The next wave is
    # started at the pace of the many, or the arming stage fires too few of it on time.
    waves, ledger = Waves(), Ledger()
    fake: Executor = waves  # type: ignore[assignment]  # the pool calls only its run()
    pool = WorkerPool(
        executor=fake, ledger=ledger, workers=30, queue_size=0, metrics=Metrics(), clock=waves.clock
    )
    pool.start()
    for i in range(90):
        pool.submit_fired(task(f"run-{i}", fired=True))
    await _turns()
    for ends_at in (0.001, 0.002, 0.044):  # two waves of 1 ms, then one of 42 ms
        waves.end_wave(at=ends_at)
        await _turns()
    assert pool.starts_within(0.1) == 3000
    await asyncio.wait_for(pool.join(), WAIT)
    await pool.stop(0)
