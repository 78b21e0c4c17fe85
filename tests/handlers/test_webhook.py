"""`webhook` against a real receiver on loopback (allowlisted, as an internal target)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, quote_plus

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import T0, EngineFactory, Harness, make_job
from tests.handlers.conftest import Dials, Serve
from tests.test_secret_echoes import b64, dotnet_json, go_json, lower_hex_percent, php_json
from tickd.handlers.webhook import (
    PARAMS,
    Occurrence,
    WebhookFailed,
    WebhookParams,
    call,
    webhook,
)
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.plugin.http import UNREACHABLE, safe_client_session
from tickd.scheduler.ports.backends import ExecutionQuery
from tickd.scheduler.secrets.masking import MASK, mask

SCHEDULED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET = "whsec-7f3a9c1e5b"
TOKEN = "tok-0d4e8b2a6c"


@dataclass(frozen=True)
class Seen:
    method: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Records what it receives and answers with the next scripted reply (the last repeats).
    A reply of status 0 echoes the request's headers back, as some endpoints do."""

    replies: list[tuple[int, bytes]] = field(default_factory=lambda: [(200, b"accepted")])
    seen: list[Seen] = field(default_factory=list)
    delay: float = 0.0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/hook", self._receive)
        return app

    async def _receive(self, request: web.Request) -> web.Response:
        self.seen.append(Seen(request.method, dict(request.headers), await request.read()))
        await asyncio.sleep(self.delay)
        status, body = self.replies[min(len(self.seen), len(self.replies)) - 1]
        if status == 0:
            return web.Response(status=500, text=json.dumps(dict(request.headers)))
        return web.Response(status=status, body=body)


async def start_receiver(serve: Serve, receiver: Receiver) -> str:
    return f"{await serve(receiver.app())}/hook"


def occurrence(attempt: int = 1) -> Occurrence:
    return Occurrence(idempotency_key="job-1:occ-1", scheduled_at=SCHEDULED, attempt=attempt)


async def send(
    session: aiohttp.ClientSession, attempt: int = 1, time_left: float = 30.0, **params: Any
) -> dict[str, Any]:
    checked = WebhookParams.parse(params)
    return await call(session, checked, occurrence(attempt), time_left=time_left)


