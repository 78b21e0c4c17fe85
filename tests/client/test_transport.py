"""Retries, timeouts and answers that are not the API's, on a scripted transport: which calls
are sent again, how often, and what a caller gets when the server never answers well."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tickd.api.models import JobPatch
from tickd.client import (
    ApiError,
    AsyncClient,
    BadUrl,
    Client,
    NotTickd,
    Retry,
    ServiceUnavailable,
    Timeout,
    TransportFailed,
)

URL = "http://tickd.test"
TOKEN = "secret-token-Vq3kfS9xLp0aZ"
NO_WAIT = Retry(attempts=3, backoff_seconds=0.0)
JOB = {
    "id": "j1",
    "name": "job",
    "handler": "noop",
    "schedule": {"kind": "interval", "every_seconds": 60},
    "params": {},
    "enabled": True,
    "next_run_at": None,
    "timeout_seconds": 60,
    "max_retries": 0,
    "priority": "normal",
    "misfire": {"policy": "coalesce", "grace_seconds": 60},
    "jitter_seconds": 0,
    "lease": None,
    "revision": 3,
    "consecutive_failures": 0,
    "paused_reason": None,
    "last_execution": None,
    "system": False,
    "created_at": "2026-03-02T09:00:00Z",
    "updated_at": "2026-03-02T09:00:00Z",
}
UNAVAILABLE = {"title": "Service Unavailable", "status": 503, "detail": "store down"}

Answer = Callable[[httpx.Request], httpx.Response]


class Script:
    """Answers requests in turn (the last one again when they run out); records what came."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer(request)


