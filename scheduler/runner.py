"""The life of one claimed run, on a worker: run the handler under its deadline with retries,
finalise the execution, advance the schedule (fenced), release the lock, tell the world.

Lock, claim and record happen before, in batches, in the dispatcher (scheduler/engine.py).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

import aiohttp

from scheduler.backoff import backoff_delay
from scheduler.config import Settings
from scheduler.dead_letters import finish_of
from scheduler.events import event_source
from scheduler.finishing import Ending, Finisher
from scheduler.handler_api import Handler, HandlerContext, Result
from scheduler.http import safe_client_session
from scheduler.lock import lock_key
from scheduler.logs import FIELDS, log_event
from scheduler.model import Execution, ExecutionError, ExecutionSummary, Job, Status
from scheduler.observers import RunObserver
from scheduler.planning import Plan, advance_after, keep_schedule
from scheduler.ports import Advance, Finish, LockUnavailable, Ports, RunRequest, StoreError
from scheduler.registry import HandlerRegistry
from scheduler.secrets import mask, scrub_text, scrub_values, secret_values

log = logging.getLogger("tickd.runner")
P = ParamSpec("P")
R = TypeVar("R")

# After cancelling a handler at its deadline, how long to wait for it to let go.
CANCEL_GRACE_SECONDS = 1.0
MAX_RESULT_BYTES = 16 * 1024
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True, kw_only=True)
class Task:
    job: Job  # as claimed: carries the lease and its fencing token
    execution: Execution  # recorded as running
    plan: Plan
    lock_token: str
    claimed_at: datetime
    # Set for a run someone asked for (trigger, retry, backfill): it leaves the schedule alone.
    request: RunRequest | None = None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    status: Status
    attempts: int = 0
    result: dict[str, Any] | None = None
    error: ExecutionError | None = None


class Runner:
    def __init__(
        self,
        *,
        settings: Settings,
        ports: Ports,
        registry: HandlerRegistry,
        observer: RunObserver,
        rng: random.Random,
        resources: Mapping[str, object],
    ) -> None:
        self.settings = settings
        self.ports = ports
        self.registry = registry
        # Told of every step of a run: metrics, events and logs are its business.
        self.observer = observer
        self.rng = rng
        # Opened by the daemon, by name: each run sees those its handler declared.
        self.resources = resources
        # Runs end in batches: one store write and one lock release for many.
        self.finisher = Finisher(
            ports.store,
            ports.lock,
            batch_size=settings.batch_size,
            linger_seconds=settings.finish_linger_seconds,
            event_source=event_source(settings, ports),
        )
        # Sync handlers get threads of their own, so a blocking one cannot starve the store's.
        self._threads = ThreadPoolExecutor(settings.workers, thread_name_prefix="tickd-handler")
        # Handlers that outlived their cancellation: kept referenced until they end.
        self._stuck: set[asyncio.Future[Any]] = set()
        # One SSRF-safe HTTP session for all handlers, opened on first use (inside the loop).
        self._http: aiohttp.ClientSession | None = None

    async def run(self, task: Task) -> None:
        if not await self._still_ours(task):
            return
        started = self.ports.clock.now()
        try:
            outcome = await self._run_handler(task, started)
        except asyncio.CancelledError:
            # Shutdown past its grace period: record the run as abandoned and give the
            # occurrence back (no advance), so it runs again after the restart.
            abandoned = Outcome(status=Status.ABANDONED, error=_error("Shutdown", "cancelled"))
            await asyncio.shield(self.finish(task, abandoned, started))
            raise
        await self._hand_over(task, outcome, started)

    async def close(self) -> None:
        await self.finisher.close()
        for future in self._stuck:
            future.cancel()
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _http_session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = safe_client_session(
                allow=self.settings.http_allow, ports=self.settings.http_allowed_ports
            )
        return self._http

    # -- before the handler ---------------------------------------------------------------------

    async def _still_ours(self, task: Task) -> bool:
        """A task that waited in the queue renews its lease and lock, so that its whole timeout
        is covered; if another instance took the job over meanwhile, it does not run."""
        now = self.ports.clock.now()
        if now - task.claimed_at < timedelta(seconds=1):
            return True
        lease = task.job.lease
        assert lease is not None
        timeout = task.job.timeout_seconds
        until = now + timedelta(seconds=timeout + self.settings.lease_margin_seconds)
        try:
            renewed = await self.ports.store.renew_lease(task.job.id, lease.token, until)
            if renewed:
                ttl = timeout + self.settings.lock_margin_seconds
                await self.ports.lock.extend(lock_key(task.job.id), task.lock_token, ttl)
                return True
        except (StoreError, LockUnavailable) as exc:
            # Not started, so nothing is lost: the lease expires, the reaper marks the execution
            # abandoned and the occurrence runs again.
            self.observer.not_started(task.job, str(exc))
            return False
        self.observer.fenced(task.job, task.execution, before_start=True)
        return False

    # -- the handler, its deadline and its retries ----------------------------------------------

    async def _run_handler(self, task: Task, started: datetime) -> Outcome:
        registered = self.registry.get(task.job.handler)
        if registered is None:
            self.observer.unknown_handler(task.job)
            message = f"no handler named {task.job.handler!r} is registered"
            return Outcome(status=Status.SKIPPED, error=_error("UnknownHandler", message))
        lag = (started - task.execution.scheduled_at).total_seconds()
        self.observer.started(task.job, task.execution, lag)
        deadline = started + timedelta(seconds=task.job.timeout_seconds)
        return await self._attempts(task, registered.handler, deadline)

    async def _attempts(self, task: Task, handler: Handler, deadline: datetime) -> Outcome:
        # What the handler returns or raises passes through here only, on its way to the
        # execution record, its events, its logs and the job's last error: the job's own
        # secrets are masked in it, should the far end echo them back.
        secrets = await _off_the_loop_if_large(
            task.job.params, secret_values, task.job.params, handler.secret_params
        )
        attempt = 0
        while True:
            attempt += 1
            context = self._context(task, handler, attempt, deadline)
            outcome = await self._attempt(task.job, handler, context, secrets)
            outcome = replace(outcome, attempts=attempt)
            if outcome.status is not Status.FAILED or attempt > task.job.max_retries:
                return outcome
            delay = backoff_delay(attempt)
            if self.ports.clock.now() + timedelta(seconds=delay) >= deadline:
                return outcome  # no time left for another attempt inside the deadline
            error = outcome.error.message if outcome.error else None
            self.observer.retrying(task.job, task.execution, attempt, delay, error)
            await self.ports.clock.sleep(delay)

    async def _attempt(
        self, job: Job, handler: Handler, ctx: HandlerContext, secrets: list[str]
    ) -> Outcome:
        remaining = ctx.remaining_seconds()
        if remaining <= 0:
            return Outcome(status=Status.TIMEOUT, error=_error("Timeout", "deadline reached"))
        future = self._start(handler, ctx)
        try:
            done, _ = await asyncio.wait({future}, timeout=remaining)
        except asyncio.CancelledError:
            future.cancel()
            raise
        if not done:
            await self._cancel(future, job)
            message = f"still running at its deadline ({ctx.deadline.isoformat()})"
            return Outcome(status=Status.TIMEOUT, error=_error("Timeout", message))
        if future.cancelled():
            return Outcome(
                status=Status.FAILED, error=_error("Cancelled", "the handler was cancelled")
            )
        raised = future.exception()
        returned = None if raised else future.result()
        weighed = returned if raised is None else str(raised)
        return await _off_the_loop_if_large(weighed, _outcome_of, returned, raised, secrets)

    def _start(self, handler: Handler, ctx: HandlerContext) -> asyncio.Future[Result]:
        if inspect.iscoroutinefunction(handler.func) or _is_async_callable(handler.func):
            return asyncio.ensure_future(_call_async(handler, ctx))
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._threads, handler.func, ctx)  # type: ignore[arg-type]

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

    def _context(
        self, task: Task, handler: Handler, attempt: int, deadline: datetime
    ) -> HandlerContext:
        job = task.job
        fields = {"job": job.name, "execution": task.execution.id, "attempt": attempt}
        return HandlerContext(
            job_id=job.id,
            job_name=job.name,
            params=job.params,
            scheduled_at=task.execution.scheduled_at,
            attempt=attempt,
            deadline=deadline,
            idempotency_key=task.execution.idempotency_key,
            logger=logging.LoggerAdapter(
                logging.getLogger(f"tickd.handler.{job.handler}"), {FIELDS: fields}
            ),
            clock=self.ports.clock,
            mailer=self.ports.mailer,
            http=self._http_session(),
            # Read-only: one mapping serves every run of the handler.
            config=MappingProxyType(dict(self.settings.handler_settings.get(job.handler, {}))),
            resources={
                r.name: self.resources[r.name]
                for r in handler.resources
                if r.name in self.resources
            },
        )

    # -- after the handler ----------------------------------------------------------------------

    async def finish(self, task: Task, outcome: Outcome, started: datetime) -> None:
        """End the run and wait until its end is written (shutdown, skips)."""
        execution, advance, end = self._end_of(task, outcome, started)
        ending = await self.finisher.finish(end, task.lock_token)
        self._ended(task, execution, advance, ending)
        if task.request is not None and execution.status is Status.ABANDONED:
            await self._give_request_back(task.request)

    async def _hand_over(self, task: Task, outcome: Outcome, started: datetime) -> None:
        """A worker's run: its end goes with the next batch, and the worker to its next run;
        what became of the end is told once it is written. (Never abandoned here: a run the
        worker completed always has an outcome of its own.)"""
        try:
            await self.finisher.room()
        finally:  # cancelled while the store is behind (shutdown): the end is still written
            execution, advance, end = self._end_of(task, outcome, started)
            ended = self.finisher.hand_over(end, task.lock_token)
            ended.add_done_callback(
                lambda done: self._ended(task, execution, advance, done.result())
            )

    async def settled(self) -> None:
        """Wait until the end of every run handed over is written."""
        await self.finisher.settled()

    def _end_of(
        self, task: Task, outcome: Outcome, started: datetime
    ) -> tuple[Execution, Advance | None, Finish]:
        finished = self.ports.clock.now()
        execution = replace(
            task.execution,
            status=outcome.status,
            finished_at=finished,
            duration_ms=round((finished - started).total_seconds() * 1000, 3),
            attempts=outcome.attempts,
            error=outcome.error,
            result=outcome.result,
        )
        advance = self._advance(task, execution)
        # Dead letters and automatic re-drives: scheduler/dead_letters.py.
        end = finish_of(task.job, task.request, execution, advance)
        return end.execution, advance, end

    def _ended(
        self, task: Task, execution: Execution, advance: Advance | None, ending: Ending
    ) -> None:
        if ending.error is not None:
            self.observer.not_recorded(task.job, execution, ending.error)
        elif not ending.applied:
            self.observer.fenced(task.job, execution, before_start=False)
        self.observer.finished(task.job, execution)
        if ending.applied and advance is not None and advance.paused_reason:
            self.observer.paused(task.job, advance.paused_reason)

    async def _give_request_back(self, request: RunRequest) -> None:
        """A requested run that never got to run (a shutdown) is asked for again, as a
        scheduled one's occurrence is given back: its request was taken off the queue when it
        was claimed. The same id, so giving it back twice queues it once."""
        try:
            await self.ports.store.insert_run_requests([request])
        except StoreError as exc:
            log_event(log, "run.request_not_given_back", level=logging.ERROR, error=str(exc))

    def _advance(self, task: Task, execution: Execution) -> Advance | None:
        if execution.status is Status.ABANDONED:
            return None
        assert execution.finished_at is not None
        summary = ExecutionSummary(
            execution_id=execution.id,
            status=execution.status,
            finished_at=execution.finished_at,
            error=execution.error.message if execution.error else None,
        )
        if task.request is not None:
            return keep_schedule(task.job, summary)
        return advance_after(
            task.job,
            task.plan,
            summary,
            breaker_threshold=self.settings.circuit_breaker_failures,
            rng=self.rng,
        )


# Masking is linear in what it reads, but a large value still takes milliseconds: that goes to a
# thread; a small one (most results and params) is masked at once, a thread hop costing more.
INLINE_MASKING_CHARS = 16 * 1024


async def _off_the_loop_if_large(
    value: object, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> R:
    if _smaller_than(value, INLINE_MASKING_CHARS):
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)


def _smaller_than(value: object, budget: int) -> bool:
    """Whether a JSON-like value holds fewer characters than `budget`; stops counting as soon
    as it does not."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str | bytes):
            budget -= len(item)
        elif isinstance(item, Mapping):
            budget -= 2  # containers count too, so one that holds itself ends the count
            pending += [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set):
            budget -= 2
            pending += list(item)
        else:
            budget -= 32  # a number, a date, an object: its text is short
        if budget < 0:
            return False
    return True


