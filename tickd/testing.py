"""Test a handler without a daemon: what a plug-in's tests import.

    from tickd.testing import handler_context, run_handler

    async def test_greets_by_name() -> None:
        run = await run_handler(greet, params={"name": "Ada"})
        assert run.result == {"greeting": "Hello, Ada"}

`run_handler` runs a handler once as the daemon would: its params checked against its params
schema and its own `check_params` first (InvalidParams naming the param, as the API refuses a
job), then one attempt under its timeout, and what it returned or raised checked, masked and cut
as an execution records it (a result that is not JSON fails the run with `BadResult`). It gives
the status, the result or the error, the lines the handler logged and how long it took.
`handler_context` is the context alone, for a handler called by hand; `installed_handler(name)`
the handler the daemon finds under `name`, once the plug-in is installed. Both use throwaway
backends: mail into a temporary outbox folder, a FakeClock standing still, the SSRF-safe `http`
session (`http_allow=["127.0.0.1"]` reaches a test server on loopback).

Install tickd with your tests' tools: `pip install tickd pytest pytest-asyncio`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.jobspec import JobRules
from tickd.scheduler.logs import FIELDS
from tickd.scheduler.model import ExecutionError, Status, ValidationError
from tickd.scheduler.plugin.api import Handler, HandlerContext, HandlerFunc, InvalidParams, Result
from tickd.scheduler.plugin.http import DEFAULT_PORTS
from tickd.scheduler.plugin.outcomes import HandlerExit, execution_error, outcome_of
from tickd.scheduler.plugin.registry import HandlerRegistry, Registered
from tickd.scheduler.plugin.testing import handler_context
from tickd.scheduler.secrets.echoes import EchoMaskingLogger
from tickd.scheduler.secrets.masking import scrub_text, secret_values, with_settings_secrets

__all__ = [
    "HandlerRun",
    "InvalidParams",
    "Registered",
    "check_params",
    "handler_context",
    "installed_handler",
    "run_handler",
]


@dataclass(frozen=True, kw_only=True)
class HandlerRun:
    """One run of a handler, as its execution would record it."""

    status: Status  # success, failed or timeout
    result: dict[str, Any] | None
    error: ExecutionError | None  # its type, message and traceback, masked
    logs: list[str]  # "LEVEL message", each line its run's secrets masked
    duration_seconds: float

    @property
    def succeeded(self) -> bool:
        return self.status is Status.SUCCESS


def installed_handler(name: str) -> Registered:
    """The handler installed under `name` as the daemon finds it (the `tickd.handlers` entry
    points), with the distribution it came from (`origin`); LookupError when none is."""
    registry = HandlerRegistry()
    registry.load_entry_points()
    registered = registry.get(name)
    if registered is None:
        known = ", ".join(r.name for r in registry) or "none"
        raise LookupError(f"no handler named {name!r} is installed (installed: {known})")
    return registered


def check_params(
    target: Handler | HandlerFunc,
    params: Mapping[str, Any],
    *,
    name: str | None = None,
    http_allow: Collection[str] = (),
    http_ports: Collection[int] = DEFAULT_PORTS,
) -> None:
    """The params refused as the API refuses a job's: against the handler's params schema,
    then its own `check_params` under the HTTP policy given. Raises InvalidParams naming the
    param (`params.url`)."""
    handler_name = name or _name_of(target)
    registry = HandlerRegistry()
    registry.register(handler_name, target)
    settings = Settings(http_allow=tuple(http_allow), http_allowed_ports=tuple(http_ports))
    try:
        JobRules(registry, settings).check_handler(handler_name, params)
    except InvalidParams:
        raise
    except ValidationError as exc:
        raise InvalidParams(exc.field, exc.reason) from None


async def run_handler(
    target: Handler | HandlerFunc,
    *,
    params: Mapping[str, Any] | None = None,
    name: str | None = None,
    timeout_seconds: float = 60.0,
    http_allow: Collection[str] = (),
    http_ports: Collection[int] = DEFAULT_PORTS,
    config: Mapping[str, Any] | None = None,
    resources: Mapping[Any, object] | None = None,
    **context: Any,
) -> HandlerRun:
    """Runs `target` once, as the daemon runs an attempt; InvalidParams, before it runs, for
    params its schema or checks refuse. `name` is the handler's name (its logger's, the job's);
    `context` goes on to `handler_context` (`scheduled_at`, `attempt`, `shard`, `shards`...)."""
    handler = target if isinstance(target, Handler) else Handler(func=target)
    handler_name = name or _name_of(target)
    given = dict(params or {})
    check_params(handler, given, name=handler_name, http_allow=http_allow, http_ports=http_ports)
    settings = dict(config or {})
    secrets = with_settings_secrets(
        secret_values(given, handler.secret_params), settings, handler.secret_params
    )
    async with handler_context(
        params=given,
        job_name=handler_name,
        timeout_seconds=timeout_seconds,
        http_allow=http_allow,
        http_ports=http_ports,
        config=settings,
        resources=resources,
        **context,
    ) as ctx:
        logger = logging.getLogger(f"tickd.handler.{handler_name}")
        fields = {"job": ctx.job_name, "attempt": ctx.attempt}
        ctx = dataclasses.replace(ctx, logger=EchoMaskingLogger(logger, {FIELDS: fields}, secrets))
        with _lines_logged(logger) as logs:
            started = time.perf_counter()
            status, returned, raised = await _attempt(handler, ctx, timeout_seconds)
            duration = time.perf_counter() - started
    if status is Status.TIMEOUT:
        error = execution_error("Timeout", f"still running after {timeout_seconds:g} s")
        return HandlerRun(
            status=status, result=None, error=error, logs=logs, duration_seconds=duration
        )
    outcome = outcome_of(returned, raised, secrets)
    return HandlerRun(
        status=outcome.status,
        result=outcome.result,
        error=outcome.error,
        logs=logs,
        duration_seconds=duration,
    )


async def _attempt(
    handler: Handler, ctx: HandlerContext, timeout_seconds: float
) -> tuple[Status, object, BaseException | None]:
    """What one attempt returned or raised, within `timeout_seconds` of real time."""
    try:
        returned = await asyncio.wait_for(_called(handler, ctx), timeout_seconds)
    except TimeoutError:
        return Status.TIMEOUT, None, None
    except Exception as exc:  # HandlerExit included: outcome_of reads it
        return Status.FAILED, None, exc
    return Status.SUCCESS, returned, None


async def _called(handler: Handler, ctx: HandlerContext) -> Result:
    func = handler.func
    if not (inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)):
        return await _on_a_thread_of_its_own(handler, ctx)
    try:
        return await cast(Awaitable[Result], handler(ctx))
    except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
        raise HandlerExit(exc) from None


def _on_a_thread_of_its_own(handler: Handler, ctx: HandlerContext) -> asyncio.Future[Result]:
    """A plain function on a thread of its own, as in the daemon: a daemon thread, so that one
    still running past its timeout is left to finish on its own and keeps no process alive."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Result] = loop.create_future()

    def settle(value: Result, raised: BaseException | None) -> None:
        if future.done():  # given up on at its timeout
            return
        if raised is None:
            future.set_result(value)
        else:
            future.set_exception(raised)

    def work() -> None:
        value: Result = None
        raised: BaseException | None = None
        try:
            value = _sync_call(handler, ctx)
        except BaseException as exc:  # whatever it raised goes to the run's outcome
            raised = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, value, raised)

    threading.Thread(target=work, name=f"tickd-handler-{ctx.job_name}", daemon=True).start()
    return future


def _sync_call(handler: Handler, ctx: HandlerContext) -> Result:
    try:
        return cast(Result, handler(ctx))
    except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
        raise HandlerExit(exc) from None


@contextmanager
def _lines_logged(logger: logging.Logger) -> Iterator[list[str]]:
    """Every line `logger` takes while the block runs, DEBUG up, as "LEVEL message"."""
    lines: list[str] = []
    collector = _Collector(lines)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(collector)
    try:
        yield lines
    finally:
        logger.removeHandler(collector)
        logger.setLevel(level)


class _Collector(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        # Masked as the daemon's log formatters mask every line (credentials in text).
        self.lines.append(f"{record.levelname} {scrub_text(record.getMessage())}")


def _name_of(target: Handler | HandlerFunc) -> str:
    func = target.func if isinstance(target, Handler) else target
    return str(getattr(func, "__name__", type(func).__name__))
