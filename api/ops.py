"""Operations endpoints: /healthz (alive), /readyz (store and lock reachable), /metrics, and the
API's own description: /openapi.json and /docs."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tickd.api.models import EventRelay, Health, MailDelivery, Readiness
from tickd.api.routing import Call, Reply, Route, Routes
from tickd.api.v1 import state

# A readiness probe must answer quickly even when a backend hangs.
PROBE_TIMEOUT_SECONDS = 2.0
DOCUMENT = web.AppKey("openapi", dict)
Probe = Callable[[], Awaitable[None]]
PROBES = web.AppKey("probes", dict)


async def healthz(call: Call[None, None]) -> Reply:
    return Reply(Health(status="ok"))


async def readyz(call: Call[None, None]) -> Reply:
    problems = {}
    probes: dict[str, Probe] = call.request.app[PROBES]
    for name, probe in probes.items():
        try:
            await asyncio.wait_for(probe(), timeout=PROBE_TIMEOUT_SECONDS)
        except Exception as exc:
            problems[name] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    health = state(call).dispatcher_health
    if health is not None:
        healthy, error = health()
        if not healthy and error:
            problems["dispatcher"] = error
    relay = state(call).relay_state
    events = None if relay is None else EventRelay(**dataclasses.asdict(relay()))
    mail_health = state(call).mail_health
    mail = None if mail_health is None else MailDelivery(**dataclasses.asdict(mail_health()))
    readiness = Readiness(ready=not problems, problems=problems, events=events, mail=mail)
    return Reply(readiness, 503 if problems else 200)


async def metrics(call: Call[None, None]) -> web.Response:
    body = generate_latest(state(call).metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi_json(call: Call[None, None]) -> web.Response:
    return web.json_response(call.request.app[DOCUMENT])


async def docs(call: Call[None, None]) -> web.Response:
    from tickd.api.openapi import docs_page

    return web.Response(text=docs_page(call.request.app[DOCUMENT]), content_type="text/html")


OPS_ROUTES: Routes = [
    Route("GET", "/healthz", healthz, "The process is alive", None, Health, tag="operations"),
    Route(
        "GET",
        "/readyz",
        readyz,
        "Store, lock and dispatcher are usable (503 with the reasons otherwise)",
        None,
        Readiness,
        tag="operations",
    ),
    Route("GET", "/metrics", metrics, "Prometheus metrics", None, None, tag="operations", raw=True),
    Route(
        "GET",
        "/openapi.json",
        openapi_json,
        "This API's OpenAPI 3.1 document",
        None,
        None,
        tag="operations",
        raw=True,
    ),
    Route(
        "GET",
        "/docs",
        docs,
        "A page listing the operations",
        None,
        None,
        tag="operations",
        raw=True,
    ),
]
