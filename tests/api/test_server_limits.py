"""What a client can hold of the daemon's listener: slow heads and bodies are cut, connections are
capped, and running out of descriptors is a warning a minute, not a log flood."""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from tests.api.conftest import ADMIN, api_app
from tests.conftest import EngineFactory
from tickd.api.edge import BODY_TIMEOUT
from tickd.api.listener import (
    MAX_CONNECTIONS,
    GuardedSite,
    ServerLimits,
    accept_failures_throttled,
    connection_cap,
    running,
)
from tickd.scheduler.logs import FIELDS

# Short, so that the tests wait little for the server to cut a client.
SHORT = 0.2
# Far more than the server needs to cut a client: a test that waits this long has failed.
CUT_WITHIN = 5.0
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@asynccontextmanager
async def listening(limits: ServerLimits, app: web.Application | None = None) -> AsyncIterator[int]:
    """The daemon's listener on a free loopback port, serving `app` (by default /healthz only)."""
    if app is None:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
    async with running(app, limits) as runner:
        site = GuardedSite(runner, "127.0.0.1", 0, limits)
        await site.start()
        yield site.port


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Whatever the server still sends, up to its closing the connection."""
    return await asyncio.wait_for(reader.read(), CUT_WITHIN)


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CUT_WITHIN)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await asyncio.wait_for(reader.readexactly(length), CUT_WITHIN)


async def test_a_client_that_never_finishes_its_head_is_disconnected() -> None:
    async with listening(ServerLimits(header_timeout=SHORT)) as port:
        reader, writer = await connect(port)
        try:
            writer.write(PARTIAL_HEAD)
            assert await until_closed(reader) == b""
        finally:
            writer.close()


async def test_a_slow_head_on_a_kept_alive_connection_is_disconnected() -> None:
    async with listening(ServerLimits(header_timeout=SHORT)) as port:
        reader, writer = await connect(port)
        try:
            writer.write(PARTIAL_HEAD + b"\r\n\r\n")
            assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
            writer.write(PARTIAL_HEAD)
            assert await until_closed(reader) == b""
        finally:
            writer.close()


async def test_a_client_that_sends_nothing_is_disconnected() -> None:
    async with listening(ServerLimits(header_timeout=SHORT)) as port:
        reader, writer = await connect(port)
        try:
            assert await until_closed(reader) == b""
        finally:
            writer.close()


async def test_beyond_the_cap_a_connection_is_refused_and_health_answers_once_slow_ones_go() -> (
    None
):
    limits = ServerLimits(header_timeout=1.0, max_connections=2)
    async with listening(limits) as port:
        slow = [await connect(port) for _ in range(2)]
        try:
            for _, writer in slow:
                writer.write(PARTIAL_HEAD)
            reader, writer = await connect(port)
            refused = await until_closed(reader)
            writer.close()
            assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), refused
            assert b"Retry-After: 1" in refused

            for reader, _ in slow:
                assert await until_closed(reader) == b""
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/healthz") as response,
            ):
                assert response.status == 200
        finally:
            for _, writer in slow:
                writer.close()


def test_the_cap_leaves_half_the_open_file_limit_to_the_rest_of_the_daemon() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))
    try:
        assert connection_cap() == 150
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY or soft >= 2 * MAX_CONNECTIONS:
        assert connection_cap() == MAX_CONNECTIONS


class StepClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def out_of_descriptors(listener: socket.socket) -> dict[str, object]:
    """What asyncio's accept loop hands the loop's exception handler when accept() fails so."""
    return {
        "message": "socket.accept() out of system resource",
        "exception": OSError(errno.EMFILE, "Too many open files"),
        "socket": listener,
    }


async def test_running_out_of_descriptors_is_one_warning_per_interval_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    loop = asyncio.get_running_loop()
    clock = StepClock()
    with socket.socket() as listener, accept_failures_throttled(60.0, clock):
        context = out_of_descriptors(listener)
        for _ in range(100):
            loop.call_exception_handler(context)
        clock.now += 59.0
        for _ in range(100):
            loop.call_exception_handler(context)
        clock.now += 1.0
        loop.call_exception_handler(context)

    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in lines] == ["api.accept_failed", "api.accept_failed"]
    assert all(r.exc_info is None for r in lines), "no traceback"
    fields = [r.__dict__[FIELDS] for r in lines]
    assert fields[0] == {"error": "EMFILE", "reason": "Too many open files", "held_back": 0}
    assert fields[1]["held_back"] == 199, "the second line counts what the interval held back"


async def test_other_loop_errors_are_reported_as_before(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    loop.set_exception_handler(lambda _, context: seen.append(context["message"]))
    try:
        with accept_failures_throttled(60.0, StepClock()):
            loop.call_exception_handler({"message": "Task exception was never retrieved"})
        assert seen == ["Task exception was never retrieved"]
        assert loop.get_exception_handler() is not None
        loop.call_exception_handler({"message": "after"})
        assert seen[-1] == "after", "the previous handler is back once serving ends"
    finally:
        loop.set_exception_handler(None)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@pytest.mark.parametrize("path", [b"/v1/jobs", b"/v1/jobs/some-job/trigger"])
async def test_a_body_that_trickles_in_is_cut_without_a_server_error(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture, path: bytes
) -> None:
    caplog.set_level(logging.WARNING)
    _, app = api_app(make_engine)
    app[BODY_TIMEOUT] = SHORT
    async with listening(ServerLimits(header_timeout=CUT_WITHIN * 2), app) as port:
        reader, writer = await connect(port)
        try:
            writer.write(
                b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer " + ADMIN.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            assert await until_closed(reader) == b""
        finally:
            writer.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
