"""The execute stage: a worker's run, confirmed still this instance's if it waited, its handler
under its deadline with its retries and their backoff, and the Outcome handed to the end stage
(run/end.py). Its store calls renew the lease of a run that waited and, once a tick, read the
cancel requests of the runs on the workers: the dispatcher claimed and recorded the run before,
the writer writes its end after."""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar, cast

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.model import Attempt, CancelRequest, Job, Status
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.api import Handler, HandlerContext, Result
from tickd.scheduler.plugin.contexts import HandlerContexts, RunLog
from tickd.scheduler.plugin.forked_children import ChildEndingThreads, end_if_forked
from tickd.scheduler.plugin.leftover_tasks import TasksEndingWithTheRun, run_task
from tickd.scheduler.plugin.outcomes import (
    HandlerExit,
    Outcome,
    described,
    execution_error,
    outcome_of,
    smaller_than,
)
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import Lock, LockUnavailable, StoreError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_api import CancelRequestStore
from tickd.scheduler.ports.store_engine import CompletionStore
from tickd.scheduler.run.end import Ender
from tickd.scheduler.run.ledger import Task
from tickd.scheduler.schedule.backoff import backoff_delay
from tickd.scheduler.secrets.masking import secret_values, with_settings_secrets

P = ParamSpec("P")
R = TypeVar("R")

# A task that starts within this long of its claim needs no lease renewal: its lease and lock
# still cover its whole timeout.
FRESH_FOR = timedelta(seconds=1)
# After cancelling a handler at its deadline, how long to wait for it to let go.
CANCEL_GRACE_SECONDS = 1.0


# A handler that returned nothing, and the outcome of a run whose first attempt did: shared,
# being frozen.
_SUCCEEDED = Outcome(status=Status.SUCCESS)
_SUCCEEDED_AT_ONCE = Outcome(status=Status.SUCCESS, attempts=1)


