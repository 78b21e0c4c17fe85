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
from traceback import format_exception
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar, cast

import aiohttp

from tickd.scheduler.backoff import backoff_delay
from tickd.scheduler.config import Settings
from tickd.scheduler.dead_letters import finish_of
from tickd.scheduler.events import event_source
from tickd.scheduler.finishing import Ending, Finisher
from tickd.scheduler.handler_api import Handler, HandlerContext, Result
from tickd.scheduler.http import safe_client_session
from tickd.scheduler.leftovers import TasksEndingWithTheRun, run_task
from tickd.scheduler.logs import FIELDS, log_event
from tickd.scheduler.model import (
    Attempt,
    Execution,
    ExecutionError,
    ExecutionSummary,
    Job,
    Status,
)
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.planning import Plan, advance_after, keep_schedule
from tickd.scheduler.ports import Advance, Finish, LockUnavailable, Ports, RunRequest, StoreError
from tickd.scheduler.registry import HandlerRegistry
from tickd.scheduler.secrets import mask, scrub_text, scrub_values, secret_values
from tickd.scheduler.shards import all_ended, outcome, run_lock_key, shard_entry_of

log = logging.getLogger("tickd.runner")
P = ParamSpec("P")
R = TypeVar("R")

# After cancelling a handler at its deadline, how long to wait for it to let go.
CANCEL_GRACE_SECONDS = 1.0
# A result is stored up to this size, replaced by its size up to the next...
MAX_RESULT_BYTES = 16 * 1024
# ...and past that, the run fails: measured before the result is copied or serialised, so a
# handler returning 100 MB costs the daemon no more than the handler's own memory.
MAX_RESULT_CHARS = 1_000_000
MAX_ERROR_CHARS = 2000
# A traceback is kept up to this many characters, its innermost frames.
MAX_TRACEBACK_CHARS = 16_000
# A task that waited in the queue longer than this renews its lease and lock before it starts.
FRESH_FOR = timedelta(seconds=1)


