"""What an unauthenticated client can send: never a 5xx, never a traceback in the log."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any
from unittest import mock

import pytest
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request

from tests.api.conftest import ADMIN, Api
from tickd.api import safejson
from tickd.api.models import JobCreate
from tickd.api.problems import ApiError
from tickd.api.routing import parse_body
from tickd.scheduler.ports.backends import JobQuery

EVERY_MINUTE = {"kind": "interval", "every_seconds": 60}
# Far more than any answer needs: a test that waits this long has failed.
ANSWER_TIMEOUT_SECONDS = 10


async def raw_exchange(api: Api, request: bytes, *, then_close: bool = False) -> bytes:
    """Bytes as they are sent, bypassing the client's own checks; the answer's bytes."""
    assert api.client.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", api.client.port)
    try:
        writer.write(request)
        await writer.drain()
        if then_close:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), ANSWER_TIMEOUT_SECONDS)
    finally:
        writer.close()


def status_and_body(answer: bytes) -> tuple[int, Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def request(
    method: str, target: bytes, *headers: bytes, body: bytes = b"", length: int | None = None
) -> bytes:
    host = [] if any(h.lower().startswith(b"host:") for h in headers) else [b"Host: 127.0.0.1"]
    lines = [f"{method} ".encode() + target + b" HTTP/1.1", *host, b"Connection: close", *headers]
    if body or length is not None:
        lines += [b"Content-Type: application/json", b"Content-Length: %d" % (length or len(body))]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@pytest.fixture
def server_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the API and aiohttp log at ERROR: a traceback each, for things that should not be."""
    caplog.set_level(logging.WARNING)
    return caplog.records  # read after the requests, filtered by the assertion below


def errors_in(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "authorization", [b"Bearer \xff\xfe", b"Bearer caf\xe9", b"\xff\xfe", b"Basic \xc3\x28"]
)
async def test_an_authorization_header_that_is_not_utf8_is_401(
    api: Api, server_errors: list[logging.LogRecord], authorization: bytes
) -> None:
    answer = await raw_exchange(
        api, request("GET", b"/v1/jobs", b"Authorization: " + authorization)
    )
    status, body = status_and_body(answer)
    assert status == 401, body
    assert body["title"] == "Unauthorized"
    assert errors_in(server_errors) == []


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


@pytest.mark.parametrize(
    "body",
    [
        nested(1000),
        b'{"name": "x", "params": ' + b'{"a": ' * 1000 + b"1" + b"}" * 1000 + b"}",
        b'{"params": ' + nested(100_000) + b"}",
    ],
)
async def test_json_nested_a_thousand_levels_deep_is_400_naming_the_body(
    api: Api, server_errors: list[logging.LogRecord], body: bytes
) -> None:
    auth = f"Authorization: Bearer {ADMIN}".encode()
    status, problem = status_and_body(
        await raw_exchange(api, request("POST", b"/v1/jobs", auth, body=body))
    )
    assert status == 400, problem
    assert problem["errors"] == [
        {"field": "body", "reason": f"nested deeper than {safejson.MAX_DEPTH} levels"}
    ]
    assert await api.store.list_jobs(JobQuery()) == []
    assert errors_in(server_errors) == []


def deep_params(levels: int) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for _ in range(levels):
        params = {"a": params}
    return params


async def test_the_depth_limit_is_the_documented_one(api: Api) -> None:
    job = {"handler": "boom", "schedule": {"kind": "interval", "every_seconds": 60}}
    # The body is one level, params a second: the rest is the params' own nesting.
    deepest = safejson.MAX_DEPTH - 2
    status, body, _ = await api.call(
        "POST", "/v1/jobs", json={**job, "name": "deepest", "params": deep_params(deepest)}
    )
    assert status == 201, body
    status, body, _ = await api.call(
        "POST", "/v1/jobs", json={**job, "name": "too-deep", "params": deep_params(deepest + 1)}
    )
    assert status == 400, body
    assert body["errors"][0]["field"] == "body"


async def test_a_body_in_another_encoding_than_utf8_is_400(api: Api) -> None:
    # Python's json reads UTF-16 too, where a depth check on the bytes would see other brackets.
    utf16 = ('{"params": ' + '{"a": ' * 2000 + "1" + "}" * 2001).encode("utf-16")
    status, body, _ = await api.call(
        "POST", "/v1/jobs", data=utf16, headers={"Content-Type": "application/json"}
    )
    assert status == 400, body
    assert body["errors"] == [{"field": "body", "reason": "not valid JSON"}]


