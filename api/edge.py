"""Who may drive the API from where: the rules that hold before any route runs.

Without tokens the API listens on loopback, and anyone on the machine may use it, but so could any
web page the operator opens: a form posts `text/plain` to 127.0.0.1 without a CORS preflight, and
a name the attacker's DNS points at 127.0.0.1 (DNS rebinding) makes the page same-origin with the
API, so that it reads the answers too. So, without tokens, a request must be addressed to a
loopback name (`Host`), and a write must not come from another origin's page (`Origin`). With
tokens the bearer token is the protection: a browser never adds it to another site's request.

Either way a write's body is `application/json` (api/routing.py): no form can send that, and a
script of another origin cannot without a preflight, which the API never allows.

And a request's body must arrive within the app's BODY_TIMEOUT of its head: a client trickling
it would otherwise hold its connection, and the handler waiting for it, for as long as it likes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from tickd.api.problems import ApiError
from tickd.api.routing import TOKENS, WRITES
from tickd.api.unsubscribe import PUBLIC_PATHS
from tickd.scheduler.urls import is_loopback

# Read-only, no job data: local scrapers and health checks reach them by whatever name.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# Also reached by any name: the probes, and the unsubscribe links of alert emails, opened from
# the internet through a proxy and guarded by a signed token of their own.
ANY_NAME_PATHS = PROBE_PATHS | PUBLIC_PATHS
DEFAULT_PORTS = {"http": 80, "https": 443}
# host, or [IPv6], then an optional port; the classes exclude ":" so a match never backtracks.
_AUTHORITY = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([0-9]{1,5}))?")

# Seconds a request's body may take to arrive, counted from the end of its head.
BODY_TIMEOUT = web.AppKey("body_timeout", float)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def edge_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.app[TOKENS] and request.path not in ANY_NAME_PATHS:
        check_loopback_host(request)
        if request.method in WRITES:
            check_same_origin(request)
    return await handler(request)


def check_loopback_host(request: web.Request) -> None:
    """421 unless the request names a loopback host (a browser always sends Host; a page that
    rebound its own name to 127.0.0.1 sends that name)."""
    host = request.headers.get("Host")
    if host is None:
        return  # HTTP/1.0 without Host: no browser, and the connection is on loopback anyway
    if not is_loopback_authority(host):
        reason = "not a loopback name (localhost, 127.0.0.1, [::1]); the API has no tokens"
        raise ApiError(
            421,
            "Misdirected Request",
            f"Host: {reason}: configure api_tokens to serve it under other names",
            [("Host", reason)],
        )


def check_same_origin(request: web.Request) -> None:
    """403 for a write sent by a page of another origin (browsers send Origin with every
    cross-origin write, and `null` from sandboxed frames and files)."""
    origin = request.headers.get("Origin")
    if origin is None or _same_origin(origin, request):
        return
    reason = "another origin's page may not change jobs (the API has no tokens)"
    raise ApiError(403, "Forbidden", f"Origin: {reason}", [("Origin", reason)])


def is_loopback_authority(authority: str) -> bool:
    match = _AUTHORITY.fullmatch(authority.strip())
    return match is not None and is_loopback(match[1])


def _same_origin(origin: str, request: web.Request) -> bool:
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme != request.scheme or parts.hostname is None or parts.username is not None:
        return False
    if parts.path or parts.query or parts.fragment:
        return False  # an origin is scheme://host[:port] and nothing else
    host = request.headers.get("Host") or request.host
    match = _AUTHORITY.fullmatch(host.strip())
    if match is None:
        return False
    default = DEFAULT_PORTS.get(parts.scheme)
    mine = (match[1].lower().strip("[]"), int(match[2]) if match[2] else default)
    return (parts.hostname.lower(), port or default) == mine


@web.middleware
async def body_deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Closes the connection of a request whose body is still incomplete BODY_TIMEOUT after its
    head; the handler reading it then fails, and that failure is the client's (408), not the
    server's."""
    if request.content.is_eof():  # no body, or all of it came with the head
        return await handler(request)
    deadline = BodyDeadline(request, request.app[BODY_TIMEOUT])
    try:
        return await handler(request)
    except ConnectionError:
        if not deadline.expired:
            raise
        reason = f"not received within {request.app[BODY_TIMEOUT]:g} s"
        raise ApiError(408, "Request Timeout", f"body: {reason}", [("body", reason)]) from None
    finally:
        deadline.cancel()


class BodyDeadline:
    def __init__(self, request: web.Request, seconds: float) -> None:
        self.expired = False
        self._request = request
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire)

    def _expire(self) -> None:
        if self._request.content.is_eof():
            return
        self.expired = True
        transport = self._request.transport
        if transport is not None:
            transport.close()

    def cancel(self) -> None:
        self._timer.cancel()
