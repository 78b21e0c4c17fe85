"""What a handler plug-in sees of tickd, exported as `tickd` itself: the only module of the core a
handler should import.

A handler is a callable taking a HandlerContext and returning a small dict (the execution's
result) or None. Async handlers run on the event loop and must await now and then so that their
deadline can cancel them; plain functions run in a thread of their own.

    from tickd import HandlerContext, handler

    @handler(params_schema={"type": "object", "properties": {"url": {"type": "string"}}})
    async def ping(ctx: HandlerContext) -> dict[str, object]:
        ...

and, in the plug-in's pyproject.toml:

    [project.entry-points."tickd.handlers"]
    ping = "my_package.module:ping"
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

import aiohttp

from tickd.scheduler.codec import schedule_from_doc
from tickd.scheduler.model import (
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    Priority,
    Schedule,
    ValidationError,
)
from tickd.scheduler.plugin.http import (
    AddressNotAllowed,
    DestinationPolicy,
    endpoint_key,
    failure_reason,
    read_prefix,
    request_refusal,
)
from tickd.scheduler.ports.backends import Mailer, MailError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.secrets.masking import MASK, is_secret_name, mask, scrub_text
from tickd.scheduler.urls import is_loopback

# What handlers may use besides the context: the HTTP guard's error, policy and helpers, and
# masking.
__all__ = [
    "MASK",
    "AddressNotAllowed",
    "Clock",
    "CronSchedule",
    "DefaultKey",
    "DestinationPolicy",
    "Handler",
    "HandlerContext",
    "HandlerFunc",
    "IntervalSchedule",
    "InvalidParams",
    "MailError",
    "Mailer",
    "OnceSchedule",
    "ParamsCheck",
    "Priority",
    "Resource",
    "ResourceEnv",
    "Result",
    "SystemJob",
    "endpoint_key",
    "failure_reason",
    "handler",
    "is_loopback",
    "is_secret_name",
    "mask",
    "read_prefix",
    "request_refusal",
    "scrub_text",
]

Result = dict[str, Any] | None
HandlerFunc = Callable[["HandlerContext"], Awaitable[Result]] | Callable[["HandlerContext"], Result]
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ResourceEnv:
    """What the daemon tells a resource as it opens it."""

    # Where tickd keeps its jobs: a resource may keep its own data in the same database.
    store_url: str
    # [resource_urls] of the configuration (TICKD_RESOURCE_URLS__<NAME>), by resource name.
    urls: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Set when the daemon is told to stop while a resource is still opening (a patient open
    # should give up then).
    stop: asyncio.Event | None = None

    def url(self, name: str) -> str:
        """The URL configured for the resource `name`, else the store's."""
        return self.urls.get(name) or self.store_url


@dataclass(frozen=True, eq=False)
class Resource(Generic[T]):
    """A client or store that handlers share (a database, an API client): the daemon opens it
    once, before the first run of any handler that declares it, hands it to those handlers'
    runs (`ctx.resource(THE_RESOURCE)`), and closes it on shutdown. Declare it once, in the
    package that owns it, and name it in `@handler(resources=...)`:

        PRODUCTS = Resource("products", open=opened_product_store)

    `open` takes the ResourceEnv and returns an async context manager: entered at startup,
    exited at shutdown."""

    name: str
    open: Callable[[ResourceEnv], AbstractAsyncContextManager[T]] = field(repr=False)


# Params checks beyond the schema, with the daemon's HTTP policy for handlers that take URLs.
ParamsCheck = Callable[[Mapping[str, Any], DestinationPolicy], None]
# A job's default concurrency key from its params (endpoint_key, for handlers that call a URL).
DefaultKey = Callable[[Mapping[str, Any]], str | None]


class InvalidParams(ValidationError):
    """A job's params are refused: `field` names the param (`params.url`), `reason` says why
    without quoting the value (it may be a secret)."""


@dataclass(frozen=True, kw_only=True)
class SystemJob:
    """A standing job a handler needs, seeded at every boot under the handler's name if absent
    (then it belongs to ops). It is checked as a job created over the API is (handler params
    against the schema and `check_params`, timeout, schedule): one that fails stops startup.

        SystemJob(schedule=IntervalSchedule(every_seconds=86_400), timeout_seconds=600)
    """

    schedule: Schedule
    timeout_seconds: float = 60.0
    max_retries: int = 0
    priority: Priority = Priority.NORMAL
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, declared: Mapping[str, Any]) -> SystemJob:
        """The dict form plug-ins wrote before SystemJob existed: `{"schedule": {"kind":
        "interval", "every_seconds": 86400}, "timeout_seconds": 600, ...}`."""
        unknown = sorted(set(declared) - _SYSTEM_JOB_FIELDS)
        if unknown:
            raise ValidationError(f"system_job.{unknown[0]}", "not a field of a system job")
        if "schedule" not in declared:
            raise ValidationError("system_job.schedule", "missing")
        return cls(
            schedule=schedule_from_doc(dict(declared["schedule"])),
            timeout_seconds=float(declared.get("timeout_seconds", 60.0)),
            max_retries=int(declared.get("max_retries", 0)),
            priority=Priority.parse(declared.get("priority", Priority.NORMAL)),
            params=dict(declared.get("params", {})),
        )


