"""What a job may be created as: system handlers stay with admins, and a job that could never
run is refused when it is written, naming the field, rather than failing at every run."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.api.conftest import ADMIN, WRITE, Api, ping, serving
from tests.conftest import T0, EngineFactory
from tickd.handlers.alert_scanner import alert_scanner
from tickd.handlers.http_check import http_check
from tickd.handlers.noop import noop
from tickd.handlers.webhook import webhook
from tickd.scheduler.model import Status
from tickd.scheduler.plugin.api import HandlerContext, Result, handler
from tickd.scheduler.ports.backends import ExecutionQuery, JobQuery
from tickd.scheduler.store.postgresql import PostgresStore
from tickd.scheduler.store.sqlite import SQLiteStore

HANDLERS = {
    "noop": noop,
    "webhook": webhook,
    "http_check": http_check,
    "alert_scanner": alert_scanner,
}
EVERY_HOUR = {"kind": "interval", "every_seconds": 3600}
HOOK: dict[str, Any] = {
    "name": "hook",
    "handler": "webhook",
    "schedule": EVERY_HOUR,
    "params": {"url": "https://hooks.example.com/tick"},
}
SCANNER: dict[str, Any] = {"name": "scanner", "handler": "alert_scanner", "schedule": EVERY_HOUR}
NOOP: dict[str, Any] = {"name": "plain", "handler": "noop", "schedule": EVERY_HOUR}


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    async with serving(make_engine, dict(HANDLERS)) as api:
        yield api


async def create(api: Api, body: dict[str, Any], token: str = ADMIN) -> dict[str, Any]:
    status, job, _ = await api.call("POST", "/v1/jobs", json=body, token=token)
    assert status == 201, job
    assert isinstance(job, dict)
    return job


def fields_of(problem: dict[str, Any]) -> list[str]:
    return [e["field"] for e in problem["errors"]]


# -- system handlers are for admins ---------------------------------------------------------------


async def test_a_write_token_cannot_create_a_job_on_a_system_handler(api: Api) -> None:
    status, problem, _ = await api.call("POST", "/v1/jobs", json=SCANNER, token=WRITE)
    assert status == 403, problem
    assert "admin scope" in problem["detail"] and "alert_scanner" in problem["detail"]
    assert await api.store.list_jobs(JobQuery()) == []
    await create(api, SCANNER, token=ADMIN)


# What a write token may do to an ordinary job, each refused on a job of a system handler.
ACTIONS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/trigger", None),
    ("POST", "/backfill", {"start": "2026-03-02T09:00:00Z", "end": "2026-03-02T12:00:00Z"}),
    ("POST", "/pause", None),
    ("POST", "/resume", None),
    ("PATCH", "", {"max_retries": 1}),
    ("PUT", "", {**SCANNER, "max_retries": 1}),
    ("DELETE", "", None),
]


@pytest.mark.parametrize(("method", "suffix", "body"), ACTIONS)
async def test_a_write_token_cannot_run_or_change_a_system_handlers_job(
    api: Api, method: str, suffix: str, body: dict[str, Any] | None
) -> None:
    job = await create(api, SCANNER)
    api.clock.advance(4 * 3600)
    path = f"/v1/jobs/{job['id']}{suffix}"
    status, problem, _ = await api.call(method, path, json=body, token=WRITE)
    assert status == 403, problem
    assert "admin scope" in problem["detail"]
    assert await api.store.due_run_requests(api.clock.now() + timedelta(days=1), 10) == []
    _, history, _ = await api.call("GET", f"/v1/jobs/{job['id']}/history")
    assert [h["action"] for h in history["items"]] == ["create"]
    status, _, _ = await api.call(method, path, json=body, token=ADMIN)
    assert status in (200, 202, 204)


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
async def test_a_write_token_cannot_point_a_job_at_a_system_handler(api: Api, method: str) -> None:
    job = await create(api, NOOP, token=WRITE)
    body = {"handler": "alert_scanner"} if method == "PATCH" else {**NOOP, **body_of(SCANNER)}
    status, problem, _ = await api.call(method, f"/v1/jobs/{job['id']}", json=body, token=WRITE)
    assert status == 403, problem
    stored = await api.store.get_job(job["id"])
    assert stored is not None and (stored.handler, stored.revision) == ("noop", 1)


def body_of(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k != "name"}


async def test_a_write_token_cannot_trigger_a_system_job(api: Api) -> None:
    job = await create(api, NOOP)
    stored = await api.store.get_job(job["id"])
    assert stored is not None
    await api.store.delete_job(stored.id)
    await api.store.insert_job(replace(stored, system=True))
    status, problem, _ = await api.call("POST", f"/v1/jobs/{job['id']}/trigger", token=WRITE)
    assert status == 403 and "admin scope" in problem["detail"], problem
    assert await api.store.due_run_requests(T0 + timedelta(days=1), 10) == []


# -- destinations and headers that could never be reached -----------------------------------------

INTERNAL_URLS = [
    "http://127.0.0.1/",
    "http://[::1]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://10.1.2.3/",
    "http://192.168.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/",
    "http://224.0.0.1/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "https://93.184.215.14:8443/",  # public, but on a port the policy does not open
]


@pytest.mark.parametrize("handler", ["webhook", "http_check"])
@pytest.mark.parametrize("url", INTERNAL_URLS)
async def test_an_internal_destination_is_refused_at_creation(
    api: Api, handler: str, url: str
) -> None:
    body = {**HOOK, "handler": handler, "params": {"url": url}}
    status, problem, _ = await api.call("POST", "/v1/jobs", json=body, token=WRITE)
    assert status == 422, problem
    assert fields_of(problem) == ["params.url"]
    assert problem["errors"][0]["reason"] == "destination not allowed"
    assert await api.store.list_jobs(JobQuery()) == []


async def test_an_internal_destination_is_refused_on_put_and_patch(api: Api) -> None:
    job = await create(api, HOOK)
    inside = {"params": {"url": "http://[::ffff:10.0.0.1]/"}}
    for method, body in (("PATCH", inside), ("PUT", {**HOOK, **inside})):
        status, problem, _ = await api.call(method, f"/v1/jobs/{job['id']}", json=body)
        assert (status, fields_of(problem)) == (422, ["params.url"]), problem
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 1


async def test_an_allowlisted_internal_destination_is_accepted(make_engine: EngineFactory) -> None:
    async with serving(make_engine, dict(HANDLERS), http_allow=("127.0.0.1", "10.0.0.0/8")) as api:
        for url in ("http://127.0.0.1:8080/hook", "http://10.1.2.3/", "http://[::ffff:10.0.0.1]/"):
            await create(api, {**HOOK, "name": f"hook-{len(url)}", "params": {"url": url}})
        status, problem, _ = await api.call(
            "POST", "/v1/jobs", json={**HOOK, "params": {"url": "http://192.168.0.1/"}}
        )
        assert (status, fields_of(problem)) == (422, ["params.url"])


H = "https://h.example/"
WITH_USER = "https://user:pw@h.example/"
BAD_REQUEST_PARAMS: list[tuple[str, dict[str, Any], str]] = [
    ("webhook", {"url": "http:///hook"}, "params.url"),
    ("http_check", {"url": "https://"}, "params.url"),
    ("webhook", {"url": "https://h.example:99999/"}, "params.url"),
    ("webhook", {"url": H, "headers": {"X-A": "a\r\nX-B: b"}}, "params.headers.X-A"),
    ("webhook", {"url": H, "secret_headers": {"X-Sig": "s\n"}}, "params.secret_headers.X-Sig"),
    ("webhook", {"url": H, "headers": {"X-A\r\nX-B": "b"}}, "params.headers.X-A\r\nX-B"),
    ("http_check", {"url": H, "headers": {"X-A": "\u0000"}}, "params.headers.X-A"),
    ("webhook", {"url": WITH_USER, "secret_headers": {"authorization": "x"}}, "params.url"),
    ("http_check", {"url": WITH_USER, "headers": {"Authorization": "x"}}, "params.url"),
    ("webhook", {"url": H, "timeout_seconds": 0.001}, "params.timeout_seconds"),
    ("http_check", {"url": H, "timeout_seconds": 1e-9}, "params.timeout_seconds"),
]  # fmt: skip


@pytest.mark.parametrize(("handler", "params", "field"), BAD_REQUEST_PARAMS)
async def test_a_request_that_could_never_be_made_is_refused(
    api: Api, handler: str, params: dict[str, Any], field: str
) -> None:
    body = {**HOOK, "handler": handler, "params": params}
    status, problem, _ = await api.call("POST", "/v1/jobs", json=body)
    assert status == 422, problem
    assert fields_of(problem) == [field]
    assert "pw" not in problem["detail"] and "\n" not in problem["errors"][0]["reason"]
    assert await api.store.list_jobs(JobQuery()) == []


async def test_a_schema_refusal_does_not_quote_a_password_even_one_stored_masked(
    make_engine: EngineFactory,
) -> None:
    """The handler's schema refuses a value by quoting it: a password in a URL is masked in
    that quote, including a stored one a client sent back as `***` (put back before the
    check: here to move the job to a handler that takes only https), which would otherwise
    hand the secret to anyone who may edit the job."""
    async with serving(make_engine, {**HANDLERS, "ping": ping}) as api:
        ftp = {**HOOK, "params": {"url": "ftp://deploy:S3cr3t@h.example/x"}}
        status, problem, _ = await api.call("POST", "/v1/jobs", json=ftp)
        assert (status, fields_of(problem)) == (422, ["params.url"]), problem
        assert "S3cr3t" not in str(problem) and "does not match" in problem["detail"]
        job = await create(api, {**HOOK, "params": {"url": "http://deploy:S3cr3t@h.example/x"}})
        assert job["params"]["url"] == "http://deploy:***@h.example/x"
        to_ping = {"handler": "ping", "params": job["params"]}
        status, problem, _ = await api.call(
            "PATCH", f"/v1/jobs/{job['id']}", json=to_ping, token=WRITE
        )
        assert (status, fields_of(problem)) == (422, ["params.url"]), problem
        assert "S3cr3t" not in str(problem) and "does not match" in problem["detail"]


@handler(
    params_schema={
        "type": "object",
        "properties": {"accounts": {"prefixItems": [{"type": "object"}], "items": False}},
    },
    secret_params={"dsn"},
)
async def one_account(ctx: HandlerContext) -> Result:
    return None


async def test_a_schema_refusal_quoting_list_items_masks_the_declared_secrets_in_them(
    make_engine: EngineFactory,
) -> None:
    """jsonschema quotes a list's extra items one by one, not the list: a declared secret in
    one (`dsn`, a name nothing else takes for secret) is masked by its value."""
    async with serving(make_engine, {**HANDLERS, "one_account": one_account}) as api:
        for dsn in ("hunter2-of-b", "C:\\vault\\hunter2 'x\""):
            accounts = [{"user": "a"}, {"user": "b", "dsn": dsn}]
            body = {**HOOK, "handler": "one_account", "params": {"accounts": accounts}}
            status, problem, _ = await api.call("POST", "/v1/jobs", json=body)
            assert (status, fields_of(problem)) == (422, ["params.accounts"]), problem
            assert "hunter2" not in str(problem) and "'user': 'b'" in problem["detail"]


@pytest.mark.parametrize("key", ["user.name", "$where", "nul\u0000byte"])
async def test_a_params_key_the_store_cannot_hold_is_a_422_naming_params_not_a_500(
    api: Api, key: str
) -> None:
    """A webhook's JSON body may hold any key; FerretDB refuses keys with a `.` or a leading
    `$`, and BSON any with a NUL byte. Such a job is refused naming `params` and nothing is
    stored (before: a 500); SQLite and PostgreSQL, which keep params as JSON text, hold it."""
    body = {**HOOK, "params": {**HOOK["params"], "body": {key: 1}}}
    status, reply, _ = await api.call("POST", "/v1/jobs", json=body, token=WRITE)
    if isinstance(api.store, SQLiteStore | PostgresStore):
        assert status == 201, reply
        return
    assert (status, fields_of(reply)) == (422, ["params"]), reply
    assert await api.store.list_jobs(JobQuery()) == []
    job = await create(api, HOOK)
    patch = {"params": {**HOOK["params"], "body": {key: 1}}}
    status, reply, _ = await api.call("PATCH", f"/v1/jobs/{job['id']}", json=patch)
    assert (status, fields_of(reply)) == (422, ["params"]), reply
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 1


async def test_a_timeout_too_short_to_run_anything_is_refused(api: Api) -> None:
    for timeout in (0.001, 0.5):
        status, problem, _ = await api.call(
            "POST", "/v1/jobs", json={**NOOP, "timeout_seconds": timeout}
        )
        assert (status, fields_of(problem)) == (422, ["timeout_seconds"]), problem
    job = await create(api, {**NOOP, "timeout_seconds": 1})
    status, problem, _ = await api.call(
        "PATCH", f"/v1/jobs/{job['id']}", json={"timeout_seconds": 1e-6}
    )
    assert (status, fields_of(problem)) == (422, ["timeout_seconds"]), problem


# -- bodies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "data", "key"),
    [
        ("POST", b'{"name": "a", "handler": "noop", "name": "b", "schedule": {}}', "name"),
        ("PATCH", b'{"params": {"url": "https://a.example/", "url": "http://10.0.0.1/"}}', "url"),
    ],
)  # fmt: skip
async def test_a_key_given_twice_is_refused_naming_it(
    api: Api, method: str, data: bytes, key: str
) -> None:
    job = await create(api, HOOK)
    path = "/v1/jobs" if method == "POST" else f"/v1/jobs/{job['id']}"
    status, problem, _ = await api.call(
        method, path, data=io.BytesIO(data), headers={"Content-Type": "application/json"}
    )
    assert status == 400, problem
    assert fields_of(problem) == [key]
    assert [j.name for j in await api.store.list_jobs(JobQuery())] == ["hook"]
    stored = await api.store.get_job(job["id"])
    assert stored is not None and stored.revision == 1


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"", 202),
        (b"{}", 202),
        (b"  {}  ", 202),
        (b'{"at": "2026-03-02T08:00:00Z"}', 422),
        (b"[]", 422),
        (b"null", 422),
        (b"{not json", 400),
        (b'{"a": 1, "a": 2}', 400),
    ],
)
async def test_a_trigger_takes_no_options(api: Api, data: bytes, status: int) -> None:
    job = await create(api, NOOP)
    got, body, _ = await api.call(
        "POST",
        f"/v1/jobs/{job['id']}/trigger",
        data=io.BytesIO(data),
        headers={"Content-Type": "application/json"},
    )
    assert got == status, body
    queued = await api.store.due_run_requests(T0 + timedelta(seconds=1), 10)
    assert len(queued) == (1 if status == 202 else 0)


# -- run requests ---------------------------------------------------------------------------------


async def test_pending_triggers_of_a_job_are_bounded(api: Api) -> None:
    job = await create(api, NOOP)
    trigger = f"/v1/jobs/{job['id']}/trigger"
    for _ in range(10):
        assert (await api.call("POST", trigger, token=WRITE))[0] == 202
    status, problem, _ = await api.call("POST", trigger, token=WRITE)
    assert status == 409, problem
    assert "10 triggers" in problem["detail"]
    other = await create(api, {**NOOP, "name": "other"})
    assert (await api.call("POST", f"/v1/jobs/{other['id']}/trigger"))[0] == 202, "per job"

    await api.harness.engine.drain()
    runs = await api.store.list_executions(ExecutionQuery(job_id=job["id"]))
    assert len(runs) == 10 and {e.status for e in runs} == {Status.SUCCESS}
    assert (await api.call("POST", trigger, token=WRITE))[0] == 202


# -- changes --------------------------------------------------------------------------------------


async def test_a_patch_that_changes_nothing_writes_nothing(api: Api) -> None:
    job = await create(api, {**HOOK, "params": {**HOOK["params"], "secret_headers": {"X": "s"}}})
    path = f"/v1/jobs/{job['id']}"
    same = {
        "max_retries": job["max_retries"],
        "params": job["params"],  # the secret as shown: ***
        "schedule": job["schedule"],
    }
    status, patched, headers = await api.call("PATCH", path, json=same)
    assert (status, headers["etag"], patched) == (200, '"1"', job)
    status, put, headers = await api.call("PUT", path, json={**HOOK, **same})
    assert (status, headers["etag"], put["revision"]) == (200, '"1"', 1)
    _, history, _ = await api.call("GET", f"{path}/history")
    assert [h["action"] for h in history["items"]] == ["create"]

    # A changed secret is a change, though the history shows it masked on both sides.
    secret = {"params": {**HOOK["params"], "secret_headers": {"X": "new"}}}
    status, changed, headers = await api.call("PATCH", path, json=secret)
    assert (status, headers["etag"]) == (200, '"2"'), changed


# -- backfill -------------------------------------------------------------------------------------


async def test_an_interval_backfill_starts_no_earlier_than_the_job(api: Api) -> None:
    job = await create(api, NOOP)
    api.clock.advance(3 * 3600)
    window = {"start": "1970-01-01T00:00:00Z", "end": api.clock.now().isoformat()}
    status, dry, _ = await api.call("POST", f"/v1/jobs/{job['id']}/backfill", json=window)
    assert status == 200, dry
    assert dry["occurrences"], dry
    created = datetime.fromisoformat(job["created_at"])
    assert all(datetime.fromisoformat(at) >= created for at in dry["occurrences"]), dry
    before = {"start": "1970-01-01T00:00:00Z", "end": "2026-03-02T08:00:00Z"}
    status, nothing, _ = await api.call("POST", f"/v1/jobs/{job['id']}/backfill", json=before)
    assert (status, nothing["occurrences"]) == (200, []), nothing
