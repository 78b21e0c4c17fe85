"""The composition root: settings -> backends -> resources -> engine, API and seeds.

The only module that knows every layer. The daemon, `tickd api`, the tests and the benchmarks all
build through these functions, so what they run is what the daemon runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from aiohttp import web

from tickd.api.app import create_app
from tickd.api.mail_health import MailHealth, WatchedMailer
from tickd.api.v1 import ApiState
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.catalogue_walk import settings as walk_settings
from tickd.handlers.product_store import PRODUCTS
from tickd.scheduler.config.settings import ConfigError, Settings
from tickd.scheduler.config.sources import did_you_mean
from tickd.scheduler.dispatcher import Engine
from tickd.scheduler.events import open_publisher
from tickd.scheduler.jobspec import JobRules
from tickd.scheduler.lock import open_lock
from tickd.scheduler.logs import log_event
from tickd.scheduler.mail import open_mailer
from tickd.scheduler.maintenance.objectives import LagObjectives
from tickd.scheduler.maintenance.retention import Housekeeper
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.api import Resource, ResourceEnv
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import EventPublisher, Lock, Ports
from tickd.scheduler.ports.clock import Clock, SystemClock
from tickd.scheduler.secrets.masking import scrub_text
from tickd.scheduler.store import open_store
from tickd.scheduler.store.kit import StartupAborted, open_patiently
from tickd.seed.demo import demo_jobs
from tickd.seed.demo_products import demo_scan_job, seed_demo_products
from tickd.seed.jobs import seed_jobs
from tickd.seed.system import system_jobs

Resources = Mapping[str, object]
T = TypeVar("T")
log = logging.getLogger("tickd.daemon")


def load_registry() -> HandlerRegistry:
    """Every handler installed under the `tickd.handlers` entry points."""
    registry = HandlerRegistry()
    registry.load_entry_points()
    return registry


@contextlib.asynccontextmanager
async def opened_ports(
    settings: Settings,
    metrics: Metrics,
    *,
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
    lock: Lock | None = None,
    events: EventPublisher | None = None,
) -> AsyncIterator[Ports]:
    """Open every backend the settings name (or use the lock and publisher given); close them
    all, in reverse, on the way out. The store is opened patiently: it may come up after us."""
    async with contextlib.AsyncExitStack() as stack:
        with cannot_open("store_url", settings.store_url):
            store = await open_patiently(
                lambda: open_store(settings.store_url, partitions=settings.partitions), stop
            )
        stack.push_async_callback(store.close)
        if lock is None:
            with cannot_open("lock_url", settings.lock_url):
                lock = open_lock(settings.lock_url)
            stack.push_async_callback(lock.close)
        if events is None:
            with cannot_open("events_url", settings.events_url):
                events = open_publisher(settings.events_url, metrics=metrics)
            stack.push_async_callback(events.close, settings.events_flush_seconds)
        with cannot_open("mail_url", settings.mail_url):
            mailer = open_mailer(settings.mail_url)
        stack.push_async_callback(mailer.close)
        yield Ports(
            store=store, lock=lock, events=events, mailer=mailer, clock=clock or SystemClock()
        )


@dataclasses.dataclass(frozen=True)
class HandlerSettings:
    """What one of tickd's own handlers reads from `[handler_settings.<name>]`: the names, and
    a check of the table that raises ValueError naming the setting at fault. An opt-in
    feature's system job is seeded, and its settings checked in the log, only once its table
    is configured (or the demo runs it)."""

    names: frozenset[str] = frozenset()
    check: Callable[[Mapping[str, Any]], object] | None = None
    opt_in: bool = False


# The settings tickd's own handlers take. A plug-in's handler declares none here: its table is
# handed to it as written (it reads what it documents).
OWN_HANDLER_SETTINGS: Mapping[str, HandlerSettings] = {
    "alert_scanner": HandlerSettings(
        frozenset(f.name for f in dataclasses.fields(EmailSettings)),
        EmailSettings.parse,
        opt_in=True,
    ),
    "catalogue_walk": HandlerSettings(
        frozenset(walk_settings.PARAMS["properties"]), walk_settings.check_config
    ),
    "http_check": HandlerSettings(),
    "noop": HandlerSettings(),
    "sleep": HandlerSettings(),
    "webhook": HandlerSettings(),
}
# Settings that are tables by handler name.
BY_HANDLER = (
    "handler_settings",
    "handler_concurrency",
    "retention_days_by_handler",
    "retention_max_executions_by_handler",
)


def check_against_handlers(settings: Settings, registry: HandlerRegistry) -> None:
    """What the settings say of handlers and resources, against those installed: a table for a
    handler that is not there, a resource no handler declares, a setting a handler does not
    take, or one it would refuse at every run stops startup (ConfigError) rather than being
    ignored or failing later."""
    handlers = {registered.name for registered in registry}
    for setting in BY_HANDLER:
        for name in getattr(settings, setting):
            if name not in handlers:
                raise ConfigError(
                    f"{setting}.{name}",
                    "no such handler is installed" + did_you_mean(name, handlers),
                )
    resources = {resource.name for resource in declared_resources(registry)}
    for name in settings.resource_urls:
        if name not in resources:
            raise ConfigError(
                f"resource_urls.{name}",
                "no installed handler uses such a resource" + did_you_mean(name, resources),
            )
    for name, table in settings.handler_settings.items():
        if name in OWN_HANDLER_SETTINGS:
            _check_handler_table(name, table, OWN_HANDLER_SETTINGS[name])


def _check_handler_table(name: str, table: Mapping[str, Any], own: HandlerSettings) -> None:
    for key in sorted(table):
        if key not in own.names:
            takes = did_you_mean(key, own.names) if own.names else " (it takes none)"
            raise ConfigError(f"handler_settings.{name}.{key}", f"not a setting of {name}{takes}")
    if own.check is None:
        return
    try:
        own.check(table)
    except ValueError as exc:
        # The handlers' messages read "<setting>: <what it must be>", never the value.
        setting, _, reason = str(exc).partition(": ")
        raise ConfigError(setting, reason) from None


def api_resources(registry: HandlerRegistry) -> list[Resource[Any]]:
    """What `tickd api` (no dispatcher, so no handler runs) opens: the product store, when the
    alert scanner is installed, for its emails' unsubscribe links and bounces."""
    return [r for r in declared_resources(registry) if r.name == PRODUCTS.name]


