"""The HTTP client handlers get as `ctx.http`: an aiohttp session that cannot be pointed inside.

Tenants choose the URLs that `http_check` and `webhook` call, and the daemon runs next to the
databases and the cloud metadata service, so every connection is checked where it is made, on
the address actually dialled:

- names: a resolver wraps the real one and refuses the whole answer if any address in it is not
  allowed. aiohttp dials exactly the addresses that resolver returned (it never resolves twice),
  so a name that rebinds to 127.0.0.1 after a first, public answer is checked again on the
  answer that is used;
- IP literals (`http://127.0.0.1/`, `http://[::ffff:127.0.0.1]/`): aiohttp skips the resolver
  for them, so the connector's socket factory checks every address before it creates the
  socket. It guards names too, as a second line;
- legacy numeric forms (`http://2130706433/`, `http://0x7f.1/`, `http://127.1/`), which the C
  library reads as IPv4 addresses, are refused by a client middleware before anything else.

Allowed: public unicast addresses (`is_global`, not multicast or reserved; IPv4 embedded in
IPv6, as in `::ffff:127.0.0.1` or 6to4, is judged as that IPv4 address) on `ports`, and any
port of an address or network in `allow`: ops allowlist an internal service, and internal
services listen where they like. `allow` holds IP addresses and CIDR networks, not names: the
check is on what is dialled, and a name is only as trustworthy as the DNS behind it.

No proxies, from the environment or per request: a proxy would make the connection the check
sees a different one from the request's. Redirects are not followed by tickd's handlers
(`allow_redirects=False`); a caller that follows them is still safe, since each hop makes
its own checked connection. No cookie jar: one session serves every tenant's jobs, and one
tenant's cookies must not ride along on another's requests.

Every refusal raises `AddressNotAllowed` with one fixed message, whatever was found: a tenant
cannot use the error to map the inside. For the same reason a name that does not resolve fails
with that message too: otherwise "not allowed" against "did not resolve" would tell which
internal names exist.

What the URL alone tells (`request_refusal`) is also checked when a job is created, so that a
job that could never reach its destination is refused then, not failed at every run.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_middlewares import ClientHandlerType

from tickd.scheduler.keys import is_key

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_PORTS = (80, 443)
_NOT_ALLOWED = "destination not allowed"
# What a run records when the destination was refused or its name did not resolve: one message,
# so that the error does not tell a tenant which internal names exist.
UNREACHABLE = "destination not allowed, or its name does not resolve"
# RFC 9110: a header name is a token; a value holds no control character but HTAB.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class AddressNotAllowed(aiohttp.ClientConnectionError):
    """The destination is not one this daemon may connect to. The message never varies."""

    def __init__(self) -> None:
        super().__init__(_NOT_ALLOWED)


@dataclass(frozen=True)
class DestinationPolicy:
    """Which (address, port) pairs may be dialled."""

    allowed_networks: tuple[IPNetwork, ...]
    public_ports: frozenset[int]

    @classmethod
    def build(cls, allow: Sequence[str], ports: Collection[int]) -> DestinationPolicy:
        """Raises ValueError naming the entry that is neither an IP address nor a network."""
        networks = []
        for entry in allow:
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                raise ValueError(f"not an IP address or network: {entry!r}") from None
        return cls(allowed_networks=tuple(networks), public_ports=frozenset(ports))

    def permits(self, host: str, port: int) -> bool:
        address = _parse_address(host)
        if address is None:
            return False
        if self._is_allowlisted(address):
            return True
        return port in self.public_ports and _is_public_unicast(address)

    def check(self, host: str, port: int) -> None:
        if not self.permits(host, port):
            raise AddressNotAllowed()

    def _is_allowlisted(self, address: IPAddress) -> bool:
        candidates = {address, _embedded_ipv4(address) or address}
        return any(a in network for a in candidates for network in self.allowed_networks)


def safe_client_session(
    *,
    allow: Sequence[str] = (),
    ports: Collection[int] = DEFAULT_PORTS,
    resolver: AbstractResolver | None = None,
) -> aiohttp.ClientSession:
    """A session that refuses, with AddressNotAllowed, any connection outside the policy.

    Call it inside a running event loop; close the session when done (that also closes its
    connector). An injected `resolver` stays the caller's to close."""
    policy = DestinationPolicy.build(allow, ports)
    connector = aiohttp.TCPConnector(
        resolver=CheckingResolver(resolver or aiohttp.ThreadedResolver(), policy),
        socket_factory=_checking_socket_factory(policy),
    )
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        middlewares=(_refuse_proxies_and_numeric_hosts,),
    )