@dataclass(frozen=True, kw_only=True)
class Task:
    job: Job  # as claimed: carries the lease and its fencing token
    execution: Execution  # recorded as running
    plan: Plan
    lock_token: str
    claimed_at: datetime
    # Set for a run someone asked for (trigger, retry, backfill): it leaves the schedule alone;
    # or for a shard of an occurrence in progress (its entry): the last shard to end ends it.
    request: RunRequest | None = None
    # Armed ahead and fired at its time: with others due at the same instant, it starts before
    # the ends of runs already over are written (Finisher.defer_to).
    fired: bool = False

    @property
    def shard_entry(self) -> RunRequest | None:
        return shard_entry_of(self.request)

    @property
    def lock_key(self) -> str:
        return run_lock_key(self.job.id, self.request)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    status: Status
    attempts: int = 0
    result: dict[str, Any] | None = None
    error: ExecutionError | None = None
    attempt_log: tuple[Attempt, ...] = ()  # when there was more than one attempt


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
        # Runs over whose ends wait for the store (by id: a task hashes by its fields).
        self._ending: dict[int, Task] = {}
        # One SSRF-safe HTTP session for all handlers, opened on first use (inside the loop).
        self._http: aiohttp.ClientSession | None = None
        # What a run's context shares with every run of its handler, made on its first run.
        self._handler_logs: dict[str, logging.Logger] = {}
        self._handler_configs: dict[str, Mapping[str, Any]] = {}
        self._async_handlers: dict[int, tuple[Handler, bool]] = {}  # by id(handler)
        # By handler name (Runner._shared_context).
        self._shared_contexts: dict[str, _SharedContext] = {}

    async def run(self, task: Task) -> None:
        started = self.ports.clock.now()
        # Most tasks start within FRESH_FOR of their claim, its lease and lock still covering
        # their whole timeout: no coroutine made to find that out.
        if started - task.claimed_at >= FRESH_FOR:
            if not await self._still_ours(task, started):
                return
            started = self.ports.clock.now()
        real = self.ports.clock.monotonic()  # the duration is real time, whatever the wall says
        try:
            outcome = await self._run_handler(task, started)
        except asyncio.CancelledError:
            # Shutdown past its grace period: record the run as abandoned and give the
            # occurrence back (no advance), so it runs again after the restart.
            abandoned = Outcome(status=Status.ABANDONED, error=_error("Shutdown", "cancelled"))
            await asyncio.shield(self.finish(task, abandoned, started, started_real=real))
            raise
        await self._hand_over(task, outcome, started, started_real=real)

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

    async def _still_ours(self, task: Task, now: datetime) -> bool:
        """A task that waited in the queue renews its lease and lock, so that its whole timeout
        is covered; if another instance took the job over meanwhile, it does not run."""
        timeout = task.job.timeout_seconds
        until = now + timedelta(seconds=timeout + self.settings.lease_margin_seconds)
        try:
            renewed = await self._renew(task, until, now)
            if renewed:
                ttl = timeout + self.settings.lock_margin_seconds
                await self.ports.lock.extend(task.lock_key, task.lock_token, ttl)
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
            return await self.ports.store.renew_shard_lease(entry, token, until, now)
        return await self.ports.store.renew_lease(task.job.id, token, until)

    # -- the handler, its deadline and its retries ----------------------------------------------

    async def _run_handler(self, task: Task, started: datetime) -> Outcome:
        registered = self.registry.get(task.job.handler)
        if registered is None:
            self.observer.unknown_handler(task.job)
            message = f"no handler named {task.job.handler!r} is registered"
            return Outcome(status=Status.SKIPPED, error=_error("UnknownHandler", message))
        self.observer.started(task.job, task.execution, _waited(task, started))
        deadline = started + timedelta(seconds=task.job.timeout_seconds)
        return await self._attempts(task, registered.handler, deadline)

    async def _attempts(self, task: Task, handler: Handler, deadline: datetime) -> Outcome:
        # What the handler returns or raises passes through here only, on its way to the
        # execution record, its events, its logs and the job's last error: the job's own
        # secrets are masked in it, should the far end echo them back.
        # Most jobs have no params: nothing to look through, nor a coroutine to make for it.
        secrets = await self._secrets_of(task.job, handler) if task.job.params else []
        log: list[Attempt] = []
        while True:
            number = len(log) + 1
            began = self.ports.clock.now()
            context = self._context(task, handler, number, deadline)
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
            return Outcome(status=Status.TIMEOUT, error=_error("Timeout", "deadline reached"))
        future = self._start(handler, ctx)
        try:
            done = await _done_within(future, remaining)
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
        if raised is None and returned is None:  # most runs: nothing to weigh, mask or check
            return _SUCCEEDED
        weighed = returned if raised is None else str(raised)
        return await _off_the_loop_if_large(weighed, _outcome_of, returned, raised, secrets)

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
        self, task: Task, handler: Handler, attempt: int, deadline: datetime
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
            logger=logging.LoggerAdapter(self._handler_log(job.handler), {FIELDS: fields}),
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

    # -- after the handler ----------------------------------------------------------------------

    def ending(self) -> list[Task]:
        """The runs that are over but whose ends the store has not written yet: their leases
        must hold until it has (across a forward clock jump, the engine renews them), or this
        instance's own reaper abandons them and their occurrences run again."""
        return list(self._ending.values())

    def _ended(self, task: Task) -> None:
        self._ending.pop(id(task), None)

    async def finish(
        self, task: Task, outcome: Outcome, started: datetime, *, started_real: float | None = None
    ) -> None:
        """End the run and wait until its end is written (shutdown, skips, shards)."""
        execution, advance, end = self._end_of(task, outcome, started, started_real)
        self._ending[id(task)] = task
        try:
            ending = await self.finisher.finish(end, task.lock_token)
        finally:
            self._ended(task)
        self.tell_ended(task, execution, advance, ending)
        entry = task.shard_entry
        if entry is not None and ending.applied and execution.status is not Status.ABANDONED:
            await self._end_occurrence_if_last(task.job, entry)
        if entry is None and task.request is not None and execution.status is Status.ABANDONED:
            await self._give_request_back(task.request)

    async def _hand_over(
        self, task: Task, outcome: Outcome, started: datetime, *, started_real: float
    ) -> None:
        """A worker's run: its end goes with the next batch, and the worker to its next run;
        what became of the end is told once it is written. (Never abandoned here: a run the
        worker completed always has an outcome of its own.) A shard waits for its end: the
        last shard of an occurrence ends the occurrence once its own end is written."""
        if task.shard_entry is not None:
            await self.finish(task, outcome, started, started_real=started_real)
            return
        # Ended now: waiting for the store below is not the run's time. The rest of its end
        # (the record, the next fire time) is worked out with its batch, after the runs
        # waiting to start (Finisher.defer_to).
        finished = self.ports.clock.now()
        end = _LateEnd(self, task, outcome, started, finished, self._seconds(started_real))
        self._ending[id(task)] = task
        try:
            if not self.finisher.has_room():
                await self.finisher.room()
        finally:  # cancelled while the store is behind (shutdown): the end is still written
            self.finisher.hand_over_then(end.work_out, task.lock_token, end.tell)

    async def settled(self) -> None:
        """Wait until the end of every run handed over is written."""
        await self.finisher.settled()

    def _seconds(self, started_real: float) -> float:
        return self.ports.clock.monotonic() - started_real

    def _end_of(
        self, task: Task, outcome: Outcome, started: datetime, started_real: float | None
    ) -> tuple[Execution, Advance | None, Finish]:
        finished = self.ports.clock.now()
        if started_real is None:
            seconds = (finished - started).total_seconds()
        else:
            seconds = self._seconds(started_real)
        return self.end_at(task, outcome, started, finished, seconds)

    def end_at(
        self, task: Task, outcome: Outcome, started: datetime, finished: datetime, seconds: float
    ) -> tuple[Execution, Advance | None, Finish]:
        """The run's record once over, its job's advance and the end to write."""
        execution = task.execution.ended(
            status=outcome.status,
            started_at=started,
            finished_at=finished,
            duration_ms=round(seconds * 1000, 3),
            attempts=outcome.attempts,
            error=outcome.error,
            result=outcome.result,
            attempt_log=outcome.attempt_log,
        )
        entry = task.shard_entry
        # A shard's end leaves the job to its occurrence's last shard (scheduler/shards.py).
        advance = self._advance(task, execution) if entry is None else None
        # Dead letters and automatic re-drives: scheduler/dead_letters.py. A shard of a
        # scheduled occurrence re-runs nothing; one of a requested occurrence does.
        asked = task.request if entry is None or entry.advance_from is None else None
        end = finish_of(task.job, asked, execution, advance)
        if entry is not None:
            end = replace(end, shard=entry)
        elif task.request is not None and execution.status is not Status.ABANDONED:
            end = replace(end, request_id=task.request.id)  # it ran: off the queue
        return end.execution, advance, end

    def tell_ended(
        self, task: Task, execution: Execution, advance: Advance | None, ending: Ending
    ) -> None:
        if ending.error is not None:
            self.observer.not_recorded(task.job, execution, ending.error)
        elif not ending.applied:
            self.observer.fenced(task.job, execution, before_start=False)
        self.observer.finished(task.job, execution)
        if ending.applied and advance is not None and advance.paused_reason:
            self.observer.paused(task.job, advance.paused_reason)

    async def _end_occurrence_if_last(self, job: Job, entry: RunRequest) -> None:
        """Read after this shard's end was written, so that of two last shards ending at once,
        at least one sees every shard ended; both may end the occurrence, fenced: it ends once.
        Should this fail, the occurrence's lease expires and the occurrence runs again."""
        assert entry.occurrence is not None
        try:
            entries = await self.ports.store.occurrence_shards(job.id, entry.occurrence)
            if not all_ended(entries):
                return
            advance = self._occurrence_advance(job, entry, outcome(entries))
            ended = await self.ports.store.end_occurrence(job.id, entry.occurrence, advance)
        except StoreError as exc:
            log_event(log, "occurrence.not_ended", level=logging.ERROR, error=str(exc))
            return
        if ended and advance.paused_reason:
            self.observer.paused(job, advance.paused_reason)

    def _occurrence_advance(
        self, job: Job, entry: RunRequest, summary: ExecutionSummary
    ) -> Advance:
        """As for one run of the job as it was claimed (its revision and next fire time then,
        which its entries keep: `job` was read when this shard was). Entries queued by an older
        tickd keep no time: fenced by the revision alone."""
        claimed = replace(job, revision=entry.revision)
        if entry.advance_from is None:
            return keep_schedule(claimed, summary)
        if entry.claimed_next_run_at is not None:
            claimed = replace(claimed, next_run_at=entry.claimed_next_run_at)
        plan = Plan(run_at=entry.scheduled_at, advance_from=entry.advance_from)
        advance = advance_after(
            claimed,
            plan,
            summary,
            breaker_threshold=self.settings.circuit_breaker_failures,
            rng=self.rng,
        )
        if entry.claimed_next_run_at is None:
            return replace(advance, claimed_next_run_at=None)
        return advance

    async def _give_request_back(self, request: RunRequest) -> None:
        """A requested run that never got to run (a shutdown) is asked for again, as a
        scheduled one's occurrence is given back. Its request stays queued while it runs
        (Store.claim_run_requests), so this queues it again only if an older tickd took it off
        at its claim: the same id, so giving it back twice queues it once."""
        try:
            await self.ports.store.insert_run_requests([request])
        except StoreError as exc:
            log_event(log, "run.request_not_given_back", level=logging.ERROR, error=str(exc))

    def _advance(self, task: Task, execution: Execution) -> Advance | None:
        if execution.status is Status.ABANDONED:
            return None
        summary = execution.summary()
        if task.request is not None:
            return keep_schedule(task.job, summary)
        return advance_after(
            task.job,
            task.plan,
            summary,
            breaker_threshold=self.settings.circuit_breaker_failures,
            rng=self.rng,
        )


