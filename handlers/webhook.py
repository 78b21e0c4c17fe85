"""`webhook`: an HTTP call as a job. Method, URL, headers and body come from the params.

Every attempt carries `Idempotency-Key` (the same for every attempt of one occurrence, so the
receiver can do the work once however often tickd retries), `X-Scheduled-At` (the occurrence,
ISO 8601 UTC) and `X-Attempt` (1, 2, ...). A 2xx is success; anything else, a timeout or an
unreachable endpoint is a failed attempt (WebhookFailed), retried within the job's deadline.
Redirects are not followed: a 3xx is a failed attempt.

The result holds the status, the latency and the first 4 KB of the response body. Headers
whose values are secret go in `secret_headers` (masked as a whole wherever params are shown);
values of secret-named `headers` (Authorization, X-Api-Key...) are masked by name. Neither
value, nor the URL's password, appears in a result or an error, even when the endpoint echoes
it back in its body, as it is or encoded (JSON escapes, percent-encoding, base64, Basic
credentials: see scheduler/secrets/echoes.py).
"""

from __future__ import annotations

import base64
import codecs
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
from multidict import CIMultiDict

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
from tickd.scheduler.secrets.echoes import longest_echo, mask_echoes, secret_values

DEFAULT_TIMEOUT_SECONDS = 10.0
# Below this no request gets an answer: a timeout that fails every attempt.
MIN_TIMEOUT_SECONDS = 0.1
BODY_PREVIEW_BYTES = 4096
# How much of the body a failed attempt's error message quotes.
ERROR_EXCERPT_CHARS = 200
METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET")
SECRET_PARAMS = frozenset({"secret_headers"})

_HEADERS = {"type": "object", "additionalProperties": {"type": "string"}}

PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "pattern": "^https?://", "maxLength": 2048},
        "method": {"enum": list(METHODS), "default": "POST"},
        "headers": {**_HEADERS, "description": "values of secret-named headers are masked"},
        "secret_headers": {**_HEADERS, "description": "sent as headers, never shown"},
        "body": {
            "description": "a string is sent as is; anything else as JSON",
            "type": ["string", "object", "array", "number", "boolean", "null"],
        },
        "timeout_seconds": {
            "type": "number",
            "minimum": MIN_TIMEOUT_SECONDS,
            "default": DEFAULT_TIMEOUT_SECONDS,
        },
    },
    "required": ["url"],
    "additionalProperties": False,
}


class WebhookFailed(Exception):
    """The endpoint was unreachable, too slow, or did not answer 2xx."""


@dataclass(frozen=True, kw_only=True)
class Occurrence:
    """What the receiver needs to tell a retry from a new occurrence."""

    idempotency_key: str
    scheduled_at: datetime
    attempt: int

    def headers(self) -> dict[str, str]:
        return {
            "Idempotency-Key": self.idempotency_key,
            "X-Scheduled-At": self.scheduled_at.isoformat(),
            "X-Attempt": str(self.attempt),
        }


@dataclass(frozen=True, kw_only=True)
class WebhookParams:
    url: str
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)
    secret_headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def parse(
        cls, params: Mapping[str, Any], destinations: DestinationPolicy | None = None
    ) -> WebhookParams:
        """Params as the schema describes them. The API checks the schema on the way in; this
        guards against what reached the store another way, with a message naming the param.
        Refuses a request that could never be made (see `request_refusal`): with
        `destinations`, also a URL whose address the policy refuses."""
        if not isinstance(params.get("url"), str):
            raise ValueError("params.url: a http:// or https:// URL is required")
        checked = cls(
            url=params["url"],
            method=str(params.get("method", "POST")).upper(),
            headers=_string_map(params.get("headers", {})),
            secret_headers=_string_map(params.get("secret_headers", {})),
            body=params.get("body"),
            timeout_seconds=float(params.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)),
        )
        if checked.method not in METHODS:
            raise ValueError(f"params.method: one of {', '.join(METHODS)}")
        groups = {"headers": checked.headers, "secret_headers": checked.secret_headers}
        refusal = request_refusal(checked.url, groups, destinations)
        if refusal is not None:
            raise InvalidParams(f"params.{refusal[0]}", refusal[1])
        return checked

    def secret_values(self) -> list[str]:
        """Every secret the request carries, as the far end may echo it: the values of
        `secret_headers` and of secret-named headers, the credentials in them without their
        scheme (`Bearer abc` -> `abc`), the URL's password, and `user:password`, which the
        request sends in base64 as its Basic credentials."""
        carried = {
            "url": self.url,
            "headers": dict(self.headers),
            "secret_headers": dict(self.secret_headers),
        }
        return secret_values(carried, SECRET_PARAMS)

    def request_headers(self, occurrence: Occurrence) -> CIMultiDict[str]:
        headers = CIMultiDict(self.headers)
        headers.update(self.secret_headers)
        if self.body is not None and not isinstance(self.body, str):
            headers.setdefault("Content-Type", "application/json")
        headers.update(occurrence.headers())  # tickd's own: a param cannot forge them
        return headers

    def request_body(self) -> bytes | None:
        if self.body is None:
            return None
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


