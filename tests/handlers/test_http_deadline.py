"""A request that the run's deadline cuts short says what happened: no response within the time
it had, and that the deadline set that time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import T0, EngineFactory, make_job
from tests.handlers.conftest import Serve
from tickd.handlers.http_check import CheckFailed, CheckParams, check, http_check
from tickd.handlers.webhook import Occurrence, WebhookFailed, WebhookParams, call, webhook
from tickd.scheduler.model import Status
from tickd.scheduler.plugin.http import TimeLimit
from tickd.scheduler.ports.backends import ExecutionQuery

CUT_BY_THE_DEADLINE = "no response within 0.5 s, the time left before the run's deadline"


@pytest.fixture
async def silent_url(serve: Serve) -> AsyncIterator[str]:
    """An endpoint that takes the request and never answers."""
    released = asyncio.Event()

    async def never_answers(request: web.Request) -> web.Response:
        await released.wait()
        return web.Response(text="too late")

    app = web.Application()
    app.router.add_route("*", "/", never_answers)
    yield f"{await serve(app)}/"
    released.set()


async def test_a_webhook_cut_short_by_the_deadline_names_the_time_it_had(
    silent_url: str, loopback_session: aiohttp.ClientSession
) -> None:
    params = WebhookParams.parse({"url": silent_url, "timeout_seconds": 30})
    occurrence = Occurrence(idempotency_key="k", scheduled_at=T0, attempt=1)
    with pytest.raises(WebhookFailed) as failed:
        await call(loopback_session, params, occurrence, time_left=0.5)
    assert str(failed.value) == CUT_BY_THE_DEADLINE


async def test_a_check_cut_short_by_the_deadline_names_the_time_it_had(
    silent_url: str, loopback_session: aiohttp.ClientSession
) -> None:
    params = CheckParams.parse({"url": silent_url, "timeout_seconds": 30})
    with pytest.raises(CheckFailed) as failed:
        await check(loopback_session, params, time_left=0.5)
    assert str(failed.value) == CUT_BY_THE_DEADLINE


@pytest.mark.parametrize(
    ("handler_name", "handler", "failed"),
    [("webhook", webhook, "WebhookFailed"), ("http_check", http_check, "CheckFailed")],
)
async def test_a_run_whose_request_outlives_its_deadline_records_no_response(
    handler_name: str,
    handler: object,
    failed: str,
    make_engine: EngineFactory,
    silent_url: str,
) -> None:
    """Not `still running at its deadline`: the handler was waiting for an answer that did not
    come, and the error says so, with the job's timeout."""
    h = make_engine({handler_name: handler}, http_allow=["127.0.0.1"])
    params = {"url": silent_url, "timeout_seconds": 30}
    await h.add(make_job("slow", handler_name, params=params, timeout_seconds=0.5))
    await asyncio.wait_for(h.engine.drain(), timeout=10)

    [run] = await h.store.list_executions(ExecutionQuery(limit=10))
    assert run.status is Status.FAILED
    assert run.error is not None
    assert (run.error.type, run.error.message) == (failed, CUT_BY_THE_DEADLINE)


@pytest.mark.parametrize(
    ("timeout", "time_left", "exceeded"),
    [
        (30, 29.99873, "no response within 30 s, the time left before the run's deadline"),
        (30, 12.3456, "no response within 12.3 s, the time left before the run's deadline"),
        (30, 0.25, "no response within 0.25 s, the time left before the run's deadline"),
    ],
)
def test_the_time_a_request_had_is_said_as_people_say_it(
    timeout: float, time_left: float, exceeded: str
) -> None:
    limit = TimeLimit.of(timeout, time_left)
    assert limit.exceeded == exceeded
    assert limit.seconds < time_left, "it gives up before the runner would cancel it"