class CheckingResolver(AbstractResolver):
    """Resolves with `inner`, then refuses the answer unless every address in it is allowed.

    All or nothing: a mixed answer (one public address, one internal) is an attack or a
    misconfiguration, and neither should get a connection."""

    def __init__(self, inner: AbstractResolver, policy: DestinationPolicy) -> None:
        self._inner = inner
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answer = await self._inner.resolve(host, port, family)
        for found in answer:
            self._policy.check(found["host"], found["port"])
        return answer

    async def close(self) -> None:
        await self._inner.close()


def _checking_socket_factory(policy: DestinationPolicy) -> aiohttp.SocketFactoryType:
    """The last check, on the exact address about to be dialled, before the socket exists.

    Names were already checked by the resolver, so this refuses only what bypassed it: IP
    literals, which aiohttp dials one address at a time, so the refusal propagates as is."""

    def create_socket(addr_info: aiohttp.AddrInfoType) -> socket.socket:
        family, kind, proto, _, address = addr_info
        policy.check(str(address[0]), int(address[1]))
        return socket.socket(family=family, type=kind, proto=proto)

    return create_socket


async def _refuse_proxies_and_numeric_hosts(
    request: aiohttp.ClientRequest, send: ClientHandlerType
) -> aiohttp.ClientResponse:
    """Runs before every request, redirect hops included."""
    if request.proxy is not None or _is_legacy_ipv4_form(request.url.raw_host or ""):
        raise AddressNotAllowed()
    return await send(request)


def _is_legacy_ipv4_form(host: str) -> bool:
    """`2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`, `127.0.0.1.`: read as IPv4 by
    inet_aton, which getaddrinfo uses, though they are not the dotted quad that the policy
    parses. (aiohttp refuses some of them itself, with an error of its own.)"""
    try:
        socket.inet_aton(host.rstrip("."))
    except OSError:
        return False
    return _parse_address(host) is None


def _parse_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address that an IPv4-mapped (::ffff:a.b.c.d) or 6to4 (2002::/16) address
    reaches."""
    if isinstance(address, ipaddress.IPv6Address):
        return address.ipv4_mapped or address.sixtofour
    return None


def _is_public_unicast(address: IPAddress) -> bool:
    address = _embedded_ipv4(address) or address
    return address.is_global and not (address.is_multicast or address.is_reserved)


# -- helpers shared by the HTTP handlers --------------------------------------------------------


async def read_prefix(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The first `limit` bytes of the body, and whether there was more. Never reads the rest:
    a tenant's endpoint could answer with gigabytes."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await response.content.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    body = b"".join(chunks)
    return body[:limit], len(body) > limit


# A request that the run's deadline cuts short gives up this long before the deadline (or a
# tenth of the time left, if less), so that it fails as what happened, a request that got no
# answer in time, before the runner cancels the handler as one still running.
DEADLINE_MARGIN_SECONDS = 0.1
# A time limit of 0 would be none at all to aiohttp.
_SHORTEST_WAIT_SECONDS = 0.001


@dataclass(frozen=True)
class TimeLimit:
    """How long one request may wait for its answer: its own timeout, or the time left before
    the run's deadline when that is shorter."""

    seconds: float
    # Why a request that got no answer within `seconds` failed, in words.
    exceeded: str

    @classmethod
    def of(cls, timeout_seconds: float, time_left: float) -> TimeLimit:
        margin = min(DEADLINE_MARGIN_SECONDS, time_left / 10)
        if timeout_seconds <= time_left - margin:
            return cls(timeout_seconds, f"no response within {timeout_seconds:g} s")
        return cls(
            max(time_left - margin, _SHORTEST_WAIT_SECONDS),
            f"no response within {_seconds(time_left)} s, the time left before the run's deadline",
        )

    def client_timeout(self) -> aiohttp.ClientTimeout:
        # By default aiohttp rounds a limit of 5 s or more up to a whole second of the loop's
        # clock, which would carry it past the run's deadline.
        return aiohttp.ClientTimeout(total=self.seconds, ceil_threshold=math.inf)


