"""`http_check` against a real server on loopback (allowlisted, as an internal target)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.handlers.conftest import Dials, Serve, StartListener, StaticResolver
from tickd.handlers.http_check import PARAMS, CheckFailed, CheckParams, check, http_check
from tickd.scheduler.plugin.http import UNREACHABLE, safe_client_session

SLOW_SECONDS = 2.0


def health_app() -> web.Application:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="database: ok\nqueue: ok")

    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="degraded")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW_SECONDS)
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/slow", slow)
    return app


async def run_check(
    session: aiohttp.ClientSession, time_left: float = 30.0, **params: Any
) -> dict[str, Any]:
    return await check(session, CheckParams.parse(params), time_left=time_left)


async def test_a_healthy_endpoint_passes_with_status_and_latency(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    base = await serve(health_app())
    result = await run_check(loopback_session, url=f"{base}/ok")
    assert result["status"] == 200
    assert isinstance(result["latency_ms"], float) and 0 <= result["latency_ms"] < 5000
    assert set(result) == {"status", "latency_ms"}


async def test_head_is_a_check_too(serve: Serve, loopback_session: aiohttp.ClientSession) -> None:
    base = await serve(health_app())
    result = await run_check(loopback_session, url=f"{base}/ok", method="HEAD")
    assert result["status"] == 200


async def test_a_wrong_status_fails_the_check(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    base = await serve(health_app())
    with pytest.raises(CheckFailed, match=r"^status 503, expected 2xx \(\d+(\.\d+)? ms\)$"):
        await run_check(loopback_session, url=f"{base}/status/503")


async def test_the_expected_status_can_be_named(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    base = await serve(health_app())
    result = await run_check(loopback_session, url=f"{base}/status/418", expected_status=418)
    assert result["status"] == 418
    with pytest.raises(CheckFailed, match="expected 201 or 204"):
        await run_check(loopback_session, url=f"{base}/ok", expected_status=[204, 201])


async def test_the_body_must_contain_the_expected_text(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    base = await serve(health_app())
    result = await run_check(loopback_session, url=f"{base}/ok", body_contains="queue: ok")
    assert result["status"] == 200
    with pytest.raises(CheckFailed, match="does not contain 'cache: ok'"):
        await run_check(loopback_session, url=f"{base}/ok", body_contains="cache: ok")


async def test_no_answer_within_the_timeout_fails_the_check(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    base = await serve(health_app())
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(CheckFailed, match=r"^no response within 0\.2 s$"):
        await run_check(loopback_session, url=f"{base}/slow", timeout_seconds=0.2)
    assert loop.time() - started < SLOW_SECONDS


async def test_the_run_deadline_caps_the_timeout(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    base = await serve(health_app())
    deadline = r"^no response within 0\.2 s, the time left before the run's deadline$"
    with pytest.raises(CheckFailed, match=deadline):
        await run_check(loopback_session, time_left=0.2, url=f"{base}/slow", timeout_seconds=60)


async def test_an_unreachable_endpoint_fails_the_check(
    start_listener: StartListener, loopback_session: aiohttp.ClientSession
) -> None:
    listener = await start_listener("127.0.0.1")
    await listener.close()  # the port is now closed
    with pytest.raises(CheckFailed, match=r"^cannot connect \(connection refused\)$"):
        await run_check(loopback_session, url=f"http://127.0.0.1:{listener.port}/")


async def test_a_redirect_is_the_answer_not_followed(
    dials: Dials, serve: Serve, start_listener: StartListener
) -> None:
    inside = await start_listener("127.0.0.2")

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.2:{inside.port}/")

    app = web.Application()
    app.router.add_get("/", moved)
    base = await serve(app)
    async with safe_client_session(allow=["127.0.0.1", "127.0.0.2"]) as session:
        with pytest.raises(CheckFailed, match="status 302, expected 2xx"):
            await run_check(session, url=f"{base}/")
        result = await run_check(session, url=f"{base}/", expected_status=302)
    assert result["status"] == 302
    assert inside.connections == 0
    assert {host for host, _ in dials} == {"127.0.0.1"}


async def test_a_refused_destination_fails_with_the_generic_message(dials: Dials) -> None:
    async with safe_client_session() as session:
        for url in ("http://169.254.169.254/latest/meta-data/", "http://localhost/"):
            with pytest.raises(CheckFailed) as failed:
                await run_check(session, url=url)
            assert str(failed.value) == UNREACHABLE
    assert dials == []


async def test_a_name_that_does_not_resolve_fails_as_a_refused_one_does(dials: Dials) -> None:
    """Were the messages different, a tenant could tell which internal names exist."""
    resolver = StaticResolver({"db.corp.example": [["10.0.0.5"]]})
    messages = []
    async with safe_client_session(resolver=resolver) as session:
        for url in ("http://db.corp.example/", "http://nothing.corp.example/"):
            with pytest.raises(CheckFailed) as failed:
                await run_check(session, url=url)
            messages.append(str(failed.value))
    assert resolver.lookups == ["db.corp.example", "nothing.corp.example"]
    assert messages == [UNREACHABLE, UNREACHABLE]
    assert dials == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "params.url"),
        ({"url": "http://x/", "method": "POST"}, "params.method"),
        ({"url": "http://x/", "method": "HEAD", "body_contains": "ok"}, "params.body_contains"),
        ({"url": "http://x/", "expected_status": "2xx"}, "params.expected_status"),
        ({"url": "http:///health"}, "params.url: must name a host"),
        ({"url": "http://x/", "headers": {"X-A": "a\r\nX-B: b"}}, "params.headers.X-A"),
        ({"url": "http://u:p@x/", "headers": {"authorization": "b"}}, "params.url"),
    ],
)
def test_bad_params_are_named(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CheckParams.parse(params)


def test_the_handler_declares_its_schema() -> None:
    assert http_check.params_schema is PARAMS
    assert PARAMS["required"] == ["url"]
    assert set(PARAMS["properties"]) == {
        "url",
        "method",
        "expected_status",
        "body_contains",
        "timeout_seconds",
        "headers",
    }