class _LateEnd:
    """A run's end, timed when its handler returned, worked out when its batch is written."""

    def __init__(
        self,
        runner: Runner,
        task: Task,
        outcome: Outcome,
        started: datetime,
        finished: datetime,
        seconds: float,
    ) -> None:
        self._runner, self._task, self._outcome = runner, task, outcome
        self._started, self._finished, self._seconds = started, finished, seconds
        self._execution: Execution | None = None
        self._advance: Advance | None = None

    def work_out(self) -> Finish:
        try:
            self._execution, self._advance, end = self._runner.end_at(
                self._task, self._outcome, self._started, self._finished, self._seconds
            )
        except BaseException:  # never written (see Finisher.hand_over_then)
            self._runner._ended(self._task)
            raise
        return end

    def tell(self, ending: Ending) -> None:
        assert self._execution is not None  # told only of an end worked out
        self._runner._ended(self._task)
        self._runner.tell_ended(self._task, self._execution, self._advance, ending)


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
            budget -= len(item) + 2  # its quotes: ten million empty strings are not nothing
        elif isinstance(item, Mapping | list | tuple | set):
            # Brackets and a separator per item, counted before the items are: so one that
            # holds itself, or holds millions, ends the count without being copied.
            budget -= 2 + len(item)
            if budget < 0:
                return False
            pending += [*item.keys(), *item.values()] if isinstance(item, Mapping) else item
        else:
            budget -= 32  # a number, a date, an object: its text is short
        if budget < 0:
            return False
    return True


