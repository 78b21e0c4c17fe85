"""The daemon: open ports and resources, seed, serve the API, run the engine until told to stop."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import math
import re
import resource
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from scheduler.config import ConfigError, Settings
from scheduler.logs import log_event
from scheduler.metrics import Metrics
from scheduler.ports import Ports
from scheduler.registry import HandlerRegistry
from scheduler.secrets import scrub_text
from scheduler.storage import StartupAborted
from scheduler.urls import is_loopback
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

log = logging.getLogger("tickd.daemon")

# How long a client may take to send a request's head (its request line and headers), from
# connecting or from the previous response; also how long a kept-alive connection may idle.
HEADER_TIMEOUT_SECONDS = 15.0
# Client connections open at once, at most (fewer when the open-file limit is low: see
# connection_cap). One more is answered 503 and closed at once.
MAX_CONNECTIONS = 512
# A failing accept, or a connection refused for the cap, is logged once per this many seconds.
ACCEPT_FAILURE_LOG_SECONDS = 60.0
# What asyncio reports when accept() finds no descriptor or memory left.
ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# The empty line that ends a request's head (LF alone too, as lenient parsers take it).
HEAD_END = re.compile(rb"\n\r?\n")
BUSY_BODY = (
    b'{"type":"about:blank","title":"Service Unavailable","status":503,'
    b'"detail":"too many connections: try again shortly","errors":[]}'
)
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/problem+json\r\n"
    b"Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" % len(BUSY_BODY)
) + BUSY_BODY


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


@asynccontextmanager
async def running(app: web.Application, limits: ServerLimits) -> AsyncIterator[web.AppRunner]:
    """The app set up (its cleanup contexts started: the dispatcher runs from here) until the
    block ends; meanwhile a failing accept is logged once per interval."""
    # keepalive_timeout: aiohttp closes a kept-alive connection whose next request's head has
    # not arrived within it (a connection's first head is GuardedConnection's).
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.header_timeout)
    await runner.setup()
    try:
        with accept_failures_throttled(limits.accept_log_interval, time.monotonic):
            yield runner
    finally:
        await runner.cleanup()


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGHUP too: a closed terminal or a supervisor's reload sends it, and its default action
    kills the process mid-run, leaving its executions `running` until their leases lapse."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, _request_stop, stop, sig)


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    log_event(log, "daemon.stopping", signal=sig.name)
    stop.set()


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """`limit`, or half the open-file limit when that is lower: the store, the handlers and
    their outgoing connections need descriptors too, and a daemon out of them accepts nothing."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, soft // 2))


@dataclass(frozen=True)
class ServerLimits:
    """What a client may hold of the listener (the body's deadline is the app's: api/edge.py)."""

    header_timeout: float = HEADER_TIMEOUT_SECONDS
    max_connections: int = field(default_factory=connection_cap)
    accept_log_interval: float = ACCEPT_FAILURE_LOG_SECONDS


class ThrottledWarning:
    """A warning that may repeat many times a second, logged once per `interval` at most; each
    line counts the occurrences held back since the previous one."""

    def __init__(self, event: str, interval: float, clock: Callable[[], float]) -> None:
        self._event = event
        self._interval = interval
        self._clock = clock
        self._next_at = -math.inf
        self._held_back = 0

    def report(self, **fields: object) -> None:
        now = self._clock()
        if now < self._next_at:
            self._held_back += 1
            return
        log_event(log, self._event, level=logging.WARNING, **fields, held_back=self._held_back)
        self._held_back = 0
        self._next_at = now + self._interval


@contextmanager
def accept_failures_throttled(interval: float, clock: Callable[[], float]) -> Iterator[None]:
    """While the block runs, an accept that fails for want of descriptors or memory is one
    warning per `interval`, without a traceback. asyncio reports each such failure to the loop's
    exception handler, whose default logs a traceback every time, once per connection waiting in
    the backlog and again at each retry a second later: out of descriptors, that floods the log.
    Other reports go where they went before."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    warning = ThrottledWarning("api.accept_failed", interval, clock)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, OSError) and _is_accept_starved(context.get("message", ""), error):
            warning.report(error=errno.errorcode.get(error.errno or 0, "?"), reason=error.strerror)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
    try:
        yield
    finally:
        loop.set_exception_handler(previous)


def _is_accept_starved(message: str, error: OSError) -> bool:
    return message.startswith("socket.accept()") and error.errno in ACCEPT_RESOURCE_ERRORS


class GuardedSite(web.BaseSite):
    """A TCP listener whose connections pass through a ConnectionGate."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, limits: ServerLimits) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._limits = limits
        self._bound_port: int | None = None

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the one the system chose for port 0) once started."""
        return self._bound_port or self._port

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        gate = ConnectionGate(server, self._limits)
        loop = asyncio.get_running_loop()
        listening = await loop.create_server(gate, self._host, self._port, backlog=self._backlog)
        self._server = listening
        self._bound_port = int(listening.sockets[0].getsockname()[1])


class ConnectionGate:
    """The listener's protocol factory: at most `max_connections` connections at once, and
    each must send its first request's head within `header_timeout`."""

    def __init__(self, server: web.Server, limits: ServerLimits) -> None:
        self.server = server
        self.limits = limits
        self.open = 0
        self.refusals = ThrottledWarning(
            "api.connection_refused", limits.accept_log_interval, time.monotonic
        )

    def __call__(self) -> GuardedConnection:
        return GuardedConnection(self)


class GuardedConnection(asyncio.Protocol):
    """One connection: admitted (then aiohttp's protocol does the HTTP) or refused at once.

    aiohttp closes a kept-alive connection whose next head is slow, but not every version
    it supports times the first one: a client could connect and trickle a header line for ever.
    So until the first head ends (an empty line) a deadline runs here."""

    def __init__(self, gate: ConnectionGate) -> None:
        self._gate = gate
        self._http: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._head_deadline: asyncio.TimerHandle | None = None
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        gate = self._gate
        if gate.open >= gate.limits.max_connections:
            gate.refusals.report(open=gate.open, limit=gate.limits.max_connections)
            transport.write(BUSY_RESPONSE)
            transport.close()
            return
        gate.open += 1
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._head_deadline = loop.call_later(gate.limits.header_timeout, self._head_overdue)
        self._http = gate.server()
        self._http.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._http is None:
            return
        if self._head_deadline is not None:
            self._watch_for_head_end(data)
        self._http.data_received(data)

    def _watch_for_head_end(self, data: bytes) -> None:
        seen = self._tail + data
        if HEAD_END.search(seen):
            assert self._head_deadline is not None
            self._head_deadline.cancel()
            self._head_deadline = None
            self._tail = b""
        else:
            self._tail = seen[-2:]

    def _head_overdue(self) -> None:
        self._head_deadline = None
        if self._transport is not None:
            self._transport.close()

    def eof_received(self) -> bool | None:
        return self._http.eof_received() if self._http is not None else None

    def pause_writing(self) -> None:
        if self._http is not None:
            self._http.pause_writing()

    def resume_writing(self) -> None:
        if self._http is not None:
            self._http.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._http is None:
            return
        self._gate.open -= 1
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        self._transport = None
        self._http.connection_lost(exc)
