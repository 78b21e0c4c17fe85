"""The REST API as ops use it: jobs, validation that changes nothing, concurrency, runs."""

from __future__ import annotations

import asyncio
import base64
import io
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import ADMIN, READ, WRITE, Api
from tests.conftest import T0, make_job
from tickd.api.jobs_routes import MAX_WRITE_ATTEMPTS
from tickd.scheduler.model import ExecutionSummary, Status
from tickd.scheduler.ports.backends import Claim, ExecutionQuery, JobQuery, RunRequest

CRON_JOB: dict[str, Any] = {
    "name": "nightly-ping",
    "handler": "ping",
    "schedule": {"kind": "cron", "expr": "0 30 2 * * *", "timezone": "Europe/Berlin"},
    "params": {"url": "https://example.com/health", "api_key": "sk-live-secret"},
    "timeout_seconds": 30,
    "max_retries": 2,
}


def failed_run() -> ExecutionSummary:
    return ExecutionSummary(execution_id="run-1", status=Status.FAILED, finished_at=T0)


async def create(api: Api, **overrides: Any) -> dict[str, Any]:
    status, body, _ = await api.call("POST", "/v1/jobs", json={**CRON_JOB, **overrides})
    assert status == 201, body
    assert isinstance(body, dict)
    return body


async def test_create_read_and_list_a_cron_job(api: Api) -> None:
    status, body, headers = await api.call("POST", "/v1/jobs", json=CRON_JOB)
    assert status == 201
    assert headers["location"] == f"/v1/jobs/{body['id']}"
    assert headers["etag"] == '"1"'
    assert body["next_run_at"] == "2026-03-03T01:30:00Z"  # 02:30 in Berlin, in winter
    assert body["params"] == {"url": "https://example.com/health", "api_key": "***"}
    assert body["priority"] == "normal" and body["enabled"] is True

    status, read, _ = await api.call("GET", f"/v1/jobs/{body['id']}", token=READ)
    assert (status, read) == (200, body)
    stored = await api.store.get_job(body["id"])
    assert stored is not None and stored.params["api_key"] == "sk-live-secret"


async def test_list_filters_and_pages_in_a_stable_order(api: Api) -> None:
    for name in ("b-job", "a-job", "c-job", "other"):
        await create(api, name=name)
    await api.call("POST", f"/v1/jobs/{(await create(api, name='a-paused'))['id']}/pause")
    status, page, _ = await api.call("GET", "/v1/jobs?name_prefix=a-&limit=1")
    assert status == 200
    assert [j["name"] for j in page["items"]] == ["a-job"]
    _, rest, _ = await api.call(
        "GET", f"/v1/jobs?name_prefix=a-&limit=1&cursor={page['next_cursor']}"
    )
    assert [j["name"] for j in rest["items"]] == ["a-paused"]
    assert rest["next_cursor"] is None
    _, enabled, _ = await api.call("GET", "/v1/jobs?enabled=false")
    assert [j["name"] for j in enabled["items"]] == ["a-paused"]


async def test_the_list_searches_filters_and_counts_in_the_store(api: Api) -> None:
    jobs = [make_job(f"team-{i:03}.sync", "ping") for i in range(30)]
    jobs.append(make_job("zz.partner-feed", "sleep", last_execution=failed_run()))
    for job in jobs:
        await api.store.insert_job(job)

    _, found, _ = await api.call("GET", "/v1/jobs?q=PARTNER&total=true", token=READ)
    assert [j["name"] for j in found["items"]] == ["zz.partner-feed"] and found["total"] == 1
    _, by_id, _ = await api.call("GET", f"/v1/jobs?q={jobs[4].id[:12]}", token=READ)
    assert jobs[4].name in [j["name"] for j in by_id["items"]]
    _, page, _ = await api.call("GET", "/v1/jobs?handler=ping&limit=10&total=true")
    assert (len(page["items"]), page["total"]) == (10, 30) and page["next_cursor"]
    _, failing, _ = await api.call("GET", "/v1/jobs?last_status=failed,timeout")
    assert [j["name"] for j in failing["items"]] == ["zz.partner-feed"]
    _, plain, _ = await api.call("GET", "/v1/jobs?limit=1")
    assert plain["total"] is None  # counted only when asked