_SYSTEM_JOB_FIELDS = {"schedule", "timeout_seconds", "max_retries", "priority", "params"}


@dataclass(frozen=True, kw_only=True)
class HandlerContext:
    job_id: str
    job_name: str
    params: Mapping[str, Any]
    # The occurrence this run is for (not when it started: that is later by the fire lag).
    scheduled_at: datetime
    # 1 for the first attempt; retries of the same occurrence count on.
    attempt: int
    # The run is cancelled at this instant; sync handlers should check `remaining_seconds()`.
    deadline: datetime
    # Stable across the attempts of one occurrence: use it to make side effects happen once.
    idempotency_key: str
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    clock: Clock
    mailer: Mailer
    # One session for every handler, SSRF-safe: see scheduler/plugin/http.py. Do not close it.
    http: aiohttp.ClientSession
    # This handler's own settings from the daemon's configuration ([handler_settings.<name>]),
    # e.g. a vendor's API key that ops keep out of job params. May hold secrets: never log it.
    config: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # The opened resources this handler declared, by name: read them with `resource()`.
    resources: Mapping[str, object] = field(default_factory=dict, repr=False)
    # Which shard of its occurrence this run is (0 to shards - 1), of how many: a job with
    # `shards: N` runs each occurrence as N runs, each doing its own part of the work.
    shard: int = 0
    shards: int = 1

    def remaining_seconds(self) -> float:
        return max(0.0, (self.deadline - self.clock.now()).total_seconds())

    def resource(self, declared: Resource[T]) -> T:
        """The opened resource; KeyError names it if the handler did not declare it."""
        if declared.name not in self.resources:
            raise KeyError(f"resource {declared.name!r} was not declared by this handler")
        return cast(T, self.resources[declared.name])


@dataclass(frozen=True, kw_only=True)
class Handler:
    """A handler function and what tickd should know about it."""

    func: HandlerFunc
    # JSON Schema of the job's params, checked when a job is created or changed.
    params_schema: Mapping[str, Any] | None = None
    # Param names whose values are never shown (besides anything named like a secret).
    secret_params: frozenset[str] = field(default_factory=frozenset)
    # At most this many runs of this handler at once across the pool (None: no limit).
    max_concurrency: int | None = None
    # A standing job seeded at every boot under the handler's name, if absent (see SystemJob).
    system_job: SystemJob | None = None
    # Settings of [handler_settings.<name>] without which the system job is not seeded (a
    # vendor's URL and key): until ops configure them, there is nothing it could do.
    system_job_needs: frozenset[str] = field(default_factory=frozenset)
    # The resources its runs use, opened by the daemon (see Resource).
    resources: tuple[Resource[Any], ...] = ()
    # Run when a job is created or changed, after the schema: raise InvalidParams for params
    # that pass the schema but could never work (a destination the HTTP policy refuses...).
    check_params: ParamsCheck | None = None
    # The concurrency key of a job that names none, from its params (None: no key), with the
    # default_concurrency_limit setting as its limit: webhook and http_check give the host they
    # call (endpoint_key), so one slow host cannot hold every worker.
    default_key: DefaultKey | None = None

    def __call__(self, ctx: HandlerContext) -> Awaitable[Result] | Result:
        return self.func(ctx)


def handler(
    *,
    params_schema: Mapping[str, Any] | None = None,
    secret_params: frozenset[str] | set[str] = frozenset(),
    max_concurrency: int | None = None,
    system_job: SystemJob | Mapping[str, Any] | None = None,
    system_job_needs: frozenset[str] | set[str] = frozenset(),
    resources: tuple[Resource[Any], ...] = (),
    check_params: ParamsCheck | None = None,
    default_key: DefaultKey | None = None,
) -> Callable[[HandlerFunc], Handler]:
    """Declare a handler's params schema and checks, secret params, concurrency limit, system
    job, the resources it uses and its jobs' default concurrency key. A system job given as a
    dict (the form before SystemJob) is read into one here, so a malformed one fails where it
    is declared."""
    declared_job = (
        SystemJob.from_dict(system_job) if isinstance(system_job, Mapping) else system_job
    )

    def wrap(func: HandlerFunc) -> Handler:
        return Handler(
            func=func,
            params_schema=params_schema,
            secret_params=frozenset(secret_params),
            max_concurrency=max_concurrency,
            system_job=declared_job,
            system_job_needs=frozenset(system_job_needs),
            resources=tuple(resources),
            check_params=check_params,
            default_key=default_key,
        )

    return wrap