def check_params(params: Mapping[str, Any], destinations: DestinationPolicy) -> None:
    WebhookParams.parse(params, destinations)


@handler(
    params_schema=PARAMS,
    secret_params=SECRET_PARAMS,
    check_params=check_params,
    default_key=endpoint_key,
)
async def webhook(ctx: HandlerContext) -> Result:
    params = WebhookParams.parse(ctx.params)
    occurrence = Occurrence(
        idempotency_key=ctx.idempotency_key, scheduled_at=ctx.scheduled_at, attempt=ctx.attempt
    )
    return await call(ctx.http, params, occurrence, time_left=ctx.remaining_seconds())


async def call(
    session: aiohttp.ClientSession,
    params: WebhookParams,
    occurrence: Occurrence,
    *,
    time_left: float,
) -> dict[str, Any]:
    """Make one attempt with `session`; raises WebhookFailed unless the answer is 2xx. Waits
    no longer than `time_left`, the run's deadline, even when the webhook's timeout is longer."""
    limit = TimeLimit.of(params.timeout_seconds, time_left)
    started = time.perf_counter()
    try:
        async with session.request(
            params.method,
            params.url,
            headers=params.request_headers(occurrence),
            data=params.request_body(),
            allow_redirects=False,
            timeout=limit.client_timeout(),
        ) as response:
            latency_ms = round((time.perf_counter() - started) * 1000, 1)
            body, truncated = await _redacted_body(response, params.secret_values())
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise WebhookFailed(failure_reason(exc, limit)) from exc
    preview = _preview(body)
    if not 200 <= response.status < 300:
        raise WebhookFailed(_failure_message(response.status, preview))
    return {
        "status": response.status,
        "latency_ms": latency_ms,
        **preview,
        "body_truncated": truncated,
    }


async def _redacted_body(
    response: aiohttp.ClientResponse, secrets: list[str]
) -> tuple[bytes, bool]:
    """The first 4 KB of the body with every secret masked, as it is and encoded (see
    mask_echoes). Reads as far further as the longest echo of a secret can reach, so that a
    secret straddling the 4 KB boundary is masked whole, not cut in half. Bytes that are not
    UTF-8 pass through as they are."""
    body, more = await read_prefix(response, BODY_PREVIEW_BYTES + longest_echo(secrets))
    if secrets:
        text = body.decode("utf-8", "surrogateescape")
        body = mask_echoes(text, secrets).encode("utf-8", "surrogateescape")
    return body[:BODY_PREVIEW_BYTES], more or len(body) > BODY_PREVIEW_BYTES


def _preview(body: bytes) -> dict[str, str]:
    """The body as text if it is UTF-8 (a character cut at the 4 KB boundary is dropped),
    otherwise as base64: binary decoded with replacement characters would grow six-fold
    in JSON and push the result past the execution record's size limit."""
    try:
        return {"body": codecs.getincrementaldecoder("utf-8")().decode(body, final=False)}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}


def _failure_message(status: int, preview: dict[str, str]) -> str:
    excerpt = preview.get("body", "")[:ERROR_EXCERPT_CHARS].strip()
    return f"status {status}, expected 2xx" + (f": {excerpt}" if excerpt else "")


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError("params headers: an object of strings")
    return {str(k): str(v) for k, v in value.items()}