async def test_a_client_gone_before_its_content_length_is_not_a_server_error() -> None:
    # What aiohttp's reader raises when the connection drops before the announced body ends.
    protocol = mock.Mock(_reading_paused=False)
    payload = StreamReader(protocol, 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(b'{"name": ')
    payload.set_exception(ConnectionResetError("Connection lost"))
    headers = {"Content-Type": "application/json", "Content-Length": "50"}
    partial = make_mocked_request("POST", "/v1/jobs", headers=headers, payload=payload)
    with pytest.raises(ApiError) as refused:
        await parse_body(partial, JobCreate)
    assert refused.value.status == 400
    assert refused.value.errors == [{"field": "body", "reason": "ended before its Content-Length"}]


HOSTILE = [
    ("GET", b"/v1/jobs", (b"Authorization: Bearer \xff\xfe",)),
    ("POST", b"/v1/jobs", (b"Content-Type: application/json", b"Content-Length: 2000")),
    ("GET", b"/v1/jobs/%ff%fe%00", ()),
    ("GET", b"/v1/jobs/" + b"%41" * 2600, ()),
    ("GET", b"/v1/jobs/%zz%4", ()),
    ("GET", b"/v1/jobs?name_prefix=%ff%fe", ()),
    ("GET", b"/v1/jobs?name_prefix=%zz%4", ()),
    ("GET", b"/v1/jobs?%ff=1", ()),
    ("GET", b"/v1/jobs?name_prefix=a%00b&handler=%00", ()),
    ("GET", b"/v1/executions?job_id=%00&handler=a%00", ()),
    ("GET", b"/v1/jobs?cursor=%%%%", ()),
    ("GET", b"/v1/jobs?cursor=YQ", ()),
    ("GET", b"/v1/jobs?cursor=%C3%A9", ()),
    ("GET", b"/v1/executions?cursor=" + base64.urlsafe_b64encode(b'{"at": "x", "id": 1}'), ()),
    ("GET", b"/v1/jobs?limit=99999999999999999999999999", ()),
    ("GET", b"/v1/jobs", (b"X-Big: " + b"a" * 100_000,)),
    ("GET", b"/v1/jobs", (b"Authorization: Bearer " + b"a" * 100_000,)),
    ("DELETE", b"/v1/jobs/x", (b"If-Match: \xff",)),
    ("GET", b"/v1/jobs", (b"Host: \xff\xfe",)),
    ("POST", b"/v1/jobs/x/pause", (b"Origin: http://\xff", b"Content-Type: \xff")),
    ("POST", b"/v1/jobs", (b"Content-Length: -1",)),
    ("POST", b"/v1/jobs", (b"Content-Length: 99999999999999999999999",)),
    ("POST", b"/v1/jobs", (b"Content-Length: 2", b"Content-Length: 3")),
    ("POST", b"/v1/jobs", (b"Transfer-Encoding: chunked",)),
]


@pytest.mark.parametrize(("method", "target", "headers"), HOSTILE)
async def test_hostile_requests_are_refused_without_a_server_error(
    api: Api,
    open_api: Api,
    server_errors: list[logging.LogRecord],
    method: str,
    target: bytes,
    headers: tuple[bytes, ...],
) -> None:
    for served in (api, open_api):
        body = nested(1000) if (b"Content-Length: 2000" in headers) else b"zz\r\n"
        answer = await raw_exchange(served, request(method, target, *headers) + body)
        status, body = status_and_body(answer)
        assert status < 500, body
    assert not [r for r in server_errors if r.name == "tickd.api"]


NUL_REQUESTS = [
    ("GET", "/v1/jobs/%00", None, 400, "path.job_id"),
    ("GET", "/v1/jobs?handler=%00", None, 400, "query.handler"),
    ("GET", "/v1/jobs?name_prefix=a%00", None, 400, "query.name_prefix"),
    ("GET", "/v1/executions?handler=%00", None, 400, "query.handler"),
    ("GET", "/v1/executions?job_id=%00", None, 400, "query.job_id"),
    ("GET", "/v1/executions/%00", None, 400, "path.execution_id"),
    (
        "POST",
        "/v1/jobs",
        {"name": "a\x00", "handler": "ping", "schedule": EVERY_MINUTE},
        422,
        "name",
    ),
    (
        "POST",
        "/v1/jobs",
        {"name": "a", "handler": "ping\x00", "schedule": EVERY_MINUTE},
        422,
        "handler",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "field"), NUL_REQUESTS)
async def test_a_nul_character_is_refused_by_name_and_changes_nothing(
    api: Api, method: str, path: str, body: dict[str, Any] | None, status: int, field: str
) -> None:
    """PostgreSQL refuses NUL in text; every store answers alike, before anything is read.
    (A job's params may hold one: they are kept as JSON text, test_job_admission.py.)"""
    answered, problem, _ = await api.call(method, path, json=body)

    assert answered == status, problem
    assert [error["field"] for error in problem["errors"]] == [field]
    assert "NUL" in problem["errors"][0]["reason"]
    assert await api.store.list_jobs(JobQuery(limit=10)) == []
