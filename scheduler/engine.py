"""The dispatcher and its worker pool.

A tick: reap expired leases -> fetch due jobs, most urgent first, no more than the pool can take
-> lock them (one batch) -> claim them (one compare-and-set batch) -> record their executions as
running (one batch) -> submit them to the workers through a bounded queue, which blocks when full
(backpressure: the dispatcher falls behind the clock instead of piling up work). A full batch
means more is due, so the next tick starts at once; otherwise the dispatcher sleeps until the
next job falls due or the tick interval passes, whichever is sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.backoff import backoff_delay
from scheduler.config import Settings
from scheduler.lock import lock_key
from scheduler.logs import log_event
from scheduler.metrics import Metrics
from scheduler.model import Execution, ExecutionError, Job, Status, new_id
from scheduler.observers import Observers, RunObserver
from scheduler.observers.events import EventObserver
from scheduler.observers.logs import LogObserver
from scheduler.observers.metrics import MetricsObserver
from scheduler.planning import Plan, plan_run
from scheduler.ports import Claim, LockUnavailable, Ports, RunRequest, StoreError
from scheduler.registry import HandlerRegistry
from scheduler.runner import Outcome, Runner, Task

log = logging.getLogger("tickd.engine")


@dataclass(frozen=True, slots=True)
class DueRun:
    """A job to run now: its schedule's occurrence, or one someone asked for (`request`)."""

    job: Job
    request: RunRequest | None = None


def one_per_job(runs: list[DueRun]) -> list[DueRun]:
    """A job runs once at a time: of its runs due in one batch, the first (a request before
    the schedule's own, the oldest request first) goes now, the others in a later tick."""
    seen: set[str] = set()
    first = []
    for run in runs:
        if run.job.id not in seen:
            seen.add(run.job.id)
            first.append(run)
    return first


@dataclass(frozen=True, kw_only=True)
class Tick:
    fetched: int  # due jobs read
    claimed: int  # of those, locked and claimed by this instance: now queued, running or skipped
    full: bool  # the fetch hit its limit: more may be due, so look again at once


class WorkerPool:
    """A fixed number of workers fed by a bounded queue."""

    def __init__(self, runner: Runner, *, workers: int, queue_size: int, metrics: Metrics) -> None:
        self._runner = runner
        self._metrics = metrics
        self._queue: asyncio.Queue[Task] = asyncio.Queue(queue_size)
        self._size = workers
        self._workers: list[asyncio.Task[None]] = []
        self.busy = 0
        self.slot_freed = asyncio.Event()
        self.inflight: Counter[str] = Counter()  # by handler: queued or running

    def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"worker-{i}") for i in range(self._size)
        ]

    def free_slots(self) -> int:
        idle = self._size - self.busy
        return max(0, idle + self._queue.maxsize - self._queue.qsize())

    async def submit(self, task: Task) -> None:
        self.inflight[task.job.handler] += 1
        await self._queue.put(task)  # blocks while the queue is full

    async def join(self) -> None:
        await self._queue.join()

    def take_queued(self) -> list[Task]:
        """Empty the queue of tasks no worker has started (for shutdown)."""
        tasks = []
        while not self._queue.empty():
            tasks.append(self._queue.get_nowait())
            self._queue.task_done()
            self._done(tasks[-1])
        return tasks

    async def stop(self, grace_seconds: float) -> None:
        """Let running tasks finish within the grace period, then cancel the rest."""
        running = [w for w in self._workers if not w.done()]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=grace_seconds)
        for worker in running:
            worker.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            task = await self._queue.get()
            self.busy += 1
            self._metrics.busy_workers.set(self.busy)
            try:
                await self._runner.run(task)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours must not take a worker down with it
                log.exception("worker.task_crashed")
            finally:
                self.busy -= 1
                self._metrics.busy_workers.set(self.busy)
                self._queue.task_done()
                self._done(task)

    def _done(self, task: Task) -> None:
        self.inflight[task.job.handler] -= 1
        self.slot_freed.set()


