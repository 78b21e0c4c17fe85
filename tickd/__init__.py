"""tickd, a job-scheduling daemon. What a handler plug-in imports is here:

    from tickd import HandlerContext, Result, handler

    @handler(params_schema={"type": "object", "properties": {"url": {"type": "string"}}})
    async def ping(ctx: HandlerContext) -> Result:
        ...

Everything else under `tickd` is internal: `tickd.scheduler` (the core), `tickd.handlers` (the
built-in handlers), `tickd.api` (the REST API and the dashboard), `tickd.seed` (system and demo
jobs), and the composition root (`tickd.app`, `tickd.cli`, `tickd.daemon`), which wires them.
"""

from tickd.scheduler.handler_api import (
    MASK,
    AddressNotAllowed,
    Clock,
    CronSchedule,
    DestinationPolicy,
    Handler,
    HandlerContext,
    HandlerFunc,
    IntervalSchedule,
    InvalidParams,
    Mailer,
    MailError,
    OnceSchedule,
    ParamsCheck,
    Priority,
    Resource,
    ResourceEnv,
    Result,
    SystemJob,
    failure_reason,
    handler,
    is_loopback,
    is_secret_name,
    mask,
    read_prefix,
    request_refusal,
    scrub_text,
)

__all__ = [
    "MASK",
    "AddressNotAllowed",
    "Clock",
    "CronSchedule",
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
    "failure_reason",
    "handler",
    "is_loopback",
    "is_secret_name",
    "mask",
    "read_prefix",
    "request_refusal",
    "scrub_text",
]
