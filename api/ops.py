"""Operations endpoints: /healthz (alive), /readyz (store and lock reachable), /metrics."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler.engine import Engine

ENGINE = web.AppKey("engine", Engine)
# A readiness probe must answer quickly even when a backend hangs.
PROBE_TIMEOUT_SECONDS = 2.0


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    problems = {}
    for name, probe in (("store", engine.ports.store.ping), ("lock", engine.ports.lock.ping)):
        try:
            await asyncio.wait_for(probe(), timeout=PROBE_TIMEOUT_SECONDS)
        except Exception as exc:
            problems[name] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if not engine.healthy and engine.last_error:
        problems["dispatcher"] = engine.last_error
    status = 503 if problems else 200
    return web.json_response({"ready": not problems, "problems": problems}, status=status)


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[ENGINE].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_ops_app(engine: Engine) -> web.Application:
    app = web.Application()
    app[ENGINE] = engine
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