async def _call_async(handler: Handler, ctx: HandlerContext) -> Result:
    value = handler(ctx)
    assert isinstance(value, Awaitable)
    return await value


def _is_async_callable(func: object) -> bool:
    return inspect.iscoroutinefunction(getattr(func, "__call__", None))  # noqa: B004


def _outcome_of(returned: object, raised: BaseException | None, secrets: list[str]) -> Outcome:
    if raised is not None:
        return Outcome(
            status=Status.FAILED, error=_error(type(raised).__name__, str(raised), secrets)
        )
    return _checked_result(returned, secrets)


def _checked_result(value: object, secrets: list[str]) -> Outcome:
    if value is not None and not isinstance(value, dict):
        message = f"a handler returns a dict or None, not {type(value).__name__}"
        return Outcome(status=Status.FAILED, error=_error("BadResult", message))
    if value is None:
        return Outcome(status=Status.SUCCESS)
    try:
        safe: dict[str, Any] = json.loads(json.dumps(mask(value), default=str))
    except (TypeError, ValueError, RecursionError) as exc:  # keys not strings, a cycle...
        message = f"a handler's result must be JSON: {type(exc).__name__}: {exc}"
        return Outcome(status=Status.FAILED, error=_error("BadResult", message))
    size = len(json.dumps(safe))
    if size > MAX_RESULT_BYTES:
        return Outcome(status=Status.SUCCESS, result={"truncated": True, "size_bytes": size})
    return Outcome(status=Status.SUCCESS, result=scrub_values(safe, secrets))


def _error(kind: str, message: str, secrets: Collection[str] = ()) -> ExecutionError:
    # Masked whole before it is cut, so that no secret is left half shown at the cut.
    masked: str = scrub_values(scrub_text(message), secrets)
    return ExecutionError(type=kind, message=masked[:MAX_ERROR_CHARS])