def log_alert_email_settings(registry: HandlerRegistry, settings: Settings) -> None:
    """Say at boot what the alert emails will lack: unsubscribe links need two settings."""
    if "alert_scanner" not in registry or "alert_scanner" in unused_features(settings):
        return
    try:
        email = EmailSettings.parse(settings.handler_settings.get("alert_scanner", {}))
    except ValueError as exc:
        log_event(log, "alert_emails.misconfigured", error=str(exc))
        return
    missing = email.missing_for_unsubscribe()
    if missing:
        log_event(
            log,
            "alert_emails.no_unsubscribe",
            reason="alert emails carry no unsubscribe link nor List-Unsubscribe header",
            missing=missing,
        )


def unused_features(settings: Settings) -> frozenset[str]:
    """The opt-in handlers this daemon has no settings table for; the demo uses them all."""
    if settings.seed_demo:
        return frozenset()
    return frozenset(
        name
        for name, own in OWN_HANDLER_SETTINGS.items()
        if own.opt_in and name not in settings.handler_settings
    )


def opened(resources: Resources, declared: Resource[T]) -> T | None:
    """The opened resource, typed as declared; None when it was not opened here."""
    found = resources.get(declared.name)
    return None if found is None else cast(T, found)


def declared_resources(registry: HandlerRegistry) -> list[Resource[Any]]:
    """Each resource the registered handlers declare, once."""
    found: dict[str, Resource[Any]] = {}
    for registered in registry:
        for resource in registered.handler.resources:
            found.setdefault(resource.name, resource)
    return list(found.values())


@contextlib.asynccontextmanager
async def opened_resources(
    resources: list[Resource[Any]], settings: Settings, stop: asyncio.Event | None = None
) -> AsyncIterator[Resources]:
    """Open each resource once, for every handler that uses it; close them in reverse."""
    env = ResourceEnv(store_url=settings.store_url, urls=settings.resource_urls, stop=stop)
    async with contextlib.AsyncExitStack() as stack:
        opened = {}
        for resource in resources:
            setting = f"resource_urls.{resource.name}"
            with cannot_open(
                setting if resource.name in env.urls else "store_url", env.url(resource.name)
            ):
                opened[resource.name] = await stack.enter_async_context(resource.open(env))
        yield opened


