"""Shared fixtures: a fake clock, stores over every backend, and an engine wired for drain mode.

Every test that needs a real service is marked for it here, from the fixtures and backends it
uses (see `service_markers`), so `make quick` can leave them out with `-m "not services"`.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from _pytest.mark.expression import Expression
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from pymongo import MongoClient
from pymongo.errors import PyMongoError
from redis import Redis
from redis.exceptions import RedisError

from tests.fixtures.services import MONGODB_URL, POSTGRESQL_URL, REDIS_URL, service_missing
from tests.fixtures.times import T0 as T0
from tickd.app import build_engine
from tickd.handlers.product_store import PRODUCTS, ProductStore, open_product_store
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.dispatcher import Engine
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Execution, IntervalSchedule, Job, Schedule
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.api import Handler, HandlerFunc
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import CloudEvent, Lock, Ports, Store
from tickd.scheduler.ports.clock import FakeClock

# One module of fixtures per port, each parametrised over that port's backends.
pytest_plugins = [
    "tests.fixtures.stores",
    "tests.fixtures.locks",
    "tests.fixtures.events",
    "tests.fixtures.products",
    "tests.fixtures.servers",
]

# A fixture in a test's closure that talks to a real service, and the marker that says which.
SERVICE_FIXTURES = {
    "postgresql_database": "postgresql",
    "redis_admin": "redis",
    "redis_lock": "redis",
    "kafka_admin": "kafka",
    "kafka_topic": "kafka",
    "kafka_publisher": "kafka",
    "browser": "browser",
    "page": "browser",
}
# A parametrised fixture whose backend is chosen per test: (fixture, backend) -> marker. Its
# backends are fetched by name at run time, so they are not in the closure.
SERVICE_BACKENDS = {
    ("store", "mongodb"): "mongodb",
    ("store", "postgresql"): "postgresql",
    ("product_db", "mongodb"): "mongodb",
    ("lock", "redis"): "redis",
    ("publisher", "kafka"): "kafka",
}
SERVICE_MARKERS = ("mongodb", "postgresql", "redis", "kafka", "browser")
# Every test in these folders drives a real service.
SERVICE_FOLDERS = {"ui": "browser"}
TESTS = Path(__file__).parent
# Service-free but end to end, and slow: left out of `make quick`, run by `make test`.
SLOW_MODULES = {
    TESTS / "api" / "test_cli.py",  # the `tickd` command in a subprocess, against a real port
    TESTS / "api" / "test_schemathesis.py",  # the whole API fuzzed over HTTP
    TESTS / "test_container_plugins.py",  # the image's install steps, wheels built from PyPI
    TESTS / "test_packaging.py",  # a wheel built and installed in a fresh environment
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in service_markers(item):
            item.add_marker(marker)
        if any(item.get_closest_marker(name) for name in (*SERVICE_MARKERS, "system")):
            item.add_marker("services")
        if starts_the_daemon(item) or item.path in SLOW_MODULES:
            item.add_marker("slow")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leaves a slow module unimported when `-m` leaves its tests out: importing
    test_schemathesis alone costs each xdist worker some 15 s of CPU."""
    if collection_path in SLOW_MODULES and not selects_slow_tests(config):
        return True
    return None


def selects_slow_tests(config: pytest.Config) -> bool:
    markexpr: str = config.getoption("markexpr")
    return not markexpr or Expression.compile(markexpr).evaluate(marked_slow_only)


def marked_slow_only(name: str, /, **kwargs: str | int | bool | None) -> bool:
    return name == "slow"


def starts_the_daemon(item: pytest.Item) -> bool:
    """Whether the test's module holds the launcher of a real `tickd run` process (from
    tests/test_daemon.py): such tests take seconds each, starting and stopping it."""
    launcher = getattr(getattr(item, "module", None), "start_daemon", None)
    return getattr(launcher, "__module__", None) == "tests.test_daemon"


