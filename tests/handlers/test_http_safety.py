"""The SSRF guard of `ctx.http`, against real servers on loopback.

Every refused destination fails with the same AddressNotAllowed and the same message, and is
refused before anything is dialled: the `dials` guard shows an empty list, and the servers
listening where the request pointed saw no connection.
"""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from tests.handlers.conftest import (
    PUBLIC_ADDRESS,
    Dials,
    Serve,
    StartListener,
    StaticResolver,
)
from tickd.scheduler.plugin.http import AddressNotAllowed, DestinationPolicy, safe_client_session

SHORT = aiohttp.ClientTimeout(total=5)

# {port} is a listener's port on 127.0.0.1 and ::1, which the session allows, so that only
# the address rule stands between the request and the listener.
REFUSED_WITH_LISTENER = [
    "http://127.0.0.1:{port}/",
    "http://localhost:{port}/",
    "http://[::1]:{port}/",
    "http://0.0.0.0:{port}/",
    "http://2130706433:{port}/",
    "http://0x7f.1:{port}/",
    "http://127.1:{port}/",
    "http://0177.0.0.1:{port}/",
    "http://0x7f000001:{port}/",
    "http://127.0.0.1.:{port}/",
    "http://LOCALHOST:{port}/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:{port}/",
    "http://[::127.0.0.1]:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://[::ffff:7f00:1]:{port}/",
    "http://[::]:{port}/",
]
# Nothing listens there, and nothing may be dialled: the dials guard would show it.
REFUSED_WITHOUT_LISTENER = [
    "http://10.0.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[2002:7f00:1::]/",
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://100.64.0.1/",
    "http://192.168.1.1/",
    "http://224.0.0.1/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://localhost/",
]


async def expect_refused(session: aiohttp.ClientSession, url: str, **kwargs: object) -> None:
    with pytest.raises(AddressNotAllowed) as refused:
        async with session.get(url, timeout=SHORT, **kwargs):  # type: ignore[arg-type]
            pass
    assert str(refused.value) == "destination not allowed"


async def test_an_allowlisted_address_is_reached_on_any_port(
    dials: Dials, start_listener: StartListener
) -> None:
    listener = await start_listener("127.0.0.1")
    async with (
        safe_client_session(allow=["127.0.0.0/8"]) as session,
        session.get(f"http://127.0.0.1:{listener.port}/", timeout=SHORT) as response,
    ):
        assert (response.status, await response.text()) == (200, "ok")
    assert listener.connections == 1
    assert dials == [("127.0.0.1", listener.port)]


@pytest.mark.parametrize("template", REFUSED_WITH_LISTENER)
async def test_loopback_in_any_spelling_is_refused_before_connecting(
    template: str, dials: Dials, start_listener: StartListener
) -> None:
    listener = await start_listener("127.0.0.1", "::1")
    async with safe_client_session(ports={listener.port}) as session:
        await expect_refused(session, template.format(port=listener.port))
    assert listener.connections == 0
    assert dials == []


@pytest.mark.parametrize("url", REFUSED_WITHOUT_LISTENER)
async def test_internal_addresses_are_never_dialled(url: str, dials: Dials) -> None:
    async with safe_client_session() as session:
        await expect_refused(session, url)
    assert dials == []


async def test_a_name_that_resolves_inside_is_refused(
    dials: Dials, start_listener: StartListener
) -> None:
    listener = await start_listener("127.0.0.1")
    resolver = StaticResolver({"status.example.com": [["127.0.0.1"]]})
    async with safe_client_session(ports={listener.port}, resolver=resolver) as session:
        await expect_refused(session, f"http://status.example.com:{listener.port}/")
    assert resolver.lookups == ["status.example.com"]
    assert (listener.connections, dials) == (0, [])


async def test_an_answer_with_one_inside_address_is_refused_whole(
    dials: Dials, start_listener: StartListener
) -> None:
    """A public address first and loopback second, in one answer: nothing is dialled, not
    even the public address."""
    listener = await start_listener("127.0.0.1")
    resolver = StaticResolver({"mixed.example.com": [[PUBLIC_ADDRESS, "127.0.0.1"]]})
    async with safe_client_session(ports={listener.port}, resolver=resolver) as session:
        await expect_refused(session, f"http://mixed.example.com:{listener.port}/")
    assert (listener.connections, dials) == (0, [])