async def test_the_list_sorts_by_next_run_page_after_page(api: Api) -> None:
    later = [make_job(f"a-{i}", next_run_at=T0 + timedelta(minutes=10 - i)) for i in range(5)]
    never = make_job("0-spent", next_run_at=None, enabled=False)
    for job in [never, *later]:
        await api.store.insert_job(job)

    names: list[str] = []
    cursor = ""
    while cursor is not None:
        _, page, _ = await api.call("GET", f"/v1/jobs?sort=next_run&limit=2{cursor}")
        names += [j["name"] for j in page["items"]]
        cursor = page["next_cursor"] and f"&cursor={page['next_cursor']}"
    assert names == ["a-4", "a-3", "a-2", "a-1", "a-0", "0-spent"]


BAD_CREATES = [
    ({"colour": "blue"}, 422, "colour"),
    ({"max_retries": "three"}, 422, "max_retries"),
    ({"schedule": {"kind": "cron", "expr": "61 * * * * *"}}, 422, "schedule.expr"),
    ({"schedule": {"kind": "cron", "expr": "0 */99 * * * *"}}, 422, "schedule.expr"),
    ({"schedule": {"kind": "cron", "expr": "0 */0 * * * *"}}, 422, "schedule.expr"),
    ({"schedule": {"kind": "cron", "expr": "0 30-10 * * * *"}}, 422, "schedule.expr"),
    (
        {"schedule": {"kind": "cron", "expr": "* * * * *", "timezone": "localtime"}},
        422,
        "schedule.timezone",
    ),
    (
        {"schedule": {"kind": "cron", "expr": "* * * * *", "timezone": "/etc/localtime"}},
        422,
        "schedule.timezone",
    ),
    (
        {"schedule": {"kind": "cron", "expr": "* * * * *", "timezone": "Mars/Base"}},
        422,
        "schedule.timezone",
    ),
    ({"schedule": {"kind": "weekly"}}, 422, "schedule"),
    ({"handler": "no-such-handler"}, 422, "handler"),
    ({"params": {"url": "http://insecure"}}, 422, "params.url"),
    ({"params": {}}, 422, "params"),
    ({"schedule": {"kind": "interval", "every_seconds": 0}}, 422, "schedule.every_seconds"),
    ({"schedule": {"kind": "interval", "every_seconds": -5}}, 422, "schedule.every_seconds"),
    ({"timeout_seconds": 601}, 422, "timeout_seconds"),
    ({"schedule": {"kind": "once", "at": "2026-03-01T00:00:00Z"}}, 422, "schedule.at"),
    ({"schedule": {"kind": "once", "at": "2026-04-01T00:00:00"}}, 422, "schedule.at"),
    (
        {"jitter_seconds": 90, "schedule": {"kind": "interval", "every_seconds": 60}},
        422,
        "jitter_seconds",
    ),
    ({"name": "bad name with spaces"}, 422, "name"),
    ({"priority": "urgent"}, 422, "priority"),
    ({"shards": 0}, 422, "shards"),
    ({"shards": 1001}, 422, "shards"),
    ({"shards": "3"}, 422, "shards"),
    ({"shards": 2.5}, 422, "shards"),
]


@pytest.mark.parametrize(("overrides", "status", "field"), BAD_CREATES)
async def test_a_bad_job_is_refused_naming_the_field_and_nothing_is_written(
    api: Api, overrides: dict[str, Any], status: int, field: str
) -> None:
    got, body, headers = await api.call("POST", "/v1/jobs", json={**CRON_JOB, **overrides})
    assert got == status, body
    assert headers["content-type"].startswith("application/problem+json")
    assert field in [e["field"] for e in body["errors"]], body
    assert body["status"] == status and body["title"]
    assert await api.store.list_jobs(JobQuery()) == []