async def test_a_2xx_is_success_with_status_and_body(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver(replies=[(202, b'{"queued": true}')])
    url = await start_receiver(serve, receiver)
    result = await send(loopback_session, url=url, body={"invoice": 42})
    assert result["status"] == 202
    assert (result["body"], result["body_truncated"]) == ('{"queued": true}', False)
    assert isinstance(result["latency_ms"], float)
    [seen] = receiver.seen
    assert (seen.method, json.loads(seen.body)) == ("POST", {"invoice": 42})
    assert seen.headers["Content-Type"] == "application/json"


async def test_every_attempt_carries_the_occurrence_headers(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    """A 500 fails the attempt; the retry carries the same key, so the receiver can tell."""
    receiver = Receiver(replies=[(500, b"try later"), (200, b"done")])
    url = await start_receiver(serve, receiver)
    with pytest.raises(WebhookFailed, match=r"^status 500, expected 2xx: try later$"):
        await send(loopback_session, attempt=1, url=url, method="PUT", body="payload")
    result = await send(loopback_session, attempt=2, url=url, method="PUT", body="payload")
    assert result["status"] == 200
    keys = [s.headers["Idempotency-Key"] for s in receiver.seen]
    assert keys == ["job-1:occ-1", "job-1:occ-1"]
    assert [s.headers["X-Attempt"] for s in receiver.seen] == ["1", "2"]
    assert {s.headers["X-Scheduled-At"] for s in receiver.seen} == {"2026-03-01T12:00:00+00:00"}
    assert {(s.method, s.body) for s in receiver.seen} == {("PUT", b"payload")}


async def test_params_cannot_forge_the_occurrence_headers(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver()
    url = await start_receiver(serve, receiver)
    headers = {"idempotency-key": "forged", "X-Attempt": "99", "X-Tenant": "acme"}
    await send(loopback_session, url=url, headers=headers)
    [seen] = receiver.seen
    assert (seen.headers["Idempotency-Key"], seen.headers["X-Attempt"]) == ("job-1:occ-1", "1")
    assert seen.headers["X-Tenant"] == "acme"


async def test_only_the_first_4_kb_of_the_body_is_kept(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver(replies=[(200, b"x" * 100_000)])
    url = await start_receiver(serve, receiver)
    result = await send(loopback_session, url=url)
    assert (len(result["body"]), result["body_truncated"]) == (4096, True)


async def test_a_binary_body_is_kept_as_base64(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver(replies=[(200, bytes(range(256)) * 64)])
    url = await start_receiver(serve, receiver)
    result = await send(loopback_session, url=url)
    assert "body" not in result
    assert base64.b64decode(result["body_base64"]) == bytes(range(256)) * 16
    assert len(json.dumps(result)) < 16 * 1024, "fits the execution record's result limit"


async def test_no_answer_within_the_timeout_fails_the_attempt(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver(delay=2.0)
    url = await start_receiver(serve, receiver)
    with pytest.raises(WebhookFailed, match=r"^no response within 0\.2 s$"):
        await send(loopback_session, url=url, timeout_seconds=0.2)


async def test_a_redirect_fails_the_attempt_and_is_not_followed(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver()
    target = await start_receiver(serve, receiver)

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(target)

    app = web.Application()
    app.router.add_post("/", moved)
    with pytest.raises(WebhookFailed, match=r"^status 307, expected 2xx"):
        await send(loopback_session, url=f"{await serve(app)}/")
    assert receiver.seen == []


async def test_a_refused_destination_fails_with_the_generic_message(dials: Dials) -> None:
    async with safe_client_session() as session:
        with pytest.raises(WebhookFailed) as failed:
            await send(session, url="http://[::ffff:169.254.169.254]/latest/api/token")
    assert str(failed.value) == UNREACHABLE
    assert dials == []


# -- secrets ------------------------------------------------------------------------------------


def secret_params(url: str) -> dict[str, Any]:
    return {
        "url": url,
        "headers": {"Authorization": f"Bearer {TOKEN}", "X-Tenant": "acme"},
        "secret_headers": {"X-Signature": SECRET},
    }


async def test_secret_headers_are_sent_but_never_shown(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver(replies=[(200, f"echo {SECRET} and {TOKEN}".encode())])
    url = await start_receiver(serve, receiver)
    params = secret_params(url)
    result = await send(loopback_session, **params)
    [seen] = receiver.seen
    assert seen.headers["X-Signature"] == SECRET
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert result["body"] == f"echo {MASK} and {MASK}"
    shown = json.dumps(mask(params, webhook.secret_params))
    assert SECRET not in shown and TOKEN not in shown and "acme" in shown


async def test_secrets_echoed_in_a_failure_stay_out_of_the_error(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver(replies=[(0, b"")])  # a 500 that echoes the request headers
    url = await start_receiver(serve, receiver)
    with pytest.raises(WebhookFailed) as failed:
        await send(loopback_session, **secret_params(url))
    message = str(failed.value)
    assert message.startswith("status 500") and "acme" in message
    assert SECRET not in message and TOKEN not in message


async def test_a_secret_cut_by_the_4_kb_boundary_is_masked_whole(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    receiver = Receiver(replies=[(200, b"." * 4090 + SECRET.encode() + b"." * 100)])
    url = await start_receiver(serve, receiver)
    result = await send(loopback_session, **secret_params(url))
    assert result["body"] == "." * 4090 + MASK + "..."


# How far ends commonly quote a header back, by a name that is also a path: (the secret sent,
# how the far end encodes it).
ECHOES: dict[str, tuple[str, Callable[[str], str]]] = {
    "php-json_encode": ("whsec/7f3a+9c1e/5b==", php_json),
    "go-encoding-json": ("whsec&<7f3a>&9c1e", go_json),
    "dotnet-system-text-json": ("whsec+<7f3a>&'9c1e", dotnet_json),
    "percent-upper-hex": ("whsec/7f3a+9c1e=&?", lambda s: quote(s, safe="")),
    "percent-lower-hex": ("whsec/7f3a+9c1e=&?", lower_hex_percent),
    "form": ("whsec 7f3a+9c1e/=", quote_plus),
    "url-in-php-json": ("whsec 7f3a/9c1e", lambda s: php_json(quote(s, safe="/"))),
    "base64": ("whsec-7f3a9c1e5b", b64),
    "base64-in-php-json": ("whsec?>>~~?", lambda s: php_json(b64(s))),
    "base64url": ("whsec?>>~~?", lambda s: base64.urlsafe_b64encode(s.encode()).decode()),
}


class EchoingReceiver:
    """Answers `before <X-Signature as the far end encodes it> after`, the encoding named by
    the last part of the path; `/authorization` quotes the Authorization header."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/echo/{encoding}", self._echo)
        app.router.add_route("*", "/authorization", self._authorization)
        return app

    async def _echo(self, request: web.Request) -> web.Response:
        _, encode = ECHOES[request.match_info["encoding"]]
        return web.Response(text=f"before {encode(request.headers['X-Signature'])} after")

    async def _authorization(self, request: web.Request) -> web.Response:
        authorization = request.headers["Authorization"]
        return web.Response(text=f"{authorization} | {php_json(authorization)}")


@pytest.mark.parametrize("encoding", ECHOES)
async def test_a_secret_header_echoed_encoded_is_masked(
    encoding: str, serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    """Under a header name that does not look secret: only `secret_headers` says it is."""
    secret, encode = ECHOES[encoding]
    assert encode(secret) != secret
    url = f"{await serve(EchoingReceiver().app())}/echo/{encoding}"
    result = await send(loopback_session, url=url, secret_headers={"X-Signature": secret})
    assert result["body"] == f"before {MASK} after"


async def test_url_credentials_echoed_as_basic_authorization_are_masked(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    """The client sends a URL's user and password as a Basic Authorization header: base64 of
    `user:password`, which the far end quotes as it is and escaped."""
    base = await serve(EchoingReceiver().app())
    url = base.replace("http://", "http://bot:pw%2Fs3cret-1@") + "/authorization"
    result = await send(loopback_session, url=url)
    assert result["body"] == f"Basic {MASK} | Basic {MASK}"


async def test_a_secret_header_in_the_json_an_endpoint_echoes_is_masked(
    serve: Serve, loopback_session: aiohttp.ClientSession
) -> None:
    """Python's json.dumps, as most echo services: non-ASCII as `\u00e9`."""
    receiver = Receiver(replies=[(0, b"")])  # a 500 that echoes the request headers as JSON
    url = await start_receiver(serve, receiver)
    secret = "clé/secrète+42"
    with pytest.raises(WebhookFailed) as failed:
        await send(loopback_session, url=url, secret_headers={"X-Signature": secret})
    message = str(failed.value)
    assert f'"X-Signature": "{MASK}"' in message, message


async def test_a_stored_result_shows_no_encoded_echo(
    make_engine: EngineFactory, serve: Serve
) -> None:
    """What a read token is shown: the execution record."""
    base = await serve(EchoingReceiver().app())
    h = make_engine({"webhook": webhook}, http_allow=["127.0.0.1"])
    for name, (secret, _) in ECHOES.items():
        params = {"url": f"{base}/echo/{name}", "secret_headers": {"X-Signature": secret}}
        await h.add(make_job(f"hook-{name}", "webhook", params=params))
    await h.engine.drain()

    runs = await h.store.list_executions(ExecutionQuery(limit=len(ECHOES) + 1))
    assert len(runs) == len(ECHOES)
    assert {run.result["body"] for run in runs if run.result} == {f"before {MASK} after"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "params.url"),
        ({"url": "http://x/", "method": "TRACE"}, "params.method"),
        ({"url": "http://x/", "headers": ["a"]}, "headers"),
        ({"url": "http://"}, "params.url: must name a host"),
        ({"url": "http://x/", "secret_headers": {"X-Sig": "s\n"}}, "params.secret_headers.X-Sig"),
        ({"url": "http://u@x/", "secret_headers": {"Authorization": "b"}}, "params.url"),
    ],
)
def test_bad_params_are_named(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WebhookParams.parse(params)


def test_the_handler_declares_its_schema_and_secrets() -> None:
    assert webhook.params_schema is PARAMS
    assert webhook.secret_params == {"secret_headers"}
    assert PARAMS["required"] == ["url"]


# -- through the engine ---------------------------------------------------------------------------


async def test_the_engine_retries_a_failed_call_with_one_idempotency_key(
    make_engine: EngineFactory, serve: Serve
) -> None:
    receiver = Receiver(replies=[(503, b"busy"), (503, b"busy"), (200, b"ok")])
    url = await start_receiver(serve, receiver)
    h = make_engine({"webhook": webhook}, http_allow=["127.0.0.1"])
    job = await h.add(make_job("hook", "webhook", params={"url": url}, max_retries=3))
    await h.engine.drain()

    [run] = await executions(h)
    assert job.id
    assert (run.status, run.attempts, run.result and run.result["status"]) == (
        Status.SUCCESS,
        3,
        200,
    )
    assert {s.headers["Idempotency-Key"] for s in receiver.seen} == {f"{job.id}:{T0.isoformat()}"}
    assert [s.headers["X-Attempt"] for s in receiver.seen] == ["1", "2", "3"]


async def executions(h: Harness) -> list[Execution]:
    return list(await h.store.list_executions(ExecutionQuery(limit=10)))
