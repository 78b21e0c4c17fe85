"""The daemon: open the ports, seed, serve /metrics, run the engine until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator

from aiohttp import web

from scheduler.clock import Clock, SystemClock
from scheduler.config import Settings
from scheduler.engine import Engine
from scheduler.events import open_publisher
from scheduler.lock import open_lock
from scheduler.logs import log_event
from scheduler.mail import open_mailer
from scheduler.metrics import Metrics
from scheduler.ports import Ports
from scheduler.registry import HandlerRegistry
from scheduler.secrets import scrub_text
from scheduler.store import open_store
from seed.demo import demo_jobs
from seed.jobs import seed_jobs
from seed.system import system_jobs

log = logging.getLogger("tickd.daemon")


@contextlib.asynccontextmanager
async def opened_ports(
    settings: Settings, metrics: Metrics, clock: Clock | None = None
) -> AsyncIterator[Ports]:
    """Open every backend the settings name; close them all, in reverse, on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        store = open_store(settings.store_url)
        await store.open()
        stack.push_async_callback(store.close)
        lock = open_lock(settings.lock_url)
        stack.push_async_callback(lock.close)
        events = open_publisher(settings.events_url, metrics=metrics)
        stack.push_async_callback(events.close, settings.events_flush_seconds)
        mailer = open_mailer(settings.mail_url)
        stack.push_async_callback(mailer.close)
        yield Ports(
            store=store, lock=lock, events=events, mailer=mailer, clock=clock or SystemClock()
        )


def load_registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.load_entry_points()
    return registry


async def run_daemon(settings: Settings, stop: asyncio.Event, registry: HandlerRegistry) -> None:
    log_event(
        log,
        "daemon.starting",
        instance=settings.instance_id,
        store=scrub_text(settings.store_url),
        lock=scrub_text(settings.lock_url),
        events=scrub_text(settings.events_url),
        handlers=[r.name for r in registry],
    )
    metrics = Metrics()
    async with opened_ports(settings, metrics) as ports:
        engine = Engine(settings=settings, ports=ports, registry=registry, metrics=metrics)
        now = ports.clock.now()
        await seed_jobs(ports.store, system_jobs(registry, now))
        if settings.seed_demo:
            await seed_jobs(ports.store, demo_jobs(now))
        async with serving_ops(engine, settings):
            await engine.run(stop)
    log_event(log, "daemon.stopped", instance=settings.instance_id)


@contextlib.asynccontextmanager
async def serving_ops(engine: Engine, settings: Settings) -> AsyncIterator[None]:
    if not settings.metrics_port:
        yield
        return
    from api.ops import create_ops_app

    runner = web.AppRunner(create_ops_app(engine), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.metrics_host, settings.metrics_port).start()
        log_event(
            log, "ops.listening", url=f"http://{settings.metrics_host}:{settings.metrics_port}"
        )
        yield
    finally:
        await runner.cleanup()


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _request_stop, stop, sig)


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    log_event(log, "daemon.stopping", signal=sig.name)
    stop.set()