async def test_a_duplicate_name_is_a_conflict(api: Api) -> None:
    await create(api)
    status, body, _ = await api.call("POST", "/v1/jobs", json=CRON_JOB)
    assert status == 409
    assert body["errors"][0]["field"] == "name"
    assert len(await api.store.list_jobs(JobQuery())) == 1


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"{not json", 400),
        (b"", 400),
        (b"[1, 2]", 422),
        (b"{" + b" " * (1024 * 1024) + b"}", 413),
        (b'{"params": {"n": NaN}}', 400),
        (b'{"params": {"n": 1e400}}', 400),  # no double holds it: it would be stored as infinity
        (b'{"params": {"n": 9223372036854775808}}', 400),  # 2**63: MongoDB cannot store it
    ],
)
async def test_unreadable_bodies_change_nothing(api: Api, data: bytes, status: int) -> None:
    got, body, _ = await api.call(
        "POST", "/v1/jobs", data=io.BytesIO(data), headers={"Content-Type": "application/json"}
    )
    assert got == status, body
    assert body["status"] == status
    assert await api.store.list_jobs(JobQuery()) == []


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/jobs?cursor=not-a-cursor", "query.cursor"),
        ("/v1/jobs?cursor=eyJ4IjogMX0=", "query.cursor"),
        ("/v1/jobs?limit=0", "query.limit"),
        ("/v1/jobs?limit=many", "query.limit"),
        ("/v1/jobs?colour=red", "query.colour"),
        ("/v1/executions?status=exploded", "query.status"),
        ("/v1/executions?since=yesterday", "query.since"),
        ("/v1/jobs?handler=noop&handler=webhook", "query.handler"),  # neither is ignored
        ("/v1/jobs?sort=colour", "query.sort"),
        ("/v1/jobs?last_status=exploded", "query.last_status"),
        ("/v1/jobs?last_status=failed,running", "query.last_status"),
        ("/v1/jobs?total=maybe", "query.total"),
        ("/v1/jobs?q=", "query.q"),
        (f"/v1/jobs?q={'x' * 201}", "query.q"),
        # A cursor of the name order is not one of the next-run order.
        ("/v1/jobs?sort=next_run&cursor=eyJhZnRlcl9uYW1lIjogImEifQ==", "query.cursor"),
        (
            "/v1/jobs?sort=next_run&cursor="
            + base64.urlsafe_b64encode(
                b'{"after_name": "a", "after_next_run_at": "soon"}'
            ).decode(),
            "query.cursor",
        ),
    ],
)
async def test_bad_queries_name_the_parameter(api: Api, path: str, field: str) -> None:
    status, body, _ = await api.call("GET", path)
    assert status == 400, body
    assert field in [e["field"] for e in body["errors"]]


async def test_patch_changes_only_what_is_given_and_keeps_masked_secrets(api: Api) -> None:
    job = await create(api)
    status, patched, headers = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 5, "params": job["params"]}
    )
    assert status == 200, patched
    assert patched["max_retries"] == 5 and patched["revision"] == 2
    assert headers["etag"] == '"2"'
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.params["api_key"] == "sk-live-secret"
    assert stored.timeout_seconds == 30


SECRET_URL = "https://alice:s3cret-pw@example.com/health?token=tok-123&page=2"


async def test_a_job_saved_back_as_read_keeps_the_secrets_inside_its_strings(api: Api) -> None:
    job = await create(api, params={"url": SECRET_URL, "api_key": "sk-live-secret"})
    _, read, _ = await api.call("GET", f"/v1/jobs/{job['id']}")
    assert read["params"]["url"] == "https://alice:***@example.com/health?token=***&page=2"
    as_read = {k: read[k] for k in CRON_JOB}

    status, body, _ = await api.call("PUT", f"/v1/jobs/{job['id']}", json=as_read)
    assert status == 200, body
    status, body, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"params": read["params"]}
    )
    assert status == 200, body

    stored = await api.store.get_job(job["id"])
    assert stored is not None
    assert stored.params == {"url": SECRET_URL, "api_key": "sk-live-secret"}


async def test_a_new_password_in_a_url_replaces_the_stored_one(api: Api) -> None:
    job = await create(api, params={"url": SECRET_URL})
    new_url = "https://alice:n3w-pw@example.com/health?token=***&page=2"
    status, body, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"params": {"url": new_url}}
    )
    assert status == 200, body
    stored = await api.store.get_job(job["id"])
    assert stored is not None
    assert stored.params["url"] == "https://alice:n3w-pw@example.com/health?token=tok-123&page=2"


async def test_a_masked_password_in_a_changed_url_is_refused(api: Api) -> None:
    """Restored there, the stored password would go to another host; kept as sent, it would
    become "***"."""
    job = await create(api, params={"url": SECRET_URL})
    elsewhere = "https://alice:***@attacker.example/health?token=***&page=2"
    status, body, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"params": {"url": elsewhere}}
    )
    assert status == 422, body
    assert [e["field"] for e in body["errors"]] == ["params.url"]
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.params["url"] == SECRET_URL and stored.revision == 1


async def test_put_replaces_the_definition_and_reschedules(api: Api) -> None:
    job = await create(api)
    every_minute = {**CRON_JOB, "schedule": {"kind": "interval", "every_seconds": 60}}
    status, replaced, _ = await api.call("PUT", f"/v1/jobs/{job['id']}", json=every_minute)
    assert status == 200, replaced
    assert replaced["schedule"] == {"kind": "interval", "every_seconds": 60.0}
    assert replaced["next_run_at"] == "2026-03-02T09:01:00Z"


