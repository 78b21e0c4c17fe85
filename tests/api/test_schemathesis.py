"""Schemathesis over /openapi.json: every operation, generated requests (examples, coverage and
fuzzing phases; valid and invalid data), each response checked against the document with every
built-in check: no server error, status codes documented, bodies and headers valid, content types
as declared, auth enforced, invalid data refused, unsupported methods answered 405.

The API runs on a real port in a thread of its own (its own event loop), on SQLite, with the
built-in handlers and tokens configured; requests carry the admin token. Jobs and executions are
seeded, and path parameters take their ids most of the time, so that the operations on one job or
one execution reach their logic instead of answering 404 (the domain the examples name has
settings stored); positive job bodies mostly get a real handler, valid params and a cron
expression that parses (`realistic`), so that creates succeed.

Hand-written cases follow: inputs that once made the server fail (an Authorization header that
is not UTF-8, JSON nested a thousand levels deep), sent as they are and checked the same way.

The document is built at import, by the code the server serves it with, so that each operation
is a test of its own (schemathesis's lazy fixture loader fails on pytest 9.2, whose nodes have
no `_nodeid`); the first test checks that the served /openapi.json is that document.

What is narrowed, and why:
- `positive_data_acceptance` fails any refusal of a schema-valid request, but some rules cannot
  be written in JSON Schema (a cron expression that parses, params that pass the handler's own
  schema, a cursor the API gave out, a window that ends after it starts...). A refusal is let
  through when every field its problem names is one of those, with the status listed in
  SEMANTIC_REFUSALS; any other refusal of valid data still fails.
- A number beyond 64 bits (an integer past 2**63, a float past a double) is refused with a 400
  anywhere in a body: no store keeps it, and free-form values (`params`) have no schema that
  could say so. So is a NUL character in any string but the params (api/routing.py), with a 400
  (in the URL) or a 422 (in a body) naming its field: no store keeps one, and the document does
  not repeat it for every string.
- A request line over aiohttp's limit is refused by its HTTP parser, before any operation runs,
  with a text/plain 400 that the document does not describe: such cases are not checked.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
import threading
import urllib.request
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import hypothesis
import pytest
import schemathesis
from aiohttp import web
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tickd.api.app import ALL_ROUTES
from tickd.api.openapi import openapi_document
from tickd.api.routing import NUL_REASON
from tickd.app import build_api
from tickd.handlers.http_check import http_check
from tickd.handlers.noop import noop
from tickd.handlers.product_store import PRODUCTS, ProductStore, open_product_store
from tickd.handlers.sleep import sleep
from tickd.handlers.webhook import webhook
from tickd.scheduler.config.api_tokens import ApiToken
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.events.log import NullPublisher
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import (
    CronSchedule,
    Execution,
    ExecutionError,
    IntervalSchedule,
    Job,
    OnceSchedule,
    Status,
    new_id,
)
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import Ports, Store
from tickd.scheduler.ports.clock import SystemClock
from tickd.scheduler.store import open_store

T = TypeVar("T")
ADMIN = "admin-Vb3rX9qLm2TzK7wPy4Hc8NdJf6Gs1Ra5"
TOKENS = (
    ApiToken(name="viewer", scope="read", token="read-Kd83nQzW1xLp5RvT9mYc2HbF7gJs4Ae6"),
    ApiToken(name="root", scope="admin", token=ADMIN),
)
AUTH = {"Authorization": f"Bearer {ADMIN}"}
# Per operation (fuzzing phase); the examples and coverage phases add their own cases.
MAX_EXAMPLES = 50
# How often a path parameter takes a seeded id rather than a generated one.
KNOWN_ID_PROBABILITY = 0.8
MAX_TIMEOUT_SECONDS = 3600
# aiohttp's limit (max_line_size).
MAX_REQUEST_LINE = 8190


# -- seed data ------------------------------------------------------------------------------------

NOW = datetime.now(UTC).replace(microsecond=0)
EVERY_MINUTE = IntervalSchedule(every_seconds=60)
SEED_JOBS = {
    job.id: job
    for job in [
        Job(name="seed-noop", handler="noop", schedule=EVERY_MINUTE, next_run_at=NOW),
        Job(
            name="seed-sleep",
            handler="sleep",
            schedule=CronSchedule(expr="0 30 2 * * *", timezone="Europe/Berlin"),
            params={"seconds": 0.1},
            next_run_at=NOW + timedelta(hours=3),
            max_retries=2,
            jitter_seconds=5,
        ),
        Job(
            name="seed-check",
            handler="http_check",
            schedule=EVERY_MINUTE,
            params={"url": "https://example.com/health", "headers": {"Authorization": "x"}},
            enabled=False,
            paused_reason="paused by root",
        ),
        Job(
            name="seed-webhook",
            handler="webhook",
            schedule=OnceSchedule(at=NOW + timedelta(days=1)),
            params={"url": "https://example.com/hook", "secret_headers": {"X-Key": "k"}},
            next_run_at=NOW + timedelta(days=1),
        ),
        Job(
            name="seed-system",
            handler="noop",
            schedule=CronSchedule(expr="H H * * * *"),
            next_run_at=NOW + timedelta(minutes=30),
            system=True,
        ),
    ]
}


def executions_of(job: Job, statuses: list[Status]) -> list[Execution]:
    runs = []
    for hours, status in enumerate(statuses, start=1):
        at = NOW - timedelta(hours=hours)
        finished = None if status is Status.RUNNING else at + timedelta(seconds=2)
        runs.append(
            Execution(
                job_id=job.id,
                job_name=job.name,
                handler=job.handler,
                scheduled_at=at,
                status=status,
                started_at=at,
                finished_at=finished,
                duration_ms=2000.0 if finished else None,
                attempts=1,
                error=ExecutionError(type="RuntimeError", message="no")
                if status.is_failure
                else None,
                result={"ok": True} if status is Status.SUCCESS else None,
                owner="test-instance" if status is Status.RUNNING else None,
                token=1 if status is Status.RUNNING else None,
            )
        )
    return runs


_first, _second = list(SEED_JOBS.values())[:2]
# Every status, and the executions of a job deleted since (a retry of those is a 409).
_gone = replace(_second, id=new_id(), name="seed-gone")
SEED_EXECUTIONS = {
    e.id: e
    for e in executions_of(_first, list(Status))
    + executions_of(_gone, [Status.FAILED, Status.SUCCESS])
}

# Settings stored for the domain the document's examples name, so that its delete finds them.
SEED_DOMAIN = DomainSettings(name="payments", weight=3, max_running=10, updated_at=NOW)


# -- the server -----------------------------------------------------------------------------------


@dataclass
class Server:
    """The API on 127.0.0.1, served by an event loop in a thread of its own."""

    url: str
    loop: asyncio.AbstractEventLoop
    store: Store

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def restore(self, job_id: str) -> None:
        """Put a deleted seed job back, so that later cases still find it."""
        job = SEED_JOBS.get(job_id)
        if job is not None and self.run(self.store.get_job(job_id)) is None:
            self.run(self.store.insert_job(job))

    def restore_domain(self, name: str) -> None:
        """Put the seed domain's settings back, so that later deletes still find them."""
        if name == SEED_DOMAIN.name:
            self.run(self.store.put_domain(SEED_DOMAIN))


