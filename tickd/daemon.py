"""The daemon: open ports and resources, seed, serve the API, run the engine until told to stop."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from aiohttp import web

from tickd.api.listener import GuardedSite, ServerLimits, running
from tickd.app import (
    Resources,
    api_resources,
    build_api,
    build_engine,
    declared_resources,
    log_alert_email_settings,
    opened_ports,
    opened_resources,
    seed_at_boot,
)
from tickd.scheduler.config import ConfigError, Settings
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.ports import Ports
from tickd.scheduler.registry import HandlerRegistry
from tickd.scheduler.secrets import scrub_text
from tickd.scheduler.store_kit import StartupAborted
from tickd.scheduler.urls import is_loopback

log = logging.getLogger("tickd.daemon")


async def run_daemon(
    settings: Settings, stop: asyncio.Event, registry: HandlerRegistry, *, dispatcher: bool = True
) -> None:
    """Serve the API and, unless `dispatcher` is False (`tickd api`), run the engine, until
    `stop` is set. One process, one port: /v1, /metrics, /healthz, /readyz."""
    check_exposure(settings)
    log_event(
        log,
        "daemon.starting",
        instance=settings.instance_id,
        dispatcher=dispatcher,
        store=scrub_text(settings.store_url),
        lock=scrub_text(settings.lock_url),
        events=scrub_text(settings.events_url),
        handlers=[r.name for r in registry],
    )
    metrics = Metrics()
    log_alert_email_settings(registry, settings)
    # `tickd api` runs no handler: it opens only what the API itself serves from.
    resources = declared_resources(registry) if dispatcher else api_resources(registry)
    try:
        async with (
            opened_ports(settings, metrics, stop=stop) as ports,
            opened_resources(resources, settings, stop) as opened,
        ):
            await _serve_on(ports, opened, settings, stop, registry, metrics, dispatcher=dispatcher)
    except StartupAborted:
        log_event(log, "daemon.stopped_before_start", instance=settings.instance_id)
        return
    log_event(log, "daemon.stopped", instance=settings.instance_id)


async def _serve_on(
    ports: Ports,
    resources: Resources,
    settings: Settings,
    stop: asyncio.Event,
    registry: HandlerRegistry,
    metrics: Metrics,
    *,
    dispatcher: bool,
) -> None:
    engine = None
    if dispatcher:
        engine = build_engine(settings, ports, registry, metrics=metrics, resources=resources)
        await seed_at_boot(ports, registry, settings, resources)
    app = build_api(settings, registry, ports, metrics, engine, resources=resources)
    # What is loaded by now (modules, the app, the handlers) lives as long as the daemon: out of
    # the collector's sight (the garbage of startup collected first), a full collection no
    # longer walks it. Measured in a burst, each took about 40 ms (the loop stalled meanwhile),
    # 5 us a run all told.
    gc.collect()
    gc.freeze()
    await serve(app, settings, stop)


def check_exposure(settings: Settings) -> None:
    """Without tokens anyone who reaches the port may change jobs: loopback only, then."""
    if settings.api_port and not settings.api_tokens and not is_loopback(settings.api_host):
        raise ConfigError(
            "api_host",
            f"{settings.api_host} is reachable from elsewhere and no api_tokens are configured: "
            'set TICKD_API_TOKENS="name:scope:token" (scope read, write or admin; a random '
            "token of 32 characters or more, e.g. from `openssl rand -base64 32`), or listen on "
            "loopback only (TICKD_API_HOST=127.0.0.1)",
        )


async def serve(
    app: web.Application,
    settings: Settings,
    stop: asyncio.Event,
    limits: ServerLimits | None = None,
) -> None:
    limits = limits or ServerLimits()
    async with running(app, limits) as runner:
        if settings.api_port:
            await GuardedSite(runner, settings.api_host, settings.api_port, limits).start()
            url = f"http://{settings.api_host}:{settings.api_port}"
            log_event(log, "api.listening", url=url, docs=f"{url}/docs")
        await stop.wait()


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGHUP too: a closed terminal or a supervisor's reload sends it, and its default action
    kills the process mid-run, leaving its executions `running` until their leases lapse."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, _request_stop, stop, sig)


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    log_event(log, "daemon.stopping", signal=sig.name)
    stop.set()