async def test_a_stale_if_match_loses_and_changes_nothing(api: Api) -> None:
    job = await create(api)
    first, _, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 4}, headers={"If-Match": '"1"'}
    )
    second, body, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 9}, headers={"If-Match": '"1"'}
    )
    assert (first, second) == (200, 412)
    assert body["title"] == "Precondition Failed"
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.max_retries == 4


async def test_parallel_patches_without_if_match_all_land_and_the_last_one_stands(
    api: Api,
) -> None:
    """Without If-Match a write is last-writer-wins: none is refused for another's write."""
    job = await create(api)
    path = f"/v1/jobs/{job['id']}"
    timeouts = [31 + i for i in range(20)]
    answers = await asyncio.gather(
        *(api.call("PATCH", path, json={"timeout_seconds": t}) for t in timeouts)
    )
    assert [status for status, _, _ in answers] == [200] * 20, answers
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.timeout_seconds in timeouts
    assert stored.revision == 21, "each write applied to the revision before it"


async def test_parallel_pauses_and_resumes_without_if_match_all_land(api: Api) -> None:
    job = await create(api)
    path = f"/v1/jobs/{job['id']}"
    actions = ["pause", "resume"] * 10
    answers = await asyncio.gather(*(api.call("POST", f"{path}/{a}") for a in actions))
    assert [status for status, _, _ in answers] == [200] * 20, answers
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 21
    if stored.enabled:
        assert stored.paused_reason is None and stored.next_run_at is not None
    else:
        assert stored.paused_reason == "paused by root"


async def test_a_write_that_loses_to_another_applies_itself_to_what_that_one_wrote(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another instance writes between this request's read and its write: the request reads the
    job again and applies its change on top, keeping the other write."""
    job = await create(api)
    stale = await api.store.get_job(job["id"])
    await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 4})
    reads = [stale]
    read_job = api.store.get_job

    async def stale_first(job_id: str) -> Any:
        return reads.pop() if reads else await read_job(job_id)

    monkeypatch.setattr(api.store, "get_job", stale_first)
    status, body, _ = await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"timeout_seconds": 45})
    monkeypatch.undo()
    assert status == 200, body
    stored = await api.store.get_job(job["id"])
    assert stored is not None and (stored.max_retries, stored.timeout_seconds) == (4, 45)


async def test_a_write_with_if_match_that_loses_the_race_is_412(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revision the client named was current when read, but not when written."""
    job = await create(api)
    stale = await api.store.get_job(job["id"])
    await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 4})

    async def stale_read(job_id: str) -> Any:
        return stale

    monkeypatch.setattr(api.store, "get_job", stale_read)
    status, body, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"timeout_seconds": 45}, headers={"If-Match": '"1"'}
    )
    monkeypatch.undo()
    assert status == 412, body
    stored = await api.store.get_job(job["id"])
    assert stored is not None and (stored.max_retries, stored.timeout_seconds) == (4, 30)


async def test_a_write_that_keeps_losing_gives_up_with_a_409(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retries are bounded: a job that changes under every attempt is a 409, not a hang."""
    job = await create(api)
    stale = await api.store.get_job(job["id"])
    await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 4})
    reads = 0

    async def stale_read(job_id: str) -> Any:
        nonlocal reads
        reads += 1
        return stale

    monkeypatch.setattr(api.store, "get_job", stale_read)
    status, body, _ = await api.call("POST", f"/v1/jobs/{job['id']}/pause")
    monkeypatch.undo()
    assert status == 409, body
    assert reads == MAX_WRITE_ATTEMPTS
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.enabled and stored.max_retries == 4


async def test_a_stale_delete_is_refused_and_deletes_nothing(api: Api) -> None:
    job = await create(api)
    await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 4})
    status, body, _ = await api.call("DELETE", f"/v1/jobs/{job['id']}", headers={"If-Match": '"1"'})
    assert status == 412, body
    assert body["errors"] == [{"field": "If-Match", "reason": "stale revision"}]
    assert await api.store.get_job(job["id"]) is not None
    status, _, _ = await api.call("DELETE", f"/v1/jobs/{job['id']}", headers={"If-Match": '"2"'})
    assert status == 204
    assert await api.store.get_job(job["id"]) is None


async def test_a_delete_without_if_match_deletes_the_job_as_changed_since_its_read(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last writer wins: a delete whose read is overtaken by another write reads the job again
    and deletes it, and its history entry holds the job as it was deleted."""
    job = await create(api)
    read_before_the_change = await api.store.get_job(job["id"])
    await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 4})
    reads = 0
    get_job = api.store.get_job

    async def stale_first_read(job_id: str) -> Any:
        nonlocal reads
        reads += 1
        return read_before_the_change if reads == 1 else await get_job(job_id)

    monkeypatch.setattr(api.store, "get_job", stale_first_read)
    status, body, _ = await api.call("DELETE", f"/v1/jobs/{job['id']}")
    monkeypatch.undo()

    assert status == 204, body
    assert await api.store.get_job(job["id"]) is None
    [deleted, *_] = await api.store.list_changes(job["id"], limit=10)
    assert deleted.action == "delete"
    assert deleted.changes["max_retries"]["from"] == 4


