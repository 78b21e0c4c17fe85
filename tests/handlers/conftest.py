"""Real servers on loopback for the HTTP handlers, and a guard that no test dials anything else.

Refused destinations must be refused before any connection is attempted. The `dials` fixture
records every address the event loop is asked to connect to, and turns away (without sending
a packet) anything outside loopback, so a test of `http://10.0.0.1/` can prove that nothing
was dialled, and could not reach 10.0.0.1 even if the code under test were wrong.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from tests.fixtures.servers import Serve as Serve
from tickd.scheduler.plugin.http import safe_client_session

LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")
LOOPBACK_V6 = ipaddress.ip_address("::1")
# Public, so allowed by the policy: only ever handed to a refused request, never dialled.
PUBLIC_ADDRESS = "93.184.215.14"

Dials = list[tuple[str, int]]


@pytest.fixture
async def dials(monkeypatch: pytest.MonkeyPatch) -> Dials:
    """Every (address, port) the event loop was asked to connect to, in order."""
    loop = asyncio.get_running_loop()
    real_connect = loop.sock_connect
    dialled: Dials = []

    async def connect_to_loopback_only(sock: socket.socket, address: Any) -> None:
        host, port = str(address[0]), int(address[1])
        dialled.append((host, port))
        if not _is_loopback(host):
            raise ConnectionRefusedError(f"the test guard refused to dial {host}")
        await real_connect(sock, address)

    monkeypatch.setattr(loop, "sock_connect", connect_to_loopback_only)
    return dialled


def _is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host.split("%")[0])
    return address == LOOPBACK_V6 or address in LOOPBACK_V4


class Listener:
    """A TCP server on one port of one or more loopback addresses. It counts the connections
    it accepts (a refused request must not even connect) and answers each with a 200."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        # The local address of every connection accepted, e.g. ["127.0.0.1"].
        self.accepted: list[str] = []
        self._servers: list[asyncio.Server] = []

    @property
    def connections(self) -> int:
        return len(self.accepted)

    async def start(self, hosts: Sequence[str]) -> None:
        for host in hosts:
            server = await asyncio.start_server(self._answer, host=host, port=self.port)
            self.port = server.sockets[0].getsockname()[1]
            self._servers.append(server)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
            await server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.append(str(writer.get_extra_info("sockname")[0]))
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()


StartListener = Callable[..., Awaitable[Listener]]


@pytest.fixture
async def start_listener() -> AsyncIterator[StartListener]:
    started: list[Listener] = []

    async def start(*hosts: str) -> Listener:
        """Listens on one port, free on every host."""
        for _ in range(20):
            listener = Listener()
            try:
                await listener.start(hosts or ("127.0.0.1",))
            except OSError:
                await listener.close()
                continue
            started.append(listener)
            return listener
        raise RuntimeError(f"no port free on all of {hosts}")

    yield start
    for listener in started:
        await listener.close()


@pytest.fixture
async def loopback_session() -> AsyncIterator[aiohttp.ClientSession]:
    """The safe session with 127.0.0.1 allowlisted, as ops would allow an internal target."""
    async with safe_client_session(allow=["127.0.0.1"]) as session:
        yield session


class StaticResolver(AbstractResolver):
    """A DNS that answers from a table, one answer per call in turn (the last one repeats):
    names that resolve inside, and names that rebind between lookups. A name not in the table
    does not resolve."""

    def __init__(self, table: dict[str, list[list[str]]]) -> None:
        self._table = table
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host not in self._table:
            self.lookups.append(host)
            raise OSError(socket.EAI_NONAME, "Name or service not known")
        answers = self._table[host]
        answer = answers[min(self.lookups.count(host), len(answers) - 1)]
        self.lookups.append(host)
        return [_result(host, address, port) for address in answer]

    async def close(self) -> None:
        return None


def _result(hostname: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(
        hostname=hostname,
        host=address,
        port=port,
        family=family,
        proto=0,
        flags=socket.AI_NUMERICHOST,
    )
