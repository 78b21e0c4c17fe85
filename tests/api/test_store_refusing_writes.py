"""The API while the store refuses writes (a full disk, a lost connection): a write answers 503
with Retry-After and a problem naming the cause, never a 500, and changes nothing; once the
store takes writes again, the same request succeeds. The log says so once, not per request."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import WriteError

from tests.api.conftest import Api, serving
from tests.api.test_jobs_api import CRON_JOB
from tests.conftest import EngineFactory
from tests.test_disk_full import refuse_writes
from tickd.scheduler.ports.backends import JobQuery, Store
from tickd.scheduler.store.kit.mongodb import store_errors
from tickd.scheduler.store.sqlite import SQLiteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """SQLite's file, made to refuse writes as a full disk does."""
    sqlite = SQLiteStore(f"sqlite:///{tmp_path}/tickd.db")
    await sqlite.open()
    yield sqlite
    await sqlite.close()


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine) as served:
        yield served


def assert_come_back_later(status: int, body: Any, headers: dict[str, str], cause: str) -> None:
    assert status == 503, body
    assert int(headers["retry-after"]) > 0, "seconds to wait before asking again"
    assert headers["content-type"].startswith("application/problem+json")
    assert body["status"] == 503 and cause in body["detail"], body


async def test_a_write_while_the_disk_is_full_answers_503_with_retry_after_and_changes_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert isinstance(api.store, SQLiteStore)
    full = [True]
    refuse_writes(monkeypatch, api.store, lambda: full[0])

    with caplog.at_level(logging.WARNING, logger="tickd.api"):
        for _ in range(3):
            status, body, headers = await api.call("POST", "/v1/jobs", json=CRON_JOB)
            assert_come_back_later(status, body, headers, "disk is full")
    assert "database or disk is full" not in str(body), "the store's own words stay in the log"
    assert await api.store.list_jobs(JobQuery()) == []
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1, "one traceback for an error that comes back, not one a request"

    full[0] = False
    status, body, _ = await api.call("POST", "/v1/jobs", json=CRON_JOB)
    assert status == 201, body
    trigger = f"/v1/jobs/{body['id']}/trigger"

    full[0] = True
    status, body, headers = await api.call("POST", trigger)
    assert_come_back_later(status, body, headers, "disk is full")
    full[0] = False
    status, body, _ = await api.call("POST", trigger)
    assert status in (200, 201, 202), body


async def test_a_write_mongodb_refuses_for_want_of_disk_answers_503(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MongoDB says OutOfDiskSpace (code 14031), an error it does not label transient."""

    async def out_of_disk_space(*args: Any, **kwargs: Any) -> None:
        with store_errors("insert"):
            raise WriteError("Out of disk space", code=14031)

    monkeypatch.setattr(api.store, "insert_job", out_of_disk_space)
    status, body, headers = await api.call("POST", "/v1/jobs", json=CRON_JOB)
    assert_come_back_later(status, body, headers, "disk is full")


async def test_a_store_error_no_retry_cures_is_still_a_500(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused_for_good(*args: Any, **kwargs: Any) -> None:
        with store_errors("insert"):
            raise WriteError("Document failed validation", code=121)

    monkeypatch.setattr(api.store, "insert_job", refused_for_good)
    status, body, headers = await api.call("POST", "/v1/jobs", json=CRON_JOB)
    assert status == 500 and "retry-after" not in headers, body