def registry() -> HandlerRegistry:
    handlers = HandlerRegistry()
    for name, func in [
        ("noop", noop),
        ("sleep", sleep),
        ("http_check", http_check),
        ("webhook", webhook),
    ]:
        handlers.register(name, func)
    return handlers


async def start(tmp_path: Path) -> tuple[web.AppRunner, Store, ProductStore, str]:
    """The API as `tickd api` serves it: the job store, and the product store for the alert
    emails' operations (/v1/bounces)."""
    store = open_store(f"sqlite:///{tmp_path}/tickd.db")
    await store.open()
    products = open_product_store(f"sqlite:///{tmp_path}/tickd.db")
    await products.open()
    for job in SEED_JOBS.values():
        await store.insert_job(job)
    await store.insert_executions(list(SEED_EXECUTIONS.values()))
    await store.put_domain(SEED_DOMAIN)
    settings = Settings(api_port=0, api_tokens=TOKENS, max_timeout_seconds=MAX_TIMEOUT_SECONDS)
    ports = Ports(
        store=store,
        lock=MemoryLock(),
        events=NullPublisher(),
        mailer=OutboxMailer(tmp_path / "outbox"),
        clock=SystemClock(),
    )
    resources = {PRODUCTS.name: products}
    app = build_api(settings, registry(), ports, Metrics(), engine=None, resources=resources)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, store, products, f"http://{host}:{port}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="api", daemon=True)
    thread.start()
    try:
        runner, store, products, url = asyncio.run_coroutine_threadsafe(
            start(tmp_path_factory.mktemp("api")), loop
        ).result(timeout=30)
        yield Server(url, loop, store)

        async def stop() -> None:
            await runner.cleanup()
            await products.close()
            await store.close()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


# -- data that reaches deeper ---------------------------------------------------------------------