async def test_a_delete_with_if_match_of_a_job_changed_meanwhile_is_412(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await create(api)
    read_before_the_change = await api.store.get_job(job["id"])
    await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"max_retries": 4})

    async def stale_read(job_id: str) -> Any:
        return read_before_the_change

    monkeypatch.setattr(api.store, "get_job", stale_read)
    status, body, _ = await api.call("DELETE", f"/v1/jobs/{job['id']}", headers={"If-Match": '"1"'})
    assert status == 412, body
    monkeypatch.undo()
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.max_retries == 4


@pytest.mark.parametrize(
    ("method", "suffix", "kwargs", "status"),
    [
        ("PATCH", "", {"json": {"max_retries": 4}}, 200),
        ("PUT", "", {"json": CRON_JOB}, 200),
        ("POST", "/pause", {}, 200),
        ("DELETE", "", {}, 204),
    ],
)
@pytest.mark.parametrize("header", ["*", ' "7", "1" ', 'W/"9", "1"'])
async def test_if_match_star_or_a_list_holding_the_revision_lets_a_write_through(
    api: Api, method: str, suffix: str, kwargs: dict[str, Any], status: int, header: str
) -> None:
    job = await create(api)
    got, body, _ = await api.call(
        method, f"/v1/jobs/{job['id']}{suffix}", headers={"If-Match": header}, **kwargs
    )
    assert got == status, body


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
@pytest.mark.parametrize("header", ['W/"1"', '"2"', '"01"'])
async def test_an_if_match_without_the_current_strong_tag_is_412(
    api: Api, method: str, header: str
) -> None:
    job = await create(api)
    kwargs: dict[str, Any] = {"json": {"max_retries": 4}} if method == "PATCH" else {}
    got, body, _ = await api.call(
        method, f"/v1/jobs/{job['id']}", headers={"If-Match": header}, **kwargs
    )
    assert got == 412, body
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 1


@pytest.mark.parametrize("method", ["PATCH", "PUT", "DELETE"])
@pytest.mark.parametrize("header", ["1", "", '"1" "1"', '"1', "**", '"1";x', '"a b"'])
async def test_a_malformed_if_match_is_400_naming_the_header(
    api: Api, method: str, header: str
) -> None:
    job = await create(api)
    kwargs: dict[str, Any] = {"json": {"max_retries": 4}} if method == "PATCH" else {}
    if method == "PUT":
        kwargs = {"json": CRON_JOB}
    got, body, _ = await api.call(
        method, f"/v1/jobs/{job['id']}", headers={"If-Match": header}, **kwargs
    )
    assert got == 400, body
    assert [e["field"] for e in body["errors"]] == ["If-Match"]
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 1


async def test_pause_and_resume_are_recorded_in_the_history(api: Api) -> None:
    job = await create(api)
    status, paused, _ = await api.call("POST", f"/v1/jobs/{job['id']}/pause", token=WRITE)
    assert status == 200 and paused["enabled"] is False
    assert paused["paused_reason"] == "paused by deployer"
    api.clock.advance(3600)
    _, resumed, _ = await api.call("POST", f"/v1/jobs/{job['id']}/resume", token=WRITE)
    assert resumed["enabled"] is True and resumed["paused_reason"] is None
    _, history, _ = await api.call("GET", f"/v1/jobs/{job['id']}/history")
    assert [h["action"] for h in history["items"]] == ["resume", "pause", "create"]
    assert history["items"][1]["actor"] == "deployer"
    assert history["items"][1]["changes"]["enabled"] == {"from": True, "to": False}
    assert history["items"][2]["changes"]["params"]["to"]["api_key"] == "***"