@contextlib.contextmanager
def cannot_open(setting: str, url: str) -> Iterator[None]:
    """A backend that cannot be opened at startup (a file that is not a database, a path that
    cannot be read, a URL its driver refuses) stops the daemon with one line naming the URL,
    its password masked, and why: a ConfigError. Being told to stop while waiting for it is not
    an error."""
    try:
        yield
    except (StartupAborted, ConfigError):
        raise
    except Exception as exc:  # the store's StoreError, or whatever a driver raises
        raise ConfigError(setting, f"cannot open {scrub_text(url)}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(scrub_text(str(exc) or type(exc).__name__).split())


def build_engine(
    settings: Settings,
    ports: Ports,
    registry: HandlerRegistry,
    *,
    metrics: Metrics,
    resources: Resources,
    rng: random.Random | None = None,
    observers: Sequence[RunObserver] = (),
) -> Engine:
    """The engine, its runs announced to the metrics, events and logs, and to `observers`. Its
    mailer remembers how the last sends went, for /readyz."""
    return Engine(
        settings=settings,
        ports=dataclasses.replace(ports, mailer=WatchedMailer(ports.mailer, ports.clock)),
        registry=registry,
        metrics=metrics,
        resources=resources,
        rng=rng,
        observers=observers,
    )


def build_api(
    settings: Settings,
    registry: HandlerRegistry,
    ports: Ports,
    metrics: Metrics,
    engine: Engine | None,
    *,
    dispatch: bool = True,
    resources: Resources | None = None,
) -> web.Application:
    """The REST API on these ports. With an engine, the API wakes it and reports its health,
    and unless `dispatch` is False (tests drain it themselves) its dispatcher starts and stops
    with the application. With the product store among `resources`, it answers the alert
    emails' unsubscribe links and lists their bounces."""
    store = ports.store
    state = ApiState(
        jobs=store,
        requests=store,
        executions=store,
        cancels=store,
        views=store,
        domains=store,
        housekeeping=store,
        instances=store,
        registry=registry,
        settings=settings,
        clock=ports.clock,
        metrics=metrics,
        wake=engine.wake if engine else None,
        dispatcher_health=(lambda: (engine.healthy, engine.last_error)) if engine else None,
        relay_state=engine.relay.state if engine else None,
        mail_health=mail_health_of(engine),
        products=opened(resources or {}, PRODUCTS),
    )
    app = create_app(state, probes={"store": ports.store.ping, "lock": ports.lock.ping})
    if engine is not None and dispatch:
        app.cleanup_ctx.append(dispatching(engine))
        # The events the store writes with the executions (the outbox), to the publisher.
        # What the relay has not sent at shutdown stays in the store, to go out after a restart.
        app.cleanup_ctx.append(running_beside("relay", engine.relay.run))
        # A handler that blocks the event loop is noticed, and named
        # (scheduler/maintenance/watchdog.py).
        app.cleanup_ctx.append(running_beside("watchdog", engine.watchdog.run))
        # Retention and the dead-letter gauge, on their own slow timer beside the dispatcher.
        housekeeper = Housekeeper(settings, ports.store, ports.clock, metrics)
        app.cleanup_ctx.append(running_beside("housekeeper", housekeeper.run))
        # Each domain's fire-lag objective, for the alert on a domain's lag.
        objectives = LagObjectives(ports.store, metrics)
        app.cleanup_ctx.append(running_beside("lag-objectives", objectives.run))
    return app


def mail_health_of(engine: Engine | None) -> Callable[[], MailHealth] | None:
    mailer = engine.ports.mailer if engine else None
    return mailer.health if isinstance(mailer, WatchedMailer) else None


def running_beside(
    name: str,
    run: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
    on_end: Callable[[asyncio.Task[None]], None] | None = None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A task that starts with the application and, told to stop, ends with it, gracefully."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(run(stop), name=name)
        if on_end is not None:
            task.add_done_callback(on_end)
        yield
        stop.set()
        await task

    return context


def dispatching(engine: Engine) -> Callable[[web.Application], AsyncIterator[None]]:
    """The dispatcher: if it dies, the daemon stops (see _dispatcher_ended)."""
    return running_beside("dispatcher", engine.run, _dispatcher_ended)


def _dispatcher_ended(task: asyncio.Task[None]) -> None:
    """The dispatcher only ends when asked to; if it dies, no job runs any more: fail loudly."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("dispatcher.died", exc_info=task.exception())
        signal.raise_signal(signal.SIGTERM)  # stop the daemon; its supervisor restarts it


async def seed_at_boot(
    ports: Ports, registry: HandlerRegistry, settings: Settings, resources: Resources
) -> None:
    """System jobs always (an opt-in feature's once it is configured); with `seed_demo`, the
    demo jobs and, where the alert scanner runs, the demo product data it scans. A seeded job
    that fails the checks raises SeedError."""
    now = ports.clock.now()
    rules = JobRules(registry, settings)  # a seeded job is checked as the API checks one
    system = system_jobs(
        rules, now, settings.handler_settings, when_configured=unused_features(settings)
    )
    await seed_jobs(ports.store, system)
    if not settings.seed_demo:
        return
    await seed_jobs(ports.store, demo_jobs(rules, now))
    products = opened(resources, PRODUCTS)
    if "alert_scanner" in registry and products is not None:
        await seed_demo_products(products)
        await seed_jobs(ports.store, [demo_scan_job(rules, now)])
