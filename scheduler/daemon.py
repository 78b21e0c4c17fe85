"""The daemon: open the ports, seed, serve /metrics, run the engine until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import signal
from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar

from aiohttp import web

from scheduler.backoff import backoff_delay
from scheduler.clock import Clock, SystemClock
from scheduler.config import ConfigError, Settings
from scheduler.engine import Engine
from scheduler.events import open_publisher
from scheduler.lock import open_lock
from scheduler.logs import log_event
from scheduler.mail import open_mailer
from scheduler.metrics import Metrics
from scheduler.ports import Ports, StoreError
from scheduler.product import open_product_store
from scheduler.registry import HandlerRegistry
from scheduler.secrets import scrub_text
from scheduler.store import open_store
from seed.demo import demo_jobs
from seed.demo_products import demo_scan_job, seed_demo_products
from seed.jobs import seed_jobs
from seed.system import system_jobs

log = logging.getLogger("tickd.daemon")


@contextlib.asynccontextmanager
async def opened_ports(
    settings: Settings,
    metrics: Metrics,
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
) -> AsyncIterator[Ports]:
    """Open every backend the settings name; close them all, in reverse, on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        store = await open_patiently(lambda: open_store(settings.store_url), stop)
        stack.push_async_callback(store.close)
        lock = open_lock(settings.lock_url)
        stack.push_async_callback(lock.close)
        events = open_publisher(settings.events_url, metrics=metrics)
        stack.push_async_callback(events.close, settings.events_flush_seconds)
        mailer = open_mailer(settings.mail_url)
        stack.push_async_callback(mailer.close)
        products = await open_patiently(lambda: open_product_store(settings.store_url), stop)
        stack.push_async_callback(products.close)
        yield Ports(
            store=store,
            lock=lock,
            events=events,
            mailer=mailer,
            clock=clock or SystemClock(),
            products=products,
        )


class StartupAborted(Exception):
    """Told to stop while still waiting for the store at startup."""


class Openable(Protocol):
    async def open(self) -> None: ...


Backend = TypeVar("Backend", bound=Openable)


async def open_patiently(make: Callable[[], Backend], stop: asyncio.Event | None) -> Backend:
    """A store that is down at startup delays the daemon, it does not kill it: retry with
    backoff (orchestrators start the database and tickd in any order, and FerretDB drops a
    connection now and then while two instances create the same collections). Bad settings,
    which no retry cures, still stop startup at once."""
    for attempt in itertools.count(1):
        backend = make()
        try:
            await backend.open()
            return backend
        except StoreError as exc:
            if not exc.transient and attempt > 1:
                raise
            delay = backoff_delay(attempt, base=1.0, cap=30.0)
            log_event(
                log,
                "store.unavailable",
                level=logging.ERROR,
                error=scrub_text(str(exc)),
                retry_in_seconds=delay,
            )
            if stop is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                if stop.is_set():
                    raise StartupAborted from exc
            else:
                await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def load_registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.load_entry_points()
    return registry


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
    try:
        async with opened_ports(settings, metrics, stop=stop) as ports:
            await _serve_on(ports, settings, stop, registry, metrics, dispatcher=dispatcher)
    except StartupAborted:
        log_event(log, "daemon.stopped_before_start", instance=settings.instance_id)
        return
    log_event(log, "daemon.stopped", instance=settings.instance_id)


async def _serve_on(
    ports: Ports,
    settings: Settings,
    stop: asyncio.Event,
    registry: HandlerRegistry,
    metrics: Metrics,
    *,
    dispatcher: bool,
) -> None:
    engine = None
    if dispatcher:
        engine = Engine(settings=settings, ports=ports, registry=registry, metrics=metrics)
        await seed_at_boot(ports, registry, settings)
    app = api_app(settings, registry, ports, metrics, engine)
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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def seed_at_boot(ports: Ports, registry: HandlerRegistry, settings: Settings) -> None:
    now = ports.clock.now()
    await seed_jobs(ports.store, system_jobs(registry, now, settings.handler_settings))
    if settings.seed_demo:
        await seed_jobs(ports.store, demo_jobs(now))
        if "alert_scanner" in registry:
            await seed_demo_products(ports.products)
            await seed_jobs(ports.store, [demo_scan_job(now)])


def api_app(
    settings: Settings,
    registry: HandlerRegistry,
    ports: Ports,
    metrics: Metrics,
    engine: Engine | None,
) -> web.Application:
    from api.app import create_app
    from api.v1 import ApiState

    state = ApiState(
        store=ports.store,
        registry=registry,
        settings=settings,
        clock=ports.clock,
        metrics=metrics,
        wake=engine.wake if engine else None,
        dispatcher_health=(lambda: (engine.healthy, engine.last_error)) if engine else None,
    )
    app = create_app(state, probes={"store": ports.store.ping, "lock": ports.lock.ping})
    if engine is not None:
        app.cleanup_ctx.append(dispatching(engine))
    return app


def dispatching(engine: Engine) -> Callable[[web.Application], AsyncIterator[None]]:
    """The dispatcher starts with the application and stops with it, gracefully."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(engine.run(stop), name="dispatcher")
        task.add_done_callback(_dispatcher_ended)
        yield
        stop.set()
        await task

    return context


def _dispatcher_ended(task: asyncio.Task[None]) -> None:
    """The dispatcher only ends when asked to; if it dies, no job runs any more: fail loudly."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("dispatcher.died", exc_info=task.exception())
        signal.raise_signal(signal.SIGTERM)  # stop the daemon; its supervisor restarts it


async def serve(app: web.Application, settings: Settings, stop: asyncio.Event) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()  # starts the cleanup contexts: the dispatcher runs from here
    try:
        if settings.api_port:
            await web.TCPSite(runner, settings.api_host, settings.api_port).start()
            url = f"http://{settings.api_host}:{settings.api_port}"
            log_event(log, "api.listening", url=url, docs=f"{url}/docs")
        await stop.wait()
    finally:
        await runner.cleanup()


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _request_stop, stop, sig)


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    log_event(log, "daemon.stopping", signal=sig.name)
    stop.set()
