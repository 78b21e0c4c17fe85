"""`http_check`: a health check. GET or HEAD a URL, expect a status (default any 2xx) and
optionally a substring of the body, within a timeout.

A failing check raises CheckFailed, so it is a failed attempt like any other: retried within
the job's deadline, counted in the metrics, published as `job.execution.failed`. The result of
a passing check records the status and the latency (until the response headers arrived).
Redirects are not followed: a 301 is the answer under test, not a step towards it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tickd.scheduler.plugin.api import (
    DestinationPolicy,
    HandlerContext,
    InvalidParams,
    Result,
    endpoint_key,
    failure_reason,
    handler,
    read_prefix,
    request_refusal,
)
from tickd.scheduler.plugin.http import TimeLimit

DEFAULT_TIMEOUT_SECONDS = 10.0
# Below this no check gets an answer: a timeout that fails every attempt.
MIN_TIMEOUT_SECONDS = 0.1
# `body_contains` looks at this much of the body, no more.
BODY_SEARCH_BYTES = 1024 * 1024

_STATUS = {"type": "integer", "minimum": 100, "maximum": 599}
_HEADERS = {"type": "object", "additionalProperties": {"type": "string"}}

PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "pattern": "^https?://", "maxLength": 2048},
        "method": {"enum": ["GET", "HEAD"], "default": "GET"},
        "expected_status": {
            "description": "a status or a list of them; by default any 2xx",
            "oneOf": [_STATUS, {"type": "array", "items": _STATUS, "minItems": 1}],
        },
        "body_contains": {"type": "string", "minLength": 1},
        "timeout_seconds": {
            "type": "number",
            "minimum": MIN_TIMEOUT_SECONDS,
            "default": DEFAULT_TIMEOUT_SECONDS,
        },
        "headers": {**_HEADERS, "description": "values of secret-named headers are masked"},
    },
    "required": ["url"],
    "additionalProperties": False,
}


class CheckFailed(Exception):
    """The endpoint was unreachable, too slow, or answered something unexpected."""


@dataclass(frozen=True, kw_only=True)
class CheckParams:
    url: str
    method: str = "GET"
    # None: any 2xx.
    expected_status: frozenset[int] | None = None
    body_contains: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(
        cls, params: Mapping[str, Any], destinations: DestinationPolicy | None = None
    ) -> CheckParams:
        """Params as the schema describes them. The API checks the schema on the way in; this
        guards against what reached the store another way, with a message naming the param.
        Refuses a request that could never be made (see `request_refusal`): with
        `destinations`, also a URL whose address the policy refuses."""
        if not isinstance(params.get("url"), str):
            raise ValueError("params.url: a http:// or https:// URL is required")
        checked = cls(
            url=params["url"],
            method=str(params.get("method", "GET")).upper(),
            expected_status=_statuses(params.get("expected_status")),
            body_contains=params.get("body_contains"),
            timeout_seconds=float(params.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)),
            headers={str(k): str(v) for k, v in params.get("headers", {}).items()},
        )
        if checked.method not in ("GET", "HEAD"):
            raise ValueError("params.method: GET or HEAD")
        if checked.method == "HEAD" and checked.body_contains:
            raise ValueError("params.body_contains: a HEAD response has no body to search")
        refusal = request_refusal(checked.url, {"headers": checked.headers}, destinations)
        if refusal is not None:
            raise InvalidParams(f"params.{refusal[0]}", refusal[1])
        return checked

    def accepts(self, status: int) -> bool:
        if self.expected_status is None:
            return 200 <= status < 300
        return status in self.expected_status

    def describe_expected(self) -> str:
        if self.expected_status is None:
            return "2xx"
        return " or ".join(str(s) for s in sorted(self.expected_status))


def check_params(params: Mapping[str, Any], destinations: DestinationPolicy) -> None:
    CheckParams.parse(params, destinations)


@handler(params_schema=PARAMS, check_params=check_params, default_key=endpoint_key)
async def http_check(ctx: HandlerContext) -> Result:
    params = CheckParams.parse(ctx.params)
    return await check(ctx.http, params, time_left=ctx.remaining_seconds())


async def check(
    session: aiohttp.ClientSession, params: CheckParams, *, time_left: float
) -> dict[str, Any]:
    """Run one check with `session`; raises CheckFailed. Waits no longer than `time_left`,
    the run's deadline, even when the check's own timeout is longer."""
    limit = TimeLimit.of(params.timeout_seconds, time_left)
    started = time.perf_counter()
    try:
        async with session.request(
            params.method,
            params.url,
            headers=params.headers,
            allow_redirects=False,
            timeout=limit.client_timeout(),
        ) as response:
            latency_ms = round((time.perf_counter() - started) * 1000, 1)
            body = await _body_to_search(response, params)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise CheckFailed(failure_reason(exc, limit)) from exc
    _verify(params, response.status, body, latency_ms)
    return {"status": response.status, "latency_ms": latency_ms}


async def _body_to_search(response: aiohttp.ClientResponse, params: CheckParams) -> bytes:
    if not params.body_contains:
        return b""
    body, _ = await read_prefix(response, BODY_SEARCH_BYTES)
    return body


def _verify(params: CheckParams, status: int, body: bytes, latency_ms: float) -> None:
    if not params.accepts(status):
        raise CheckFailed(
            f"status {status}, expected {params.describe_expected()} ({latency_ms:g} ms)"
        )
    if params.body_contains and params.body_contains.encode() not in body:
        expected = params.body_contains[:100]
        raise CheckFailed(f"status {status}, but the body does not contain {expected!r}")


def _statuses(value: object) -> frozenset[int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        return frozenset({value})
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return frozenset(value)
    raise ValueError("params.expected_status: a status code or a list of them")