# Generated job bodies almost never pass the checks JSON Schema cannot express (a registered
# handler, params its schema accepts, a cron expression that parses), so the write paths would
# only ever answer 422. Most positive job bodies get these instead (see `realistic`).
HANDLER_PARAMS: list[tuple[str, dict[str, Any]]] = [
    ("noop", {}),
    ("sleep", {"seconds": 0.5, "fail": False}),
    ("http_check", {"url": "https://example.com/health", "expected_status": [200, 204]}),
    (
        "webhook",
        {
            "url": "https://example.com/hook",
            "method": "PUT",
            "headers": {"Authorization": "Bearer x"},
            "secret_headers": {"X-Key": "k"},
            "body": {"a": [1, None, "\u00e9"]},
        },
    ),
]
CRON_EXPRESSIONS = [
    "*/10 * * * * *",
    "0 30 2 * * *",  # in the hour that Europe/Berlin skips in March
    "H H * * * *",
    "H/15 * * * *",
    "@daily",
    "0 0 9 * * 1-5",
    "0 0 0 29 2 *",  # every four years
    "0 0 0 30 2 *",  # never: refused
]
TIMEZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu", "Australia/Lord_Howe"]


def cursor(**fields: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()


# Cursors are opaque, so generated ones are refused before anything reads them; these are shaped
# like the API's own but hold what it never writes.
ODD_CURSORS = [
    cursor(after_name="seed-noop"),
    cursor(after_name=["seed-noop"]),
    cursor(after_name="\ud800"),
    cursor(at=NOW.isoformat(), id="x"),
    cursor(at="2026-03-02T09:00:00", id="x"),
    cursor(at="0001-01-01T00:00:00+05:00", id="x"),
    cursor(at=NOW.isoformat(), id=7),
    cursor(at=NOW.isoformat(), id="\ud800"),
]


def realistic(case: schemathesis.Case[Any]) -> None:
    """Four positive job bodies in five get a handler with valid params, a cron expression and
    timezone from the lists above, and a timeout under the ceiling. Still schema-valid, so every
    check holds as before; negative cases are left alone."""
    body = case.body
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    if not isinstance(body, dict):
        return
    pick = random.Random(json.dumps(body, sort_keys=True, default=str))
    if pick.random() < 0.2:
        return
    job_body = case.path.startswith("/v1/jobs")  # not a dead-letter filter's `handler`
    if job_body and ("handler" in body or "params" in body):
        body["handler"], params = pick.choice(HANDLER_PARAMS)
        body["params"] = copy.deepcopy(params)
    schedule = body.get("schedule")
    if isinstance(schedule, dict) and schedule.get("kind") == "cron":
        schedule["expr"] = pick.choice(CRON_EXPRESSIONS)
        schedule["timezone"] = pick.choice(TIMEZONES)
    timeout = body.get("timeout_seconds")
    if isinstance(timeout, int | float) and timeout > MAX_TIMEOUT_SECONDS:
        body["timeout_seconds"] = pick.uniform(1, MAX_TIMEOUT_SECONDS)


# -- the run --------------------------------------------------------------------------------------

# The document the server serves at /openapi.json (the first test checks that it is the same),
# loaded at import so that each operation is a test of its own.
DOCUMENT = openapi_document(ALL_ROUTES, version="test")
schema = schemathesis.openapi.from_dict(
    DOCUMENT,
    config=schemathesis.Config.from_dict(
        {
            "headers": AUTH,
            "generation": {"max-examples": MAX_EXAMPLES},
            "dictionaries": {
                "jobs": {"values": list(SEED_JOBS)},
                "executions": {"values": list(SEED_EXECUTIONS)},
                "cursors": {"values": ODD_CURSORS},
            },
            "parameters": {
                "path.job_id": {"dictionary": "jobs", "probability": KNOWN_ID_PROBABILITY},
                "path.execution_id": {
                    "dictionary": "executions",
                    "probability": KNOWN_ID_PROBABILITY,
                },
                "query.cursor": {"dictionary": "cursors", "probability": 0.3},
            },
        }
    ),
)

# Rules JSON Schema cannot express: a refusal of valid data naming only these fields, with this
# status, is not a failure (`params` stands for params.<name> too).
# What the API says of a number no store keeps (api/routing.py).
NUMBER_TOO_LARGE = "is too large (beyond a 64-bit"
SEMANTIC_REFUSALS = {
    "query.cursor": 400,  # opaque: only cursors the API gave out are read
    "query.until": 400,  # executions: a range of scheduled times ends after it starts
    "handler": 422,  # a registered handler
    "params": 422,  # that handler's params schema
    "schedule.expr": 422,  # a cron expression that parses and fires
    "schedule.timezone": 422,  # an IANA zone
    "schedule.at": 422,  # a one-shot job is created in the future
    "jitter_seconds": 422,  # below the schedule's period
    "timeout_seconds": 422,  # at most max_timeout_seconds
    "start": 422,  # backfill: the schedule has an occurrence in the window
    "end": 422,  # backfill: after start, not in the future
    "name": 409,  # unique among jobs
    "managed_by": 422,  # a system job is tickd's own: it takes no owner
    "concurrency_key": 422,  # needs a limit (and a limit a key); none on a sharded job
    "concurrency_limit": 422,
}


def semantic_refusal(response: schemathesis.Response) -> bool:
    try:
        problem = response.json()
        fields = [str(error["field"]) for error in problem["errors"]]
    except (ValueError, KeyError, TypeError):
        return False
    if response.status_code == 400 and NUMBER_TOO_LARGE in str(problem.get("detail", "")):
        return True
    reasons = [error.get("reason") for error in problem["errors"]]
    if response.status_code in (400, 422) and reasons and set(reasons) == {NUL_REASON}:
        return True
    return bool(fields) and all(
        SEMANTIC_REFUSALS.get(field.split(".")[0] if field.startswith("params.") else field)
        == response.status_code
        for field in fields
    )


def schema_valid_data_accepted(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case[Any]
) -> bool | None:
    """positive_data_acceptance, but for the refusals listed in SEMANTIC_REFUSALS."""
    if semantic_refusal(response):
        return None
    return positive_data_acceptance(ctx, response, case)


def test_the_served_document_is_the_one_tested(server: Server) -> None:
    with urllib.request.urlopen(f"{server.url}/openapi.json", timeout=10) as response:
        served = json.load(response)
    assert {**served, "info": None} == {**DOCUMENT, "info": None}


def refused_by_the_http_parser(response: schemathesis.Response) -> bool:
    """aiohttp's HTTP parser refuses a request line over 8190 bytes (400, text/plain) before
    the application sees the request: no operation answered, so the document has no say. The
    coverage phase gets there with many long values of one query parameter."""
    url = urlsplit(response.request.url or "")
    line = f"{response.request.method} {url.path}?{url.query} HTTP/1.1"
    return (
        response.status_code == 400
        and len(line.encode()) > MAX_REQUEST_LINE
        and response.headers.get("content-type", [""])[0].startswith("text/plain")
    )


@schema.parametrize()
# Derandomized: CI and a developer run the same cases, so a failure in one reproduces in the other.
@hypothesis.settings(deadline=None, derandomize=True)
def test_the_api_keeps_to_its_document(case: schemathesis.Case[Any], server: Server) -> None:
    realistic(case)
    response = case.call(base_url=server.url, headers=AUTH)
    if case.method == "DELETE" and response.status_code == 204:
        deleted = case.path_parameters or {}
        if "job_id" in deleted:
            server.restore(deleted["job_id"])
        if "name" in deleted:
            server.restore_domain(deleted["name"])
    if refused_by_the_http_parser(response):
        return
    case.validate_response(
        response,
        headers=AUTH,
        excluded_checks=[positive_data_acceptance],
        additional_checks=[schema_valid_data_accepted],
    )


# -- hand-written cases ---------------------------------------------------------------------------

# Inputs that once made the server fail (500, a traceback in the log): each must be refused as
# the document says, with problem details.
NESTED_A_THOUSAND_DEEP = b'{"name": "deep", "params": ' + b"[" * 1000 + b"]" * 1000 + b"}"
HOSTILE_CASES = [
    pytest.param(
        "GET", "/v1/jobs", {"Authorization": b"Bearer \xff\xfe"}, None, 401, id="auth-not-utf8"
    ),
    pytest.param(
        "GET", "/v1/jobs", {"Authorization": b"Bearer caf\xe9"}, None, 401, id="auth-latin-1"
    ),
    pytest.param(
        "POST",
        "/v1/jobs",
        {**AUTH, "Content-Type": "application/json"},
        NESTED_A_THOUSAND_DEEP,
        400,
        id="json-a-thousand-deep",
    ),
    pytest.param(
        "POST",
        "/v1/schedules/preview",
        {**AUTH, "Content-Type": "application/json"},
        b'{"schedule": ' + b'{"kind": ' * 1000 + b"1" + b"}" * 1000 + b"}",
        400,
        id="json-a-thousand-deep-objects",
    ),
]


@pytest.mark.parametrize(("method", "path", "headers", "data", "status"), HOSTILE_CASES)
def test_hostile_inputs_are_refused_as_documented(
    server: Server,
    method: str,
    path: str,
    headers: dict[str, Any],
    data: bytes | None,
    status: int,
) -> None:
    case = schema[path][method].Case(headers=headers)
    # Sent as they are: the client would neither encode such a header nor nest JSON that deep.
    response = case.call(base_url=server.url, headers=headers, data=data)
    assert response.status_code == status, response.text
    assert response.headers["content-type"][0].startswith("application/problem+json")
    case.validate_response(response, headers=headers)