async def test_a_once_job_that_has_run_is_not_resumed_into_running_again(api: Api) -> None:
    """After its run a once job is disabled with no next run. Resuming it (or enabling it) as
    it is would fire its past time at once: that run again, under the same key. It is refused
    naming `enabled`, and a new time in the future brings it back."""
    at = (T0 + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    job = await create(api, schedule={"kind": "once", "at": at})
    api.clock.advance(300)
    await api.harness.engine.drain()
    ran = await api.store.list_executions(ExecutionQuery(job_id=job["id"]))
    assert [e.status for e in ran] == [Status.SUCCESS]
    api.clock.advance(3600)
    path = f"/v1/jobs/{job['id']}"
    for method, url, body in (("POST", path + "/resume", None), ("PATCH", path, {"enabled": True})):
        status, problem, _ = await api.call(method, url, json=body, token=WRITE)
        assert (status, [e["field"] for e in problem["errors"]]) == (422, ["enabled"]), problem
    stored = await api.store.get_job(job["id"])
    assert stored is not None and (stored.enabled, stored.next_run_at) == (False, None)
    again = (T0 + timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    new_time: dict[str, Any] = {"enabled": True, "schedule": {"kind": "once", "at": again}}
    status, resumed, _ = await api.call("PATCH", path, json=new_time, token=WRITE)
    assert (status, resumed["enabled"], resumed["next_run_at"]) == (200, True, again), resumed
    await api.harness.engine.drain()
    assert len(await api.store.list_executions(ExecutionQuery(job_id=job["id"]))) == 1


async def test_a_new_schedule_whose_first_time_a_run_has_claimed_fires_by_it_after(
    api: Api,
) -> None:
    """At 09:59:59 the hourly run of 10:00 is claimed ahead when ops change the schedule to
    every five minutes, whose first time is 10:00 too. That run fires it, once; then the job
    goes by the new schedule (10:05), not by the old one the run's end computed (11:00)."""
    hourly = {"kind": "cron", "expr": "0 0 * * * *", "timezone": "UTC"}
    job = await create(api, schedule=hourly)
    ten = T0.replace(hour=10)
    assert job["next_run_at"] == ten.isoformat().replace("+00:00", "Z")
    api.clock.set(ten - timedelta(seconds=1))
    api.harness.engine.start()
    assert (await api.harness.engine.tick()).claimed == 1, "claimed ahead"
    every_five = {"schedule": {**hourly, "expr": "0 */5 * * * *"}}
    status, changed, _ = await api.call("PATCH", f"/v1/jobs/{job['id']}", json=every_five)
    assert status == 200, changed
    api.clock.set(ten)
    await api.harness.engine.drain()
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.next_run_at == ten + timedelta(minutes=5)
    api.clock.set(ten + timedelta(minutes=5))
    await api.harness.engine.drain()
    ran = await api.store.list_executions(ExecutionQuery(job_id=job["id"]))
    assert sorted(e.scheduled_at for e in ran) == [ten, ten + timedelta(minutes=5)]


async def test_a_new_schedule_keeps_its_first_time_while_a_trigger_holds_the_job(
    api: Api,
) -> None:
    """At 09:30 a trigger runs (it holds the job's lease, but claims no time) when ops change
    the hourly job to every half hour: its first time, 10:00, is not a time a run claimed,
    and is kept."""
    hourly = {"kind": "cron", "expr": "0 0 * * * *", "timezone": "UTC"}
    job = await create(api, schedule=hourly)
    half_past = T0.replace(minute=30)
    api.clock.set(half_past)
    trigger = RunRequest(
        id="t", job_id=job["id"], scheduled_at=half_past, reason="trigger",
        not_before=half_past, created_at=half_past,
    )  # fmt: skip
    await api.store.insert_run_requests([trigger])
    stored = await api.store.get_job(job["id"])
    assert stored is not None
    claim = Claim(
        job_id=stored.id, revision=stored.revision, next_run_at=None, owner="other",
        until=half_past + timedelta(minutes=5),
    )  # fmt: skip
    assert await api.store.claim_run_requests([trigger], [claim], half_past)
    every_half_hour = {"schedule": {**hourly, "expr": "0 */30 * * * *"}}
    status, changed, _ = await api.call("PATCH", f"/v1/jobs/{job['id']}", json=every_half_hour)
    assert (status, changed["next_run_at"]) == (200, "2026-03-02T10:00:00Z"), changed


async def test_delete_keeps_the_history(api: Api) -> None:
    job = await create(api)
    status, _, _ = await api.call("DELETE", f"/v1/jobs/{job['id']}")
    assert status == 204
    assert (await api.call("GET", f"/v1/jobs/{job['id']}"))[0] == 404
    _, history, _ = await api.call("GET", f"/v1/jobs/{job['id']}/history")
    assert [h["action"] for h in history["items"]] == ["delete", "create"]


async def test_trigger_runs_now_without_moving_the_schedule(api: Api) -> None:
    job = await create(api)
    status, request, _ = await api.call("POST", f"/v1/jobs/{job['id']}/trigger")
    assert status == 202 and request["reason"] == "trigger"
    await api.harness.engine.drain()
    runs = await api.store.list_executions(ExecutionQuery(job_id=job["id"]))
    assert [(e.status, e.scheduled_at) for e in runs] == [(Status.SUCCESS, T0)]
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.next_run_at is not None
    assert stored.next_run_at.isoformat() == "2026-03-03T01:30:00+00:00"


async def test_retry_reruns_the_occurrence_with_the_same_idempotency_key(api: Api) -> None:
    job = await create(
        api,
        name="flaky",
        max_retries=0,
        params={"url": "https://x.example", "attempts_to_fail": 1},
        schedule={"kind": "interval", "every_seconds": 3600},
    )
    api.clock.advance(3600)
    await api.harness.engine.drain()
    _, failed, _ = await api.call("GET", f"/v1/executions?job_id={job['id']}&status=failed")
    [dead] = failed["items"]
    assert dead["status"] == "failed"

    status, _, _ = await api.call("POST", f"/v1/executions/{dead['id']}/retry")
    assert status == 202
    again, body, _ = await api.call("POST", f"/v1/executions/{dead['id']}/retry")
    assert again == 409, body
    await api.harness.engine.drain()
    _, runs, _ = await api.call("GET", f"/v1/jobs/{job['id']}/executions")
    newest = runs["items"][0]
    assert newest["status"] == "failed" or newest["status"] == "success"
    assert newest["idempotency_key"] == dead["idempotency_key"]
    assert newest["id"] != dead["id"]


async def test_only_failed_executions_are_retried(api: Api) -> None:
    job = await create(api, schedule={"kind": "interval", "every_seconds": 60})
    api.clock.advance(60)
    await api.harness.engine.drain()
    _, runs, _ = await api.call("GET", f"/v1/jobs/{job['id']}/executions")
    status, body, _ = await api.call("POST", f"/v1/executions/{runs['items'][0]['id']}/retry")
    assert status == 409 and "success" in body["detail"]


async def test_backfill_lists_first_then_runs_what_has_not_run(api: Api) -> None:
    job = await create(api, name="hourly", schedule={"kind": "cron", "expr": "0 0 * * * *"})
    window = {"start": "2026-03-02T05:00:00Z", "end": "2026-03-02T08:00:00Z"}
    status, dry, _ = await api.call("POST", f"/v1/jobs/{job['id']}/backfill", json=window)
    assert status == 200 and dry["dry_run"] is True
    assert dry["occurrences"] == [
        "2026-03-02T05:00:00Z",
        "2026-03-02T06:00:00Z",
        "2026-03-02T07:00:00Z",
    ]
    assert await api.store.due_run_requests(T0 + timedelta(hours=1), 10) == []

    real = {**window, "dry_run": False, "per_second": 10}
    status, queued, _ = await api.call("POST", f"/v1/jobs/{job['id']}/backfill", json=real)
    assert status == 202 and len(queued["occurrences"]) == 3
    api.clock.advance(1)
    await api.harness.engine.drain()
    runs = await api.store.list_executions(ExecutionQuery(job_id=job["id"]))
    assert sorted(e.scheduled_at.hour for e in runs) == [5, 6, 7]

    _, again, _ = await api.call("POST", f"/v1/jobs/{job['id']}/backfill", json=real)
    assert again["occurrences"] == [] and len(again["already_run"]) == 3


async def test_backfill_refuses_the_future(api: Api) -> None:
    job = await create(api)
    window = {"start": "2026-03-02T05:00:00Z", "end": "2026-03-09T00:00:00Z"}
    status, body, _ = await api.call("POST", f"/v1/jobs/{job['id']}/backfill", json=window)
    assert status == 422 and body["errors"][0]["field"] == "end"


async def test_preview_marks_daylight_saving_transitions(api: Api) -> None:
    request = {
        "schedule": {"kind": "cron", "expr": "0 30 2 * * *", "timezone": "Europe/Berlin"},
        "count": 3,
        "after": "2026-03-28T00:00:00Z",
    }
    status, body, _ = await api.call("POST", "/v1/schedules/preview", json=request, token=READ)
    assert status == 200, body
    assert [t["local"] for t in body["times"]] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert [t["dst_transition"] for t in body["times"]] == [False, True, False]
    job = await create(api)
    _, of_job, _ = await api.call("GET", f"/v1/jobs/{job['id']}/preview?count=2")
    assert len(of_job["times"]) == 2


async def test_handlers_are_listed_with_their_schemas(api: Api) -> None:
    status, body, _ = await api.call("GET", "/v1/handlers", token=READ)
    assert status == 200
    ping = next(h for h in body["items"] if h["name"] == "ping")
    assert ping["params_schema"]["required"] == ["url"]
    assert ping["secret_params"] == ["api_key"]


@pytest.mark.parametrize(
    ("method", "path", "token", "status"),
    [
        ("GET", "/v1/jobs", None, 401),
        ("GET", "/v1/jobs", "x" * 20, 401),
        ("POST", "/v1/jobs", READ, 403),
        ("GET", "/v1/jobs", READ, 200),
        ("GET", "/healthz", None, 200),
        ("GET", "/openapi.json", None, 200),
    ],
)
async def test_tokens_and_scopes(
    api: Api, method: str, path: str, token: str | None, status: int
) -> None:
    kwargs = {"json": CRON_JOB} if method == "POST" else {}
    got, body, headers = await api.call(method, path, token=token, **kwargs)
    assert got == status, body
    if status == 401:
        assert headers["www-authenticate"].startswith("Bearer")
    assert await api.store.list_jobs(JobQuery()) == []


async def test_system_jobs_need_an_admin_token(api: Api) -> None:
    job = await create(api)
    stored = await api.store.get_job(job["id"])
    assert stored is not None
    from dataclasses import replace

    await api.store.delete_job(stored.id)
    await api.store.insert_job(replace(stored, system=True))
    status, _, _ = await api.call("POST", f"/v1/jobs/{job['id']}/pause", token=WRITE)
    assert status == 403
    status, _, _ = await api.call("POST", f"/v1/jobs/{job['id']}/pause", token=ADMIN)
    assert status == 200


async def test_unknown_ids_are_404(api: Api) -> None:
    for method, path in [
        ("GET", "/v1/jobs/nope"),
        ("PATCH", "/v1/jobs/nope"),
        ("GET", "/v1/executions/nope"),
        ("POST", "/v1/executions/nope/retry"),
    ]:
        kwargs: dict[str, Any] = {"json": {"max_retries": 1}} if method == "PATCH" else {}
        status, body, _ = await api.call(method, path, **kwargs)
        assert status == 404, (path, body)


async def test_openapi_describes_every_route(api: Api) -> None:
    status, doc, _ = await api.call("GET", "/openapi.json", token=None)
    assert status == 200 and doc["openapi"] == "3.1.0"
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/executions", "/healthz"} <= set(doc["paths"])
    create_op = doc["paths"]["/v1/jobs"]["post"]
    ref = create_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/JobCreate"
    assert "additionalProperties" in doc["components"]["schemas"]["JobCreate"]
    async with api.client.get("/docs") as response:
        assert response.status == 200 and "/v1/jobs" in await response.text()


async def test_readiness_reports_mail_failing_without_failing_itself(
    api: Api, tmp_path: Path
) -> None:
    """Mail is off the runs' path: ops see the mail server failing (and since when) while the
    instance stays ready; the next send that goes through clears it."""
    mailer = api.harness.engine.ports.mailer
    message = EmailMessage()
    message["To"] = "ops@example.com"
    message.set_content("hello")
    _, body, _ = await api.call("GET", "/readyz", token=None)
    assert body["mail"] == {"state": "unknown", "last_error": None, "failing_since": None}

    (tmp_path / "outbox").write_text("a file where the outbox's folder should be")
    with pytest.raises(FileExistsError):
        await mailer.send(message)
    status, body, _ = await api.call("GET", "/readyz", token=None)
    assert (status, body["ready"], body["mail"]["state"]) == (200, True, "failing")
    assert body["mail"]["last_error"].startswith("FileExistsError")
    assert body["mail"]["failing_since"] is not None

    (tmp_path / "outbox").unlink()
    await mailer.send(message)
    _, body, _ = await api.call("GET", "/readyz", token=None)
    assert body["mail"] == {"state": "ok", "last_error": None, "failing_since": None}


async def test_readiness(api: Api) -> None:
    status, body, _ = await api.call("GET", "/readyz", token=None)
    assert (status, body["ready"], body["problems"]) == (200, True, {})
    # The event relay is reported, never a reason to be unready (events are not on a run's path).
    assert body["events"] == {
        "state": "ok",
        "backlog": 0,
        "oldest_unsent_age_seconds": None,
        "last_error": None,
    }