async def test_dns_rebinding_is_checked_on_the_address_dialled(
    dials: Dials, start_listener: StartListener
) -> None:
    """The name answers an allowed address first, loopback on every later lookup: a guard
    that resolved once to check and again to connect would connect to the second answer.
    (127.0.0.1 is allowlisted to stand in for a public address, so no test traffic leaves
    the machine; 127.0.0.2 is the inside it rebinds to.)"""
    listener = await start_listener("127.0.0.1", "127.0.0.2")
    resolver = StaticResolver({"rebind.example.com": [["127.0.0.1"], ["127.0.0.2"]]})
    url = f"http://rebind.example.com:{listener.port}/"
    async with safe_client_session(allow=["127.0.0.1"], resolver=resolver) as session:
        async with session.get(url, timeout=SHORT) as response:
            assert response.status == 200
        assert resolver.lookups == ["rebind.example.com"], "one lookup, used as checked"

        connector = session.connector
        assert isinstance(connector, aiohttp.TCPConnector)
        connector.clear_dns_cache()
        await expect_refused(session, url)
    assert resolver.lookups == ["rebind.example.com"] * 2
    assert listener.accepted == ["127.0.0.1"]
    assert dials == [("127.0.0.1", listener.port)]


async def test_a_redirect_inside_is_refused_at_its_hop(
    dials: Dials, serve: Serve, start_listener: StartListener
) -> None:
    inside = await start_listener("127.0.0.2")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.2:{inside.port}/")

    app = web.Application()
    app.router.add_get("/", redirect)
    allowed = await serve(app)
    async with safe_client_session(allow=["127.0.0.1"]) as session:
        await expect_refused(session, f"{allowed}/", allow_redirects=True)
    assert inside.connections == 0
    assert [host for host, _ in dials] == ["127.0.0.1"]


async def test_a_public_address_on_another_port_is_refused(dials: Dials) -> None:
    resolver = StaticResolver({"www.example.com": [[PUBLIC_ADDRESS]]})
    async with safe_client_session(resolver=resolver) as session:
        await expect_refused(session, "http://www.example.com:8080/")
        await expect_refused(session, f"http://{PUBLIC_ADDRESS}:22/")
    assert dials == []


async def test_literals_are_checked_at_connect_time_without_the_middleware(
    dials: Dials, start_listener: StartListener
) -> None:
    """The socket factory is a guard of its own: a caller that drops the session's
    middleware still cannot dial loopback."""
    listener = await start_listener("127.0.0.1", "::1")
    async with safe_client_session(ports={listener.port}) as session:
        for host in ("127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"):
            await expect_refused(session, f"http://{host}:{listener.port}/", middlewares=())
    assert (listener.connections, dials) == (0, [])


async def test_proxies_are_refused_and_the_environment_is_ignored(
    dials: Dials, serve: Serve, start_listener: StartListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = await start_listener("127.0.0.2")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.2:{proxy.port}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.2:{proxy.port}")

    async def direct(request: web.Request) -> web.Response:
        return web.Response(text="direct")

    app = web.Application()
    app.router.add_get("/", direct)
    target = await serve(app)
    async with safe_client_session(allow=["127.0.0.0/8"]) as session:
        async with session.get(f"{target}/", timeout=SHORT) as response:
            assert await response.text() == "direct"
        await expect_refused(session, f"{target}/", proxy=f"http://127.0.0.2:{proxy.port}")
    assert proxy.connections == 0


async def test_one_tenants_cookies_do_not_reach_another(serve: Serve) -> None:
    seen: list[str | None] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.Response(text="ok")
        response.set_cookie("session", "tenant-a")
        return response

    app = web.Application()
    app.router.add_get("/", handle)
    url = f"{await serve(app)}/"
    async with safe_client_session(allow=["127.0.0.1"]) as session:
        for _ in range(2):
            async with session.get(url, timeout=SHORT) as response:
                assert response.status == 200
    assert seen == [None, None]


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("8.8.8.8", 443, True),
        ("8.8.8.8", 80, True),
        ("8.8.8.8", 8443, False),
        ("2606:4700:4700::1111", 443, True),
        ("::ffff:8.8.8.8", 443, True),
        ("::ffff:10.0.0.1", 443, False),
        ("2002:7f00:1::", 443, False),  # 6to4 around 127.0.0.1
        ("64:ff9b::a9fe:a9fe", 80, False),  # NAT64 around 169.254.169.254
        ("fe80::1%eth0", 80, False),
        ("100.64.0.1", 80, False),  # carrier-grade NAT
        ("224.0.1.1", 80, False),  # multicast, though global
        ("255.255.255.255", 80, False),
        ("not-an-address", 80, False),
        ("10.1.2.3", 5432, True),  # allowlisted network: any port
        ("::ffff:10.1.2.3", 5432, True),
        ("10.2.0.1", 80, False),
        ("192.168.0.7", 8080, True),  # allowlisted address
    ],
)
def test_the_policy(host: str, port: int, allowed: bool) -> None:
    policy = DestinationPolicy.build(["10.1.0.0/16", "192.168.0.7"], ports=(80, 443))
    assert policy.permits(host, port) is allowed


def test_an_allowlist_entry_must_be_an_address_or_network() -> None:
    with pytest.raises(ValueError, match=r"'intranet\.local'"):
        DestinationPolicy.build(["10.0.0.0/8", "intranet.local"], ports=(80,))
