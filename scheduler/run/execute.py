"""The execute stage: a run's handler under its deadline, with its retries and their backoff,
giving an Outcome. It makes no store call: the dispatcher claimed and recorded the run before,
the completer writes its end after."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar, cast

import aiohttp

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.logs import FIELDS
from tickd.scheduler.model import Attempt, Job, Status
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.api import Handler, HandlerContext, Result
from tickd.scheduler.plugin.forked_children import ChildEndingThreads, end_if_forked
from tickd.scheduler.plugin.http import safe_client_session
from tickd.scheduler.plugin.leftover_tasks import TasksEndingWithTheRun, run_task
from tickd.scheduler.plugin.outcomes import (
    HandlerExit,
    described,
    execution_error,
    outcome_of,
    smaller_than,
)
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import Ports
from tickd.scheduler.run.task import Outcome, Task
from tickd.scheduler.schedule.backoff import backoff_delay
from tickd.scheduler.secrets.echoes import EchoMaskingLogger
from tickd.scheduler.secrets.masking import secret_values, with_settings_secrets

P = ParamSpec("P")
R = TypeVar("R")

# After cancelling a handler at its deadline, how long to wait for it to let go.
CANCEL_GRACE_SECONDS = 1.0


# A handler that returned nothing, and the outcome of a run whose first attempt did: shared,
# being frozen.
_SUCCEEDED = Outcome(status=Status.SUCCESS)
_SUCCEEDED_AT_ONCE = Outcome(status=Status.SUCCESS, attempts=1)


@dataclass(frozen=True, kw_only=True)
class _SharedContext:
    """What every run's context of one handler shares, and the handler it was made for."""

    handler: Handler
    config: Mapping[str, Any]
    resources: Mapping[str, object]


class Executor:
    """Runs handlers: async ones on the loop, sync ones on threads of their own."""

    def __init__(
        self,
        *,
        settings: Settings,
        ports: Ports,
        registry: HandlerRegistry,
        observer: RunObserver,
        resources: Mapping[str, object],
    ) -> None:
        self.settings = settings
        self.ports = ports
        self.registry = registry
        self.observer = observer
        # Opened by the daemon, by name: each run sees those its handler declared.
        self.resources = resources
        # Sync handlers get threads of their own, so a blocking one cannot starve the store's.
        self._threads = ChildEndingThreads(settings.workers, thread_name_prefix="tickd-handler")
        # Handlers that outlived their cancellation: kept referenced until they end.
        self._stuck: set[asyncio.Future[Any]] = set()
        # One SSRF-safe HTTP session for all handlers, opened on first use (inside the loop).
        self._http: aiohttp.ClientSession | None = None
        # What a run's context shares with every run of its handler, made on its first run.
        self._handler_logs: dict[str, logging.Logger] = {}
        self._handler_configs: dict[str, Mapping[str, Any]] = {}
        self._async_handlers: dict[int, tuple[Handler, bool]] = {}  # by id(handler)
        # By handler name (Executor._shared_context).
        self._shared_contexts: dict[str, _SharedContext] = {}

    async def close(self) -> None:
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

    async def execute(self, task: Task, started: datetime) -> Outcome:
        """The handler's outcome, its attempts and retries within the job's deadline."""
        registered = self.registry.get(task.job.handler)
        if registered is None:
            self.observer.unknown_handler(task.job)
            message = f"no handler named {task.job.handler!r} is registered"
            return Outcome(status=Status.SKIPPED, error=execution_error("UnknownHandler", message))
        self.observer.started(task.job, task.execution, _waited(task, started))
        deadline = started + timedelta(seconds=task.job.timeout_seconds)
        return await self._attempts(task, registered.handler, deadline)

    async def _attempts(self, task: Task, handler: Handler, deadline: datetime) -> Outcome:
        # What the handler returns or raises passes through here only, on its way to the
        # execution record, its events, its logs and the job's last error: the secrets of the
        # job and of its handler's settings are masked in it, should a far end echo them back.
        # Most jobs have no params: nothing to look through, nor a coroutine to make for it.
        secrets = await self._secrets_of(task.job, handler) if task.job.params else []
        config = self._handler_config(task.job.handler)
        secrets = with_settings_secrets(secrets, config, handler.secret_params)
        log: list[Attempt] = []
        while True:
            number = len(log) + 1
            began = self.ports.clock.now()
            context = self._context(task, handler, number, deadline, secrets)
            outcome = await self._attempt(task.job, handler, context, secrets)
            if outcome is _SUCCEEDED and number == 1:
                return _SUCCEEDED_AT_ONCE  # most runs: nothing more to record
            ended = self.ports.clock.now()
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
                )
            error = outcome.error.message if outcome.error else None
            self.observer.retrying(task.job, task.execution, number, delay, error)
            await self.ports.clock.sleep(delay)

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
        self, job: Job, handler: Handler, ctx: HandlerContext, secrets: list[str]
    ) -> Outcome:
        remaining = ctx.remaining_seconds()
        if remaining <= 0:
            return Outcome(
                status=Status.TIMEOUT, error=execution_error("Timeout", "deadline reached")
            )
        future = self._start(handler, ctx)
        try:
            done = await _done_within(future, remaining)
        except asyncio.CancelledError:
            future.cancel()
            raise
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

    def _context(
        self, task: Task, handler: Handler, attempt: int, deadline: datetime, secrets: list[str]
    ) -> HandlerContext:
        job, execution = task.job, task.execution
        fields = {"job": job.name, "execution": execution.id, "attempt": attempt}
        if execution.shards > 1:
            fields["shard"] = execution.shard
        shared = self._shared_context(job.handler, handler)
        return HandlerContext(
            job_id=job.id,
            job_name=job.name,
            params=job.params,
            scheduled_at=execution.scheduled_at,
            attempt=attempt,
            deadline=deadline,
            idempotency_key=execution.idempotency_key,
            logger=EchoMaskingLogger(self._handler_log(job.handler), {FIELDS: fields}, secrets),
            clock=self.ports.clock,
            mailer=self.ports.mailer,
            http=self._http_session(),
            config=shared.config,
            resources=shared.resources,
            shard=execution.shard,
            shards=execution.shards,
        )

    def _shared_context(self, name: str, handler: Handler) -> _SharedContext:
        """What every run of a handler sees alike, made on its first run: read-only mappings,
        so that no run changes what the next one sees."""
        known = self._shared_contexts.get(name)
        if known is None or known.handler is not handler:  # first run, or registered anew
            resources = {
                r.name: self.resources[r.name]
                for r in handler.resources
                if r.name in self.resources
            }
            known = self._shared_contexts[name] = _SharedContext(
                handler=handler,
                config=self._handler_config(name),
                resources=MappingProxyType(resources),
            )
        return known

    def _handler_log(self, handler: str) -> logging.Logger:
        # logging.getLogger takes the logging module's lock: once per handler, not per run.
        if handler not in self._handler_logs:
            self._handler_logs[handler] = logging.getLogger(f"tickd.handler.{handler}")
        return self._handler_logs[handler]

    def _handler_config(self, handler: str) -> Mapping[str, Any]:
        """Read-only: one mapping serves every run of the handler."""
        if handler not in self._handler_configs:
            table = self.settings.handler_settings.get(handler, {})
            self._handler_configs[handler] = MappingProxyType(dict(table))
        return self._handler_configs[handler]


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