def service_markers(item: pytest.Item) -> set[str]:
    fixtures: list[str] = getattr(item, "fixturenames", [])
    callspec = getattr(item, "callspec", None)
    params: dict[str, object] = callspec.params if callspec is not None else {}
    found = {SERVICE_FIXTURES[name] for name in fixtures if name in SERVICE_FIXTURES}
    found |= {
        marker
        for (fixture, backend), marker in SERVICE_BACKENDS.items()
        if params.get(fixture) == backend
    }
    found |= {
        marker
        for folder, marker in SERVICE_FOLDERS.items()
        if item.path.is_relative_to(TESTS / folder)
    }
    return found


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skips (or fails, in CI) a test whose service is down, asking each service only once per
    session: a missing server otherwise costs every test its whole connect timeout."""
    for name in SERVICE_MARKERS:
        if item.get_closest_marker(name) is not None:
            reason = service_probe(item.config, name)
            if reason is not None:
                service_missing(reason)


_PROBED = pytest.StashKey[dict[str, str | None]]()


def service_probe(config: pytest.Config, service: str) -> str | None:
    """Why `service` cannot be used, or None when it answers; probed once per session."""
    probed = config.stash.setdefault(_PROBED, {})
    if service not in probed:
        probed[service] = PROBES[service]()
    return probed[service]


def mongodb_missing() -> str | None:
    client: MongoClient[dict[str, Any]] = MongoClient(MONGODB_URL, serverSelectionTimeoutMS=2_000)
    try:
        client.admin.command("ping")
    except PyMongoError as exc:
        return f"no MongoDB-compatible server at {MONGODB_URL} ({type(exc).__name__})"
    finally:
        client.close()
    return None


def postgresql_missing() -> str | None:
    async def ping() -> None:
        db = await asyncpg.connect(POSTGRESQL_URL, timeout=2)
        await db.close()

    try:
        asyncio.run(ping())
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return f"no PostgreSQL server at {POSTGRESQL_URL} ({type(exc).__name__})"
    return None


def redis_missing() -> str | None:
    client = Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=2)
    try:
        client.ping()
    except (RedisError, OSError) as exc:
        return f"Redis is not reachable at {REDIS_URL}: {exc}"
    finally:
        client.close()
    return None


def kafka_missing() -> str | None:
    # Imported here: a module of pytest_plugins imported by this file before pytest registers
    # it would miss assertion rewriting.
    from tests.fixtures.events import KAFKA_BOOTSTRAP

    try:
        AdminClient({"bootstrap.servers": KAFKA_BOOTSTRAP}).list_topics(timeout=3)
    except KafkaException as exc:
        return f"Kafka is not reachable at {KAFKA_BOOTSTRAP}: {exc}"
    return None


def browser_missing() -> str | None:
    if shutil.which("chromium") is None:
        return "no chromium on PATH (apt-get install chromium; `make test` does)"
    return None


PROBES: dict[str, Callable[[], str | None]] = {
    "mongodb": mongodb_missing,
    "postgresql": postgresql_missing,
    "redis": redis_missing,
    "kafka": kafka_missing,
    "browser": browser_missing,
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


class RecordingObserver(RunObserver):
    """Hears a run's life as the engine announces it: (hook, job name, status or detail)."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, str]] = []

    def of(self, job_name: str) -> list[tuple[str, str]]:
        return [(hook, detail) for hook, name, detail in self.heard if name == job_name]

    def recorded(self, job: Job, execution: Execution) -> None:
        self.heard.append(("recorded", job.name, str(execution.status)))

    def started(self, job: Job, execution: Execution, lag_seconds: float) -> None:
        self.heard.append(("started", job.name, f"lag={lag_seconds:g}"))

    def retrying(
        self, job: Job, execution: Execution, attempt: int, delay_seconds: float, error: str | None
    ) -> None:
        self.heard.append(("retrying", job.name, f"attempt={attempt}"))

    def stuck(self, job: Job) -> None:
        self.heard.append(("stuck", job.name, job.handler))

    def fenced(self, job: Job, execution: Execution, *, before_start: bool) -> None:
        self.heard.append(("fenced", job.name, "before start" if before_start else "at the end"))

    def stopped(self) -> None:
        self.heard.append(("stopped", "", ""))

    def finished(self, job: Job, execution: Execution) -> None:
        self.heard.append(("finished", job.name, str(execution.status)))

    def reaped(self, execution: Execution) -> None:
        self.heard.append(("reaped", execution.job_name, str(execution.status)))


class RecordingPublisher:
    """Keeps the events it is handed, for assertions on what the engine publishes."""

    keeps_events = True

    def __init__(self) -> None:
        self.events: list[CloudEvent] = []

    def publish(self, event: CloudEvent) -> None:
        self.events.append(event)

    async def publish_confirmed(
        self, events: Sequence[CloudEvent], *, timeout_seconds: float
    ) -> list[bool]:
        self.events.extend(events)
        return [True] * len(events)

    def types(self, job_id: str | None = None) -> list[str]:
        return [e["type"] for e in self.events if job_id is None or e["subject"] == job_id]

    async def close(self, timeout_seconds: float) -> None:
        return None


@dataclass
class Harness:
    """An engine on a store, a lock bound to the fake clock, and a recording publisher."""

    engine: Engine
    clock: FakeClock
    store: Store
    events: RecordingPublisher
    registry: HandlerRegistry
    settings: Settings
    products: ProductStore
    observed: RecordingObserver
    extra: dict[str, Any] = field(default_factory=dict)

    async def add(self, job: Job) -> Job:
        await self.store.insert_job(job)
        return job


EngineFactory = Callable[..., Harness]


@pytest.fixture
async def make_engine(
    store: Store, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[EngineFactory]:
    built: list[Engine] = []
    products = open_product_store(f"sqlite:///{tmp_path}/products.db")
    await products.open()

    def build(
        handlers: dict[str, Handler | HandlerFunc] | None = None,
        *,
        lock: Lock | None = None,
        instance_id: str = "test-instance",
        own_clock: FakeClock | None = None,
        resources: Mapping[str, object] | None = None,
        **overrides: Any,
    ) -> Harness:
        registry = HandlerRegistry()
        for name, func in (handlers or {}).items():
            registry.register(name, func)
        overrides.setdefault("shutdown_grace_seconds", 0.5)
        settings = Settings(instance_id=instance_id, api_port=0, **overrides)
        events = RecordingPublisher()
        observed = RecordingObserver()
        ports = Ports(
            store=store,
            lock=lock or MemoryLock(monotonic=lambda: clock.now().timestamp()),
            events=events,
            mailer=OutboxMailer(tmp_path / "outbox"),
            clock=own_clock or clock,  # another instance's clock (tests/test_clock_skew.py)
        )
        engine = build_engine(
            settings,
            ports,
            registry,
            metrics=Metrics(),
            resources={PRODUCTS.name: products, **(resources or {})},
            observers=[observed],
        )
        built.append(engine)
        return Harness(
            engine, own_clock or clock, store, events, registry, settings, products, observed
        )

    yield build
    for engine in built:
        await engine.shutdown()
    await products.close()


def make_job(
    name: str = "job",
    handler: str = "noop",
    *,
    schedule: Schedule | None = None,
    next_run_at: datetime | None = T0,
    **fields: Any,
) -> Job:
    return Job(
        name=name,
        handler=handler,
        schedule=schedule or IntervalSchedule(every_seconds=60),
        next_run_at=next_run_at,
        created_at=T0,
        updated_at=T0,
        **fields,
    )
