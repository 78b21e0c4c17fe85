"""Both clients against a real HTTP server on loopback that misbehaves on purpose: it trickles
its answer, repeats a cursor, sends a gzip bomb, a Retry-After that is no delay, or the token
back. Each call ends, in bounded time, with an error that says what went wrong and never holds
the token."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from tests.client.test_transport import JOB
from tickd import cli
from tickd.client import (
    ApiError,
    AsyncClient,
    Client,
    ClientError,
    ProtocolError,
    ResponseTooLarge,
    Retry,
    Timeout,
)

TOKEN = "tk-Vq3k/fS9+xLp0aZ="  # its URL-encoded forms differ from it
NO_WAIT = Retry(attempts=3, backoff_seconds=0.0, max_backoff_seconds=0.0)
# Longer than any call here may take; only a client that does not stop reaches it.
BOUND_SECONDS = 20.0
MiB = 1024 * 1024

# One answer of the server: given the request's number (1 for the first) and its head, what to
# write; the connection closes after it unless it returns True (kept alive).
Answer = Callable[[int, bytes, asyncio.StreamWriter], Awaitable[bool]]


class Server:
    """An HTTP/1.1 server on 127.0.0.1 answering each request as `answer` says."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.heads: list[bytes] = []
        self.url = ""
        self.connections: set[asyncio.StreamWriter] = set()
        self.serving: set[asyncio.Task[Any]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.serving.add(task)
        self.connections.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(_content_length(head))
                self.heads.append(head)
                if not await self.answer(len(self.heads), head, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client hung up, as a timeout makes it
        finally:
            writer.close()
            self.connections.discard(writer)
            self.serving.discard(task)

    async def close(self) -> None:
        """Hangs up on every client; each answer in progress sees it and ends (bounded)."""
        for writer in list(self.connections):
            writer.close()
        await asyncio.wait_for(asyncio.gather(*self.serving, return_exceptions=True), 5.0)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@contextlib.asynccontextmanager
async def serving(answer: Answer) -> AsyncIterator[Server]:
    server = Server(answer)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    server.url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    try:
        yield server
    finally:
        listening.close()
        await server.close()
        await listening.wait_closed()


def response(status: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def answering(*answers: bytes) -> Answer:
    """Answers requests with `answers` in turn, the last one again when they run out."""

    async def answer(number: int, head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answers[min(number, len(answers)) - 1])
        await writer.drain()
        return True

    return answer


def page(cursor: str | None) -> bytes:
    body = json.dumps({"items": [JOB], "next_cursor": cursor}).encode()
    return response("200 OK", body, Content_Type="application/json")


async def calling(blocking: bool, url: str, call: Callable[[Any], Any], **options: Any) -> Any:
    """`call(client)` with a client of `url` (the blocking one in a thread, since the server
    serves on this loop); an iterator it returns is read to its end."""
    options = {"token": TOKEN, "retry": NO_WAIT, **options}

    def read(result: Any) -> Any:
        return list(result) if isinstance(result, Iterator) else result

    async def run() -> Any:
        if blocking:
            with Client(url, **options) as client:
                return await asyncio.to_thread(lambda: read(call(client)))
        async with AsyncClient(url, **options) as client:
            result = call(client)
            if isinstance(result, AsyncIterator):
                return [item async for item in result]
            return await result

    return await asyncio.wait_for(run(), BOUND_SECONDS)


both = pytest.mark.parametrize("blocking", [True, False], ids=["sync", "async"])


# -- the whole call's time ------------------------------------------------------------------------


async def trickle(number: int, head: bytes, writer: asyncio.StreamWriter) -> bool:
    """A 200 whose body comes one byte every 0.2 s (for 6 s at most): each read is quick, the
    answer never whole."""
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 999\r\n\r\n"
    )
    for _ in range(30):
        if writer.is_closing():
            break
        writer.write(b" ")
        await writer.drain()
        await asyncio.sleep(0.2)  # the server's pace, not a wait of the test
    return False


async def trickle_headers(number: int, head: bytes, writer: asyncio.StreamWriter) -> bool:
    """A status line, then a header one byte every 0.2 s (for 6 s at most)."""
    writer.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    for _ in range(30):
        if writer.is_closing():
            break
        writer.write(b"z")
        await writer.drain()
        await asyncio.sleep(0.2)  # the server's pace, not a wait of the test
    return False


@both
@pytest.mark.parametrize("answer", [trickle, trickle_headers], ids=["body", "headers"])
async def test_a_server_trickling_its_answer_is_cut_off_when_the_calls_timeout_runs_out(
    blocking: bool, answer: Answer
) -> None:
    async with serving(answer) as server:
        started = time.monotonic()
        with pytest.raises(Timeout) as slow:
            await calling(blocking, server.url, lambda tickd: tickd.health(), timeout=1.0)
        took = time.monotonic() - started
    assert took < 4.0, f"the call went on for {took:.1f} s with a timeout of 1 s"
    assert "timeout of 1 s" in str(slow.value)
    assert len(server.heads) == 1, "no time was left for a retry"


@both
async def test_a_503_is_not_retried_past_the_calls_timeout(blocking: bool) -> None:
    unavailable = response("503 Service Unavailable", Retry_After="5")
    retry = Retry(attempts=3, backoff_seconds=0.0, max_backoff_seconds=10.0)
    async with serving(answering(unavailable)) as server:
        started = time.monotonic()
        with pytest.raises(ApiError) as refused:
            await calling(
                blocking, server.url, lambda tickd: tickd.health(), timeout=1.0, retry=retry
            )
        assert time.monotonic() - started < 4.0
    assert refused.value.status == 503 and len(server.heads) == 1


# -- cursors --------------------------------------------------------------------------------------


@both
@pytest.mark.parametrize(
    "cursors",
    [["c1", "c1"], ["c1", "c2", "c1"]],
    ids=["repeated", "cycle"],
)
async def test_a_list_that_gives_a_cursor_a_second_time_stops_with_a_protocol_error_naming_it(
    blocking: bool, cursors: list[str]
) -> None:
    # After 50 pages the server ends the list: a client that never stops reads them all.
    pages = [page(cursor) for cursor in cursors] + [page(cursors[-1])] * 48 + [page(None)]
    async with serving(answering(*pages)) as server:
        with pytest.raises(ProtocolError) as looping:
            await calling(blocking, server.url, lambda tickd: tickd.iter_jobs(limit=1))
    assert "'c1' a second time" in str(looping.value)
    assert len(server.heads) == len(cursors), "not one page more than the cursors given"


@both
async def test_a_list_starting_at_a_cursor_stops_when_it_is_given_again(blocking: bool) -> None:
    async with serving(answering(page("c0"), page(None))) as server:
        with pytest.raises(ProtocolError, match="'c0' a second time"):
            await calling(blocking, server.url, lambda tickd: tickd.iter_jobs(limit=1, cursor="c0"))
    assert len(server.heads) == 1


# -- the size of an answer ------------------------------------------------------------------------


def gzip_of_zeros(size: int) -> bytes:
    """`size` bytes of zeros in gzip: a few tens of kilobytes."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    chunk = b"0" * MiB
    parts = [squeeze.compress(chunk) for _ in range(size // MiB)]
    return b"".join([*parts, squeeze.flush()])


@both
async def test_a_gzip_bomb_is_refused_once_its_decoded_size_passes_64_mib(blocking: bool) -> None:
    bomb = gzip_of_zeros(65 * MiB)
    assert len(bomb) < MiB
    answer = response("200 OK", bomb, Content_Type="application/json", Content_Encoding="gzip")
    async with serving(answering(answer)) as server:
        with pytest.raises(ResponseTooLarge) as huge:
            await calling(blocking, server.url, lambda tickd: tickd.list_jobs())
    assert "more than 67,108,864 bytes" in str(huge.value) and "/v1/jobs" in str(huge.value)
    assert len(server.heads) == 1, "an answer too large is final"


@both
async def test_max_response_bytes_bounds_a_plain_answer_and_allows_one_within_it(
    blocking: bool,
) -> None:
    body = json.dumps({"status": "ok", "padding": "x" * 2000}).encode()
    answer = response("200 OK", body, Content_Type="application/json")
    async with serving(answering(answer)) as server:
        with pytest.raises(ResponseTooLarge, match="more than 1,000 bytes"):
            await calling(
                blocking, server.url, lambda tickd: tickd.health(), max_response_bytes=1000
            )
        health = await calling(
            blocking, server.url, lambda tickd: tickd.health(), max_response_bytes=len(body)
        )
    assert health.status == "ok"


@both
async def test_a_gzipped_answer_within_the_limit_reads_as_usual(blocking: bool) -> None:
    body = zlib.compress(json.dumps({"status": "ok"}).encode())
    answer = response("200 OK", body, Content_Type="application/json", Content_Encoding="deflate")
    async with serving(answering(answer)) as server:
        health = await calling(blocking, server.url, lambda tickd: tickd.health())
    assert health.status == "ok"


# -- Retry-After ----------------------------------------------------------------------------------

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "wait"),
    [
        ("soon", 1.0),
        ("-5", 1.0),
        ("1e309", 1.0),
        ("²", 1.0),
        ("", 1.0),
        ("9" * 5000, 300.0),
        ("120", 120.0),
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        (format_datetime(NOW - timedelta(hours=1), usegmt=True), 0.0),
        ("Mon, 99 Foo 2026 99:99:99 GMT", 1.0),
    ],
    ids=[
        "word",
        "negative",
        "float-overflow",
        "unicode-digit",
        "empty",
        "huge",
        "seconds",
        "date-ahead",
        "date-past",
        "bad-date",
    ],
)
def test_retry_after_is_read_as_seconds_or_a_date_at_most_300_s_and_junk_is_ignored(
    header: str, wait: float
) -> None:
    retry = Retry(backoff_seconds=1.0, max_backoff_seconds=600.0)
    assert retry.delay(1, retry_after=header, now=NOW) == wait


@both
@pytest.mark.parametrize(
    "header", ["soon", "-5", "1e309", "²", "9" * 5000, "Thu, 01 Jan 1970 00:00:00 GMT"]
)
async def test_a_503_with_a_retry_after_that_is_no_delay_is_still_retried(
    blocking: bool, header: str
) -> None:
    unavailable = f"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: {header}"
    ok = response("200 OK", b'{"status": "ok"}', Content_Type="application/json")
    async with serving(answering(f"{unavailable}\r\n\r\n".encode(), ok)) as server:
        health = await calling(blocking, server.url, lambda tickd: tickd.health())
    assert health.status == "ok" and len(server.heads) == 2


# -- the token, echoed ----------------------------------------------------------------------------


def problem(status: int, detail: str, errors: list[dict[str, str]]) -> bytes:
    body = {"title": "Unauthorized", "status": status, "detail": detail, "errors": errors}
    return json.dumps(body).encode()


ECHOES = {
    "problem-details": response(
        "401 Unauthorized",
        problem(
            401,
            f"no such key: {TOKEN}",
            [{"field": "Authorization", "reason": f"{TOKEN} is unknown"}],
        ),
        Content_Type="application/problem+json",
    ),
    "proxy-page": response(
        "502 Bad Gateway",
        f"<a href='/login?next=/v1/jobs&k={quote(TOKEN, safe='')}'>log in</a>"
        f" or <a href='/?k={quote_plus(TOKEN)}'>here</a>".encode(),
        Content_Type="text/html",
    ),
    "status-line": b"HTTP/1.1 200 OK " + TOKEN.encode() + b"\x00\r\n\r\n",
    "redirect": response("302 Found", Location=f"http://elsewhere.test/?next={quote(TOKEN)}"),
}


def token_in(text: str) -> bool:
    return any(form in text for form in (TOKEN, quote(TOKEN, safe=""), quote_plus(TOKEN)))


@both
@pytest.mark.parametrize("echo", list(ECHOES), ids=list(ECHOES))
async def test_a_token_the_server_echoes_is_masked_in_every_error(
    blocking: bool, echo: str
) -> None:
    async with serving(answering(ECHOES[echo])) as server:
        with pytest.raises(ClientError) as failed:
            await calling(blocking, server.url, lambda tickd: tickd.list_jobs())
    error = failed.value
    shown = [str(error), repr(error), *map(str, error.args)]
    shown += [repr(chained) for chained in (error.__cause__, error.__context__) if chained]
    if isinstance(error, ApiError):
        shown += [error.problem.model_dump_json(), str(error.detail), *map(repr, error.errors)]
    assert not any(token_in(text) for text in shown), shown
    if echo != "redirect":  # whose message quotes no part of the answer
        assert "***" in str(error) or "***" in str(getattr(error, "detail", ""))


@pytest.mark.parametrize("echo", list(ECHOES), ids=list(ECHOES))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
async def test_the_command_line_never_prints_a_token_the_server_echoes(
    echo: str, as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["jobs", "list", "--token", TOKEN, *(["--json"] if as_json else [])]
    async with serving(answering(ECHOES[echo])) as server:
        status = await asyncio.wait_for(
            asyncio.to_thread(cli.main, [*argv, "--url", server.url]), BOUND_SECONDS
        )
    printed = capsys.readouterr()
    assert status == 1 and printed.err
    assert not token_in(printed.out + printed.err), printed.err


def test_a_timeout_or_a_limit_that_is_no_number_of_seconds_or_bytes_is_refused() -> None:
    for bad in ({"timeout": 0}, {"timeout": -1.0}, {"max_response_bytes": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Client("http://127.0.0.1:1", **bad)