class HandlerExit(Exception):
    """A handler raised SystemExit, KeyboardInterrupt or GeneratorExit: in its task they
    would stop the event loop, and the daemon with it. The run fails instead."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(raised)
        self.raised = raised


async def _call_async(handler: Handler, ctx: HandlerContext) -> Result:
    with TasksEndingWithTheRun(ctx.job_name):
        # Known to be async (Runner._is_async); a callable that lied fails the run with a
        # TypeError.
        value = cast(Awaitable[Result], handler(ctx))
        try:
            return await value
        except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
            raise HandlerExit(exc) from None


def _is_async_callable(func: object) -> bool:
    return inspect.iscoroutinefunction(getattr(func, "__call__", None))  # noqa: B004


_TOO_LARGE = (
    f"the result holds more than {MAX_RESULT_CHARS:,} characters of JSON (the limit): return a "
    "summary and keep the data elsewhere"
)


def _outcome_of(returned: object, raised: BaseException | None, secrets: list[str]) -> Outcome:
    if isinstance(raised, HandlerExit):
        raised = raised.raised
    if raised is not None and not isinstance(raised, Exception):
        # SystemExit and the like, from a coroutine (see HandlerExit) or a thread.
        message = (
            f"the handler raised {type(raised).__name__}({str(raised)!r}): tickd does not stop "
            "for a handler; raise an exception to fail a run"
        )
        return Outcome(status=Status.FAILED, error=_error(type(raised).__name__, message, secrets))
    if raised is not None:
        where = _traceback_of(raised, secrets)
        error = _error(type(raised).__name__, str(raised), secrets, traceback=where)
        return Outcome(status=Status.FAILED, error=error)
    return _checked_result(returned, secrets)


def _checked_result(value: object, secrets: list[str]) -> Outcome:
    if value is not None and not isinstance(value, dict):
        message = f"a handler returns a dict or None, not {type(value).__name__}"
        return Outcome(status=Status.FAILED, error=_error("BadResult", message))
    if value is None:
        return Outcome(status=Status.SUCCESS)
    if not _smaller_than(value, MAX_RESULT_BYTES):
        problem = _too_large_or_cyclic(value, MAX_RESULT_CHARS)
        if problem is not None:
            return Outcome(status=Status.FAILED, error=problem)
    try:
        safe: dict[str, Any] = json.loads(json.dumps(mask(value), default=str))
    except (TypeError, ValueError, RecursionError) as exc:  # keys not strings, a cycle...
        message = f"a handler's result must be JSON: {type(exc).__name__}: {exc}"
        return Outcome(status=Status.FAILED, error=_error("BadResult", message))
    size = len(json.dumps(safe))
    if size > MAX_RESULT_BYTES:
        return Outcome(status=Status.SUCCESS, result={"truncated": True, "size_bytes": size})
    return Outcome(status=Status.SUCCESS, result=scrub_values(safe, secrets))


def _too_large_or_cyclic(value: object, budget: int) -> ExecutionError | None:
    """Walks the result depth first, at most `budget` characters of it, before anything copies
    or serialises it: a container met again on its own path is a cycle (no JSON holds it), and
    one that runs past the budget is too large."""
    on_path: set[int] = set()
    pending: list[tuple[object, bool]] = [(value, False)]
    while pending:
        item, leaving = pending.pop()
        if leaving:
            on_path.discard(id(item))
        elif isinstance(item, str | bytes):
            budget -= len(item) + 2
        elif isinstance(item, Mapping | list | tuple | set):
            if id(item) in on_path:
                return _error("BadResult", "a handler's result must be JSON: it holds itself")
            budget -= 2 + len(item)
            if budget < 0:
                break
            on_path.add(id(item))
            pending.append((item, True))
            children = [*item.keys(), *item.values()] if isinstance(item, Mapping) else item
            pending += [(child, False) for child in children]
        else:
            budget -= 32
        if budget < 0:
            break
    return _error("ResultTooLarge", _TOO_LARGE) if budget < 0 else None


def _error(
    kind: str, message: str, secrets: Collection[str] = (), *, traceback: str | None = None
) -> ExecutionError:
    # Masked whole before it is cut, so that no secret is left half shown at the cut.
    masked: str = scrub_values(scrub_text(message), secrets)
    return ExecutionError(type=kind, message=masked[:MAX_ERROR_CHARS], traceback=traceback)


def _traceback_of(raised: BaseException, secrets: Collection[str]) -> str:
    """Where the handler raised, masked like its message, then cut to its last
    MAX_TRACEBACK_CHARS: the innermost frames, where it raised, come last."""
    text = "".join(format_exception(raised))
    masked: str = scrub_values(scrub_text(text), secrets)
    return masked[-MAX_TRACEBACK_CHARS:]


def _waited(task: Task, started: datetime) -> float:
    """How long after it could start the run's handler started: after its occurrence was due,
    or for a requested run (a trigger, retry, backfill, re-drive), after its request allowed."""
    could_start = task.execution.scheduled_at
    if task.execution.requested is not None and task.request is not None:
        could_start = task.request.not_before
    return (started - could_start).total_seconds()