class Executor:
    """Runs handlers: async ones on the loop, sync ones on threads of their own."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: CompletionStore,
        cancels: CancelRequestStore,
        lock: Lock,
        clock: Clock,
        registry: HandlerRegistry,
        contexts: HandlerContexts,
        ender: Ender,
        observer: RunObserver,
    ) -> None:
        self.settings = settings
        self.store = store  # a run that waited renews its lease
        self.cancels = cancels  # the cancel requests of the runs on the workers, once a tick
        self.lock = lock
        self.clock = clock
        self.registry = registry
        self.contexts = contexts
        self.ender = ender
        self.observer = observer
        # Sync handlers get threads of their own, so a blocking one cannot starve the store's.
        self._threads = ChildEndingThreads(settings.workers, thread_name_prefix="tickd-handler")
        # Handlers that outlived their cancellation: kept referenced until they end.
        self._stuck: set[asyncio.Future[Any]] = set()
        self._async_handlers: dict[int, tuple[Handler, bool]] = {}  # by id(handler)
        # Runs someone asked to stop, by execution id: the error each is recorded with.
        self._cancelled: dict[str, str] = {}
        # The async handlers running now, by execution id: what a cancel request cancels.
        self._running: dict[str, asyncio.Future[Any]] = {}

    async def stop_cancelled(self, held: list[str]) -> None:
        """Stop the runs on the workers (`held`, their execution ids) that someone asked to
        stop, found in one query; the dispatcher asks once a tick."""
        if held or self._cancelled:
            self.cancel(await self.cancels.cancel_requests(held) if held else [], held)

    def cancel(self, requests: list[CancelRequest], held: list[str]) -> None:
        """The cancel requests of the runs on the workers (`held`, their execution ids): an
        async handler is cancelled at once; a sync one, on a thread that cannot be interrupted,
        is recorded cancelled when it returns or reaches its deadline; a run not started yet
        never starts."""
        still_held = set(held)
        self._cancelled = {id_: m for id_, m in self._cancelled.items() if id_ in still_held}
        for request in requests:
            if request.execution_id not in self._cancelled:
                self._cancelled[request.execution_id] = request.message
                future = self._running.get(request.execution_id)
                if future is not None:
                    future.cancel()

    async def close(self) -> None:
        for future in self._stuck:
            future.cancel()
        self._threads.shutdown(wait=False, cancel_futures=True)
        await self.contexts.close()

    async def run(self, task: Task) -> None:
        """A worker's run: still this instance's (a run that waited renews its lease and lock),
        executed, and its end handed to the end stage."""
        started = self.clock.now()
        # Most tasks start within FRESH_FOR of their claim, its lease and lock still covering
        # their whole timeout: no coroutine made to find that out.
        if started - task.claimed_at >= FRESH_FOR:
            if not await self._still_ours(task, started):
                return
            started = self.clock.now()
        real = self.clock.monotonic()  # the duration is real time, whatever the wall says
        try:
            outcome = await self.execute(task, started)
        except asyncio.CancelledError:
            # Shutdown past its grace period: record the run as abandoned and give the
            # occurrence back (no advance), so it runs again after the restart.
            error = execution_error("Shutdown", "cancelled")
            abandoned = Outcome(status=Status.ABANDONED, error=error)
            await asyncio.shield(self.ender.end_now(task, abandoned, started))
            raise
        finished = self.clock.now()  # waiting for the writer below is not the run's time
        seconds = self.clock.monotonic() - real
        await self.ender.hand_over(task, outcome, started, finished, seconds)

    async def _still_ours(self, task: Task, now: datetime) -> bool:
        """A task that waited in the queue renews its lease and lock, so that its whole timeout
        is covered; if another instance took the job over meanwhile, it does not run."""
        timeout = task.job.timeout_seconds
        until = now + timedelta(seconds=timeout + self.settings.lease_margin_seconds)
        try:
            if await self._renew(task, until, now):
                ttl = timeout + self.settings.lock_margin_seconds
                await self.lock.extend(task.lock_key, task.lock_token, ttl)
                return True
        except (StoreError, LockUnavailable) as exc:
            # Not started, so nothing is lost: the lease expires, the reaper marks the execution
            # abandoned and the occurrence runs again.
            self.observer.not_started(task.job, str(exc))
            return False
        self.observer.fenced(task.job, task.execution, before_start=True)
        return False

    async def _renew(self, task: Task, until: datetime, now: datetime) -> bool:
        token = task.execution.token
        assert token is not None
        entry = task.shard_entry
        if entry is not None:
            return await self.store.renew_shard_lease(entry, token, until, now)
        return await self.store.renew_lease(task.job.id, token, until)

    async def execute(self, task: Task, started: datetime) -> Outcome:
        """The handler's outcome, its attempts and retries within the job's deadline."""
        registered = self.registry.get(task.job.handler)
        if registered is None:
            self.observer.unknown_handler(task.job)
            message = f"no handler named {task.job.handler!r} is registered"
            return Outcome(status=Status.SKIPPED, error=execution_error("UnknownHandler", message))
        if task.execution.id in self._cancelled:  # asked to stop while queued: never starts
            return self._cancelled_outcome(task, attempts=0)
        self.observer.started(task.job, task.execution, _waited(task, started))
        deadline = started + timedelta(seconds=task.job.timeout_seconds)
        return await self._attempts(task, registered.handler, deadline)

    async def _attempts(self, task: Task, handler: Handler, deadline: datetime) -> Outcome:
        # What the handler returns or raises passes through here only, on its way to the
        # execution record, its events, its logs and the job's last error: the secrets of the
        # job and of its handler's settings are masked in it, should a far end echo them back.
        # Most jobs have no params: nothing to look through, nor a coroutine to make for it.
        secrets = await self._secrets_of(task.job, handler) if task.job.params else []
        config = self.contexts.config(task.job.handler)
        secrets = with_settings_secrets(secrets, config, handler.secret_params)
        log: list[Attempt] = []
        run_log = RunLog()  # what the handler logs, across its attempts
        while True:
            if log and task.execution.id in self._cancelled:  # asked to stop during a backoff
                cancelled = self._cancelled_outcome(task, attempts=len(log), log=run_log)
                return replace(cancelled, attempt_log=tuple(log) if len(log) > 1 else ())
            number = len(log) + 1
            began = self.clock.now()
            context = self.contexts.context(
                task.job,
                task.execution,
                handler,
                attempt=number,
                deadline=deadline,
                secrets=secrets,
                run_log=run_log,
            )
            outcome = await self._attempt(task, handler, context, secrets)
            if task.execution.id in self._cancelled:  # whatever the handler did once asked
                outcome = self._cancelled_outcome(task, attempts=number)
            if outcome is _SUCCEEDED and number == 1 and not run_log.lines:
                return _SUCCEEDED_AT_ONCE  # most runs: nothing more to record
            ended = self.clock.now()
            delay = self._backoff_before_next(task.job, outcome, number, ended, deadline)
            log.append(
                Attempt(
                    number=number,
                    started_at=began,
                    finished_at=ended,
                    error=outcome.error,
                    backoff_seconds=delay,
                )
            )
            if delay is None:
                return Outcome(
                    status=outcome.status,
                    attempts=number,
                    result=outcome.result,
                    error=outcome.error,
                    attempt_log=tuple(log) if number > 1 else (),
                    log=run_log.kept(),
                )
            error = outcome.error.message if outcome.error else None
            self.observer.retrying(task.job, task.execution, number, delay, error)
            await self.clock.sleep(delay)

    def _cancelled_outcome(
        self, task: Task, *, attempts: int, log: RunLog | None = None
    ) -> Outcome:
        message = self._cancelled.pop(task.execution.id)
        return Outcome(
            status=Status.CANCELLED,
            attempts=attempts,
            error=execution_error("Cancelled", message),
            log=log.kept() if log is not None else (),
        )

    @staticmethod
    def _backoff_before_next(
        job: Job, outcome: Outcome, number: int, now: datetime, deadline: datetime
    ) -> float | None:
        """How long to wait before attempt `number` + 1; None: this attempt is the last (it did
        not fail, the retries are spent, or no time is left for another inside the deadline)."""
        if outcome.status is not Status.FAILED or number > job.max_retries:
            return None
        delay = backoff_delay(number)
        return None if now + timedelta(seconds=delay) >= deadline else delay

    @staticmethod
    async def _secrets_of(job: Job, handler: Handler) -> list[str]:
        return await _off_the_loop_if_large(
            job.params, secret_values, job.params, handler.secret_params
        )

    async def _attempt(
        self, task: Task, handler: Handler, ctx: HandlerContext, secrets: list[str]
    ) -> Outcome:
        job = task.job
        remaining = ctx.remaining_seconds()
        if remaining <= 0:
            return Outcome(
                status=Status.TIMEOUT, error=execution_error("Timeout", "deadline reached")
            )
        future = self._start(handler, ctx)
        if self._is_async(handler):
            self._running[task.execution.id] = future
        try:
            done = await _done_within(future, remaining)
        except asyncio.CancelledError:
            future.cancel()
            raise
        finally:
            self._running.pop(task.execution.id, None)
        if not done:
            await self._cancel(future, job)
            message = f"still running at its deadline ({ctx.deadline.isoformat()})"
            return Outcome(status=Status.TIMEOUT, error=execution_error("Timeout", message))
        if future.cancelled():
            return Outcome(
                status=Status.FAILED,
                error=execution_error("Cancelled", "the handler was cancelled"),
            )
        raised = future.exception()
        returned = None if raised else future.result()
        if raised is None and returned is None:  # most runs: nothing to weigh, mask or check
            return _SUCCEEDED
        weighed = returned if raised is None else described(raised)
        return await _off_the_loop_if_large(weighed, outcome_of, returned, raised, secrets)

    def _start(self, handler: Handler, ctx: HandlerContext) -> asyncio.Future[Result]:
        loop = asyncio.get_running_loop()
        if self._is_async(handler):
            return run_task(loop, _call_async(handler, ctx))
        return loop.run_in_executor(self._threads, handler.func, ctx)  # type: ignore[arg-type]

    def _is_async(self, handler: Handler) -> bool:
        """Found out once per handler, and kept with the handler itself, so that its id is not
        reused while the answer is."""
        known = self._async_handlers.get(id(handler))
        if known is None:
            func = handler.func
            known = (handler, inspect.iscoroutinefunction(func) or _is_async_callable(func))
            self._async_handlers[id(handler)] = known
        return known[1]

    async def _cancel(self, future: asyncio.Future[Result], job: Job) -> None:
        future.cancel()
        await asyncio.wait({future}, timeout=CANCEL_GRACE_SECONDS)
        if future.done():
            return
        # It ignores cancellation (or is a thread, which cannot be cancelled): let it go, keep
        # a reference until it ends, and free the worker.
        self._stuck.add(future)
        future.add_done_callback(self._forget_stuck)
        self.observer.stuck(job)

    def _forget_stuck(self, future: asyncio.Future[Any]) -> None:
        self._stuck.discard(future)
        if not future.cancelled():
            future.exception()  # retrieved, so asyncio does not complain about it later


async def _done_within(future: asyncio.Future[Any], seconds: float) -> bool:
    """Whether `future` is done within `seconds`, as asyncio.wait({future}, timeout=seconds)
    says, for the one future of a run."""
    if future.done():
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    # Most handlers end within the first step of their task, which the loop runs before it
    # resumes this one: then one turn of the loop is all it costs, not a timer armed, pushed on
    # the loop's heap (where the cancelled ones of a burst pile up) and cancelled.
    await asyncio.sleep(0)
    if future.done():
        return True
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_at(deadline, wake)
    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    return future.done()


# Masking is linear in what it reads, but a large value still takes milliseconds: that goes to a
# thread; a small one (most results and params) is masked at once, a thread hop costing more.
INLINE_MASKING_CHARS = 16 * 1024


async def _off_the_loop_if_large(
    value: object, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> R:
    if smaller_than(value, INLINE_MASKING_CHARS):
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)


async def _call_async(handler: Handler, ctx: HandlerContext) -> Result:
    with TasksEndingWithTheRun(ctx.job_name):
        daemon = os.getpid()
        # Known to be async (Executor._is_async); a callable that lied fails the run with a
        # TypeError.
        value = cast(Awaitable[Result], handler(ctx))
        try:
            try:
                return await value
            finally:  # what the handler raised, if it did
                end_if_forked(daemon, sys.exc_info()[1], job=ctx.job_name)
        except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
            raise HandlerExit(exc) from None


def _is_async_callable(func: object) -> bool:
    return inspect.iscoroutinefunction(getattr(func, "__call__", None))  # noqa: B004


def _waited(task: Task, started: datetime) -> float:
    """How long after it could start the run's handler started: after its occurrence was due,
    or for a requested run (a trigger, retry, backfill, re-drive), after its request allowed."""
    could_start = task.execution.scheduled_at
    if task.execution.requested is not None and task.request is not None:
        could_start = task.request.not_before
    return (started - could_start).total_seconds()
