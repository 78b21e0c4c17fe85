"""The API's listener: what one client may hold of it. Each connection must send its first
request's head within a deadline, connections open at once are capped, and a failing accept
(no descriptor left) is one warning a minute, not a traceback per connection waiting."""

from __future__ import annotations

import asyncio
import errno
import logging
import math
import re
import resource
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tickd.scheduler.logs import log_event

log = logging.getLogger("tickd.api")

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