def status(code: int, body: object = None, **headers: str) -> Answer:
    return lambda request: httpx.Response(code, json=body, headers=headers)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def too_slow(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def client(script: Script) -> Client:
    return Client(URL, token=TOKEN, retry=NO_WAIT, transport=httpx.MockTransport(script))


def test_a_read_is_sent_again_after_a_503_and_a_refused_connection() -> None:
    script = Script(status(503, UNAVAILABLE), refused, status(200, JOB))
    with client(script) as tickd:
        assert tickd.get_job("j1").revision == 3
    assert len(script.seen) == 3
    assert script.seen[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_put_with_if_match_and_a_delete_are_retried_a_put_without_it_is_not() -> None:
    script = Script(status(503, UNAVAILABLE), status(204))
    with client(script) as tickd:
        tickd.delete_job("j1")
    assert [r.method for r in script.seen] == ["DELETE", "DELETE"]

    script = Script(status(503, UNAVAILABLE))
    with client(script) as tickd, pytest.raises(ServiceUnavailable):
        tickd.patch_job("j1", JobPatch(enabled=False), if_match=3)
    assert len(script.seen) == 1, "a PATCH is never sent twice"


def test_a_post_is_never_sent_twice() -> None:
    script = Script(refused)
    with client(script) as tickd, pytest.raises(TransportFailed):
        tickd.trigger_job("j1")
    assert len(script.seen) == 1

    script = Script(status(503, UNAVAILABLE))
    with client(script) as tickd, pytest.raises(ServiceUnavailable) as unavailable:
        tickd.trigger_job("j1")
    assert len(script.seen) == 1 and unavailable.value.detail == "store down"


def test_retries_stop_after_the_attempts_and_raise_the_last_failure() -> None:
    script = Script(status(503, UNAVAILABLE))
    with client(script) as tickd, pytest.raises(ServiceUnavailable):
        tickd.list_jobs()
    assert len(script.seen) == NO_WAIT.attempts


def test_a_timeout_raises_timeout_without_the_token() -> None:
    script = Script(too_slow)
    with client(script) as tickd, pytest.raises(Timeout) as slow:
        tickd.list_handlers()
    assert len(script.seen) == NO_WAIT.attempts
    assert TOKEN not in str(slow.value) and TOKEN not in repr(tickd)


def test_an_answer_that_is_not_problem_details_still_raises_with_its_status() -> None:
    script = Script(lambda request: httpx.Response(502, text="<html>bad gateway</html>"))
    with client(script) as tickd, pytest.raises(ApiError) as failed:
        tickd.health()
    assert failed.value.status == 502 and "bad gateway" in str(failed.value.detail)


def test_a_proxys_error_page_is_its_status_and_its_words_on_one_line() -> None:
    page = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>\n</html>"
    script = Script(lambda request: httpx.Response(502, text=page))
    with client(script) as tickd, pytest.raises(ApiError) as failed:
        tickd.list_jobs()
    assert failed.value.status == 502 and "\n" not in str(failed.value)
    assert "502 Bad Gateway" in str(failed.value.detail)


@pytest.mark.parametrize(
    "answer",
    [
        lambda request: httpx.Response(200, text="<html>Welcome to nginx!</html>"),
        status(200, {"hello": "world"}),
        status(200, {"items": [1, "two"], "next_cursor": None}),
        lambda request: httpx.Response(200, content=b'{"items": ["\xff"]}'),
        status(302, Location="http://elsewhere.test/login"),
    ],
    ids=["html", "other-json", "odd-items", "not-utf8", "redirect"],
)
def test_an_answer_the_api_never_gives_raises_not_tickd(answer: Answer) -> None:
    script = Script(answer)
    with client(script) as tickd, pytest.raises(NotTickd) as impostor:
        tickd.list_jobs()
    assert "tickd API" in str(impostor.value) and TOKEN not in str(impostor.value)
    assert len(script.seen) == 1, "an answer, if not the API's, is final"


@pytest.mark.parametrize(
    "url",
    ["http://[::1", "ftp://x", "localhost:8080", "http://", "http://host:99999", "http://h:port"],
)
def test_a_base_url_that_cannot_be_called_raises_bad_url(url: str) -> None:
    with pytest.raises(BadUrl, match=r"URL|[Pp]ort|IPv6"):
        Client(url)


def test_credentials_in_the_base_url_are_refused_and_shown_masked() -> None:
    with pytest.raises(BadUrl) as refused:
        AsyncClient(f"http://ops:{TOKEN}@tickd.test")
    assert "credentials in the URL" in str(refused.value)
    assert TOKEN not in str(refused.value) and "http://***@tickd.test" in str(refused.value)


def test_a_not_ready_instance_is_an_answer_not_an_error() -> None:
    not_ready = {"ready": False, "problems": {"store": "down"}}
    script = Script(status(503, not_ready))
    with client(script) as tickd:
        assert tickd.readiness().problems == {"store": "down"}
    assert len(script.seen) == 1


def test_the_backoff_doubles_up_to_its_ceiling_and_heeds_retry_after() -> None:
    retry = Retry(attempts=5, backoff_seconds=1.0, max_backoff_seconds=3.0)
    assert [retry.delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 3.0]
    assert retry.delay(1, retry_after="2") == 2.0
    assert retry.delay(1, retry_after="120") == 3.0


async def test_the_async_client_retries_reads_and_not_posts() -> None:
    script = Script(status(503, UNAVAILABLE), status(200, JOB))
    transport = httpx.MockTransport(script)
    async with AsyncClient(URL, token=TOKEN, retry=NO_WAIT, transport=transport) as tickd:
        assert (await tickd.get_job("j1")).id == "j1"
        assert len(script.seen) == 2
        script.answers = [refused]
        with pytest.raises(TransportFailed):
            await tickd.pause_job("j1")
    assert len(script.seen) == 3


def test_a_base_url_with_a_path_prefixes_it_and_an_id_stays_one_segment() -> None:
    script = Script(status(200, JOB))
    transport = httpx.MockTransport(script)
    with Client(f"{URL}/tickd", retry=NO_WAIT, transport=transport) as tickd:
        tickd.get_job("a/b?c")
    assert script.seen[0].url.raw_path == b"/tickd/v1/jobs/a%2Fb%3Fc"
    assert "Authorization" not in script.seen[0].headers, "no token, no header"