class Engine:
    def __init__(
        self,
        *,
        settings: Settings,
        ports: Ports,
        registry: HandlerRegistry,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        resources: Mapping[str, object] | None = None,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self.settings = settings
        self.ports = ports
        self.registry = registry
        self.metrics = metrics or Metrics()
        self.rng = rng or random.Random()
        # A run's life becomes metrics, events and logs here, and whatever else is listening.
        self.observer = Observers(
            [
                MetricsObserver(self.metrics),
                EventObserver(
                    ports.events,
                    source=settings.instance_id,
                    clock=ports.clock,
                    metrics=self.metrics,
                ),
                LogObserver(),
                *observers,
            ]
        )
        self.runner = Runner(
            settings=settings,
            ports=ports,
            registry=registry,
            observer=self.observer,
            rng=self.rng,
            resources=resources or {},
        )
        self.pool = WorkerPool(
            self.runner,
            workers=settings.workers,
            queue_size=settings.effective_queue_size,
            metrics=self.metrics,
        )
        self.wake = asyncio.Event()  # set to make the dispatcher look again at once
        self.healthy = True
        self.last_error: str | None = None
        self._started = False

    def start(self) -> None:
        if not self._started:
            self.pool.start()
            self._started = True

    # -- one tick -------------------------------------------------------------------------------

    async def tick(self) -> Tick:
        """One dispatcher pass."""
        now = self.ports.clock.now()
        await self._reap(now)
        limit = min(self.settings.batch_size, self.pool.free_slots())
        if limit == 0:
            return Tick(fetched=0, claimed=0, full=True)
        fetched = await self._due(now, limit)
        self.metrics.due_backlog.set(await self.ports.store.count_due(now))
        runs = one_per_job(fetched)
        claimed = await self._dispatch(runs, now) if runs else 0
        return Tick(fetched=len(fetched), claimed=claimed, full=len(fetched) == limit)

    async def _due(self, now: datetime, limit: int) -> list[DueRun]:
        """Run requests (trigger, retry, backfill) first: someone asked for them explicitly."""
        store = self.ports.store
        runs = [DueRun(job, request) for request, job in await store.due_run_requests(now, limit)]
        if len(runs) < limit:
            jobs = await store.due_jobs(now, limit - len(runs), exclude_handlers=self._saturated())
            runs += [DueRun(job) for job in jobs]
        return runs

    async def _reap(self, now: datetime) -> None:
        for execution in await self.ports.store.reap_expired_leases(now):
            self.observer.reaped(execution)

    async def _dispatch(self, runs: list[DueRun], now: datetime) -> int:
        """The one path of every run, scheduled or requested: handler limits, then lock, claim
        (fenced), release what was lost, record, submit. A requested run goes through the same
        lock and claim as a scheduled one, so the two never overlap; it leaves the schedule as
        it is."""
        token = new_id()
        allowed = self._within_handler_limits(runs)
        locked = await self._lock(allowed, token)
        won = await self._claim(locked, now)
        await self._release_lost(locked, won, token)
        tasks = await self._record(won, now, token)
        await self._submit(tasks)
        return len(won)

    async def _claim(self, runs: list[DueRun], now: datetime) -> list[DueRun]:
        """A scheduled run claims its job as the due query read it; a requested one claims the
        job whenever it is due, and takes its request off the queue with it."""
        store = self.ports.store
        requested = [run for run in runs if run.request is not None]
        scheduled = [run.job for run in runs if run.request is None]
        won: list[DueRun] = []
        if requested:
            requests = [run.request for run in requested if run.request is not None]
            claims = [self._claim_of(run.job, now, None) for run in requested]
            won += [
                DueRun(job, r) for r, job in await store.claim_run_requests(requests, claims, now)
            ]
        if scheduled:
            claims = [self._claim_of(job, now, job.next_run_at) for job in scheduled]
            won += [DueRun(job) for job in await store.claim_jobs(claims, now)]
        return won

    async def _release_lost(self, locked: list[DueRun], won: list[DueRun], token: str) -> None:
        won_ids = {run.job.id for run in won}
        lost = {run.job.id for run in locked if run.job.id not in won_ids}
        self.metrics.claims_lost.inc(len(lost))
        if lost:
            await self.ports.lock.release_many([lock_key(job_id) for job_id in lost], token)

    async def _submit(self, tasks: list[Task]) -> None:
        self.metrics.batch_size.observe(len(tasks))
        for task in tasks:
            await self.pool.submit(task)

    async def _lock(self, runs: list[DueRun], token: str) -> list[DueRun]:
        margin = self.settings.lock_margin_seconds
        ttls = {lock_key(run.job.id): run.job.timeout_seconds + margin for run in runs}
        held = await self.ports.lock.acquire_many(ttls, token)
        self.metrics.lock_contention.inc(len(runs) - len(held))
        return [run for run in runs if lock_key(run.job.id) in held]

    def _claim_of(self, job: Job, now: datetime, next_run_at: datetime | None) -> Claim:
        margin = self.settings.lease_margin_seconds
        return Claim(
            job_id=job.id,
            revision=job.revision,
            next_run_at=next_run_at,
            owner=self.settings.instance_id,
            until=now + timedelta(seconds=job.timeout_seconds + margin),
        )

    async def _record(self, runs: list[DueRun], now: datetime, token: str) -> list[Task]:
        """Write the batch's executions (running ones and misfire skips) in one insert."""
        tasks: list[Task] = []
        skipped: list[tuple[Job, Execution]] = []
        only_skips: list[tuple[Job, Plan, Execution]] = []
        for run in runs:
            job = run.job
            plan = self._plan(run, now)
            missed = self._skipped_executions(job, plan, now)
            if plan.run_at is None:  # every due occurrence skipped: the last one advances the job
                *missed, last = missed
                only_skips.append((job, plan, last))
            skipped += [(job, execution) for execution in missed]
            if plan.run_at is None:
                continue
            execution = self._execution(job, plan.run_at, Status.RUNNING, now)
            tasks.append(
                Task(
                    job=job,
                    execution=execution,
                    plan=plan,
                    lock_token=token,
                    claimed_at=now,
                    request=run.request,
                )
            )
        recorded = [(task.job, task.execution) for task in tasks] + skipped
        await self.ports.store.insert_executions([execution for _, execution in recorded])
        for job, execution in recorded:
            self.observer.recorded(job, execution)
        for job, plan, last_skip in only_skips:
            await self._finish_skipped(job, plan, last_skip, token)
        return tasks

    @staticmethod
    def _plan(run: DueRun, now: datetime) -> Plan:
        """A requested run is its occurrence, never a misfire; a scheduled one follows the
        job's misfire policy."""
        if run.request is not None:
            return Plan(run_at=run.request.scheduled_at, advance_from=now)
        return plan_run(run.job, now)

    def _skipped_executions(self, job: Job, plan: Plan, now: datetime) -> list[Execution]:
        if not plan.skipped:
            return []
        self.observer.misfired(job, len(plan.skipped))
        message = f"missed by more than the grace period ({job.misfire.grace_seconds:g} s)"
        if plan.skipped_truncated:
            message += "; more occurrences were missed than are recorded"
        error = ExecutionError(type="Misfire", message=message)
        return [
            self._execution(job, at, Status.SKIPPED, now, error=error, finished=now)
            for at in plan.skipped
        ]

    async def _finish_skipped(self, job: Job, plan: Plan, execution: Execution, token: str) -> None:
        """A job all of whose due occurrences were skipped: no run, just advance it."""
        task = Task(
            job=job,
            execution=execution,
            plan=plan,
            lock_token=token,
            claimed_at=execution.started_at or self.ports.clock.now(),
        )
        outcome = Outcome(status=Status.SKIPPED, error=execution.error)
        await self.runner.finish(task, outcome, self.ports.clock.now())

    def _execution(
        self,
        job: Job,
        scheduled_at: datetime,
        status: Status,
        now: datetime,
        *,
        error: ExecutionError | None = None,
        finished: datetime | None = None,
    ) -> Execution:
        assert job.lease is not None
        return Execution(
            job_id=job.id,
            job_name=job.name,
            handler=job.handler,
            scheduled_at=scheduled_at,
            status=status,
            started_at=now,
            finished_at=finished,
            duration_ms=0.0 if finished else None,
            error=error,
            owner=self.settings.instance_id,
            token=job.lease.token,
        )

    # -- per-handler concurrency ----------------------------------------------------------------

    def _limit(self, handler: str) -> int | None:
        if handler in self.settings.handler_concurrency:
            return self.settings.handler_concurrency[handler]
        registered = self.registry.get(handler)
        return registered.handler.max_concurrency if registered else None

    def _saturated(self) -> list[str]:
        return [
            handler
            for handler, count in self.pool.inflight.items()
            if (limit := self._limit(handler)) is not None and count >= limit
        ]

    def _within_handler_limits(self, runs: Sequence[DueRun]) -> list[DueRun]:
        taken: Counter[str] = Counter()
        kept = []
        for run in runs:
            handler = run.job.handler
            limit = self._limit(handler)
            if limit is None or self.pool.inflight[handler] + taken[handler] < limit:
                taken[handler] += 1
                kept.append(run)
        return kept

    # -- running ----------------------------------------------------------------------------------

    async def drain(self, *, max_ticks: int = 10_000) -> None:
        """Run until nothing is due and nothing is running, then return (tests, one-shot runs)."""
        self.start()
        for _ in range(max_ticks):
            await self.pool.join()  # what runs now may free a handler's limit for the next tick
            if (await self.tick()).claimed == 0:
                return
        raise RuntimeError(f"still busy after {max_ticks} ticks")

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set, then shut down gracefully."""
        self.start()
        failures = 0
        while not stop.is_set():
            try:
                tick = await self.tick()
                failures = self._recovered(failures)
                if not tick.full or self.pool.free_slots() == 0:
                    await self._sleep(await self._until_next_due(), stop)
            except (StoreError, LockUnavailable, OSError) as exc:
                failures += 1
                await self._sleep(self._backing_off(exc, failures), stop)
            except Exception as exc:  # a bug of ours: say so loudly, but keep dispatching
                log.exception("dispatcher.unexpected_error")
                failures += 1
                await self._sleep(self._backing_off(exc, failures), stop)
        await self.shutdown()

    def _recovered(self, failures: int) -> int:
        if failures:
            log_event(log, "dispatcher.recovered", after_failures=failures)
        self.healthy, self.last_error = True, None
        return 0

    def _backing_off(self, exc: Exception, failures: int) -> float:
        delay = backoff_delay(failures, base=self.settings.tick_seconds, cap=30.0)
        self.healthy, self.last_error = False, f"{type(exc).__name__}: {exc}"
        self.metrics.store_errors.labels("tick").inc()
        log_event(
            log,
            "dispatcher.backing_off",
            level=logging.ERROR,
            error=self.last_error,
            retry_in_seconds=delay,
        )
        return delay

    async def _until_next_due(self) -> float:
        tick = self.settings.tick_seconds
        if self.pool.free_slots() == 0:
            return tick
        next_due = await self.ports.store.next_due_at()
        if next_due is None:
            return tick
        seconds = (next_due - self.ports.clock.now()).total_seconds()
        # Due already but not taken (held elsewhere, or its handler at its limit): wait a tick.
        return tick if seconds <= 0 else min(tick, seconds)

    async def _sleep(self, seconds: float, stop: asyncio.Event) -> None:
        self.wake.clear()
        self.pool.slot_freed.clear()
        waiters = [asyncio.ensure_future(e.wait()) for e in (stop, self.wake, self.pool.slot_freed)]
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    async def shutdown(self) -> None:
        """Stop taking work; let running executions finish within the grace period; cancel and
        record the rest as abandoned, giving their occurrences back so they run after a restart."""
        for task in self.pool.take_queued():
            abandoned = Outcome(
                status=Status.ABANDONED,
                error=ExecutionError(type="Shutdown", message="not started"),
            )
            await self.runner.finish(task, abandoned, self.ports.clock.now())
        await self.pool.stop(self.settings.shutdown_grace_seconds)
        await self.runner.close()