def _seconds(value: float) -> str:
    """A time left as people say it: `30` for 29.9987, `12.3` for 12.3456, `0.25`."""
    if value < 1:
        return f"{value:.2g}"
    return f"{value:.1f}".rstrip("0").rstrip(".")


def failure_reason(exc: BaseException, limit: TimeLimit | float) -> str:
    """Why a request failed, in words that name neither the resolved address nor the URL
    (which may carry a token in its query). `limit`: the request's TimeLimit, or its timeout
    in seconds."""
    if isinstance(exc, AddressNotAllowed | aiohttp.ClientConnectorDNSError):
        return UNREACHABLE
    if isinstance(exc, TimeoutError):
        if isinstance(limit, TimeLimit):
            return limit.exceeded
        return f"no response within {limit:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        why = os.strerror(exc.errno).lower() if exc.errno else "connection failed"
        return f"cannot connect ({why})"
    return type(exc).__name__


# -- what a request can be known to fail on before it is made ------------------------------------


def endpoint_key(params: Mapping[str, object]) -> str | None:
    """`endpoint:<host>` of the URL in `params["url"]` (`:<port>` added for a port other than
    its scheme's): the concurrency key that bounds the runs calling one host at once. The host
    as dialled: lower case, an international name in its ASCII form. None without a usable
    URL."""
    url = params.get("url")
    if not isinstance(url, str):
        return None
    try:
        parsed = yarl.URL(url)
        host, port, usual = parsed.raw_host, parsed.port, parsed.is_default_port()
    except ValueError:
        return None
    if not host:
        return None
    key = f"endpoint:{host.lower()}" + ("" if usual else f":{port}")
    return key if is_key(key) else None


def request_refusal(
    url: str,
    headers: Mapping[str, Mapping[str, str]],
    policy: DestinationPolicy | None = None,
) -> tuple[str, str] | None:
    """Why a request to `url` with these headers could never be made by a safe session, as
    (where, reason): `where` is "url" or "<group>.<header name>", `headers` maps a group
    (`headers`, `secret_headers`...) to its headers. None if nothing is known to be wrong.

    The URL: http or https, a host, and, with a `policy`, a host that is an address (in any of
    its spellings) the policy permits; a name is judged on its answer when it is dialled. A
    header: a valid name, no CR, LF or other control character in the value (that would
    split the request). Credentials in the URL and an Authorization header: aiohttp refuses
    the pair, and which one should win is not tickd's guess."""
    problem = _url_refusal(url, policy)
    if problem is not None:
        return "url", problem
    for group, fields in headers.items():
        for name, value in fields.items():
            reason = _header_refusal(name, value)
            if reason is not None:
                return f"{group}.{name}", reason
    named = {name.lower() for fields in headers.values() for name in fields}
    if "authorization" in named and _has_credentials(url):
        return "url", "holds credentials and an Authorization header is given too: use one"
    return None


def _url_refusal(url: str, policy: DestinationPolicy | None) -> str | None:
    try:
        parsed = yarl.URL(url)
        port = parsed.port
    except (ValueError, TypeError):
        return "not a valid URL"
    if parsed.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    host = parsed.raw_host or ""
    if not host or port is None:
        return "must name a host"
    if _is_legacy_ipv4_form(host):
        return _NOT_ALLOWED  # as the client middleware refuses it, whatever the allowlist
    if policy is not None and not _may_be_permitted(policy, host, port):
        return _NOT_ALLOWED
    return None


def _may_be_permitted(policy: DestinationPolicy, host: str, port: int) -> bool:
    """An address is judged now; a name may resolve to anything, so it passes unless its port
    is one that no answer could make allowed (not a public port, and nothing allowlisted)."""
    if _parse_address(host) is not None:
        return policy.permits(host, port)
    return port in policy.public_ports or bool(policy.allowed_networks)


def _header_refusal(name: str, value: str) -> str | None:
    if not _HEADER_NAME.fullmatch(name):
        return "not a valid header name"
    if _CONTROL.search(value):
        return "a header value must not hold CR, LF or another control character"
    return None


def _has_credentials(url: str) -> bool:
    parsed = yarl.URL(url)
    return parsed.raw_user is not None or parsed.raw_password is not None
