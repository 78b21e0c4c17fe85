"""/v1/dead-letters: list with filters and pages, re-drive one or by filter, discard; each
action in the job's history; a job's re-drive policy through the job endpoints; a dead letter
read alone, with its attempts and its traceback."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.api.conftest import READ, WRITE, Api
from tests.conftest import make_job
from tickd.api.dead_letters import JOB_DELETED
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job, Status
from tickd.scheduler.ports.backends import ExecutionQuery

FAILING: dict[str, Any] = {
    "handler": "boom",
    "schedule": {"kind": "interval", "every_seconds": 60},
}


async def failing_job(api: Api, name: str, runs: int = 1, **fields: Any) -> dict[str, Any]:
    """A job whose `runs` first occurrences have failed for good."""
    status, job, _ = await api.call("POST", "/v1/jobs", json={**FAILING, "name": name, **fields})
    assert status == 201 and isinstance(job, dict), job
    for _ in range(runs):
        api.clock.advance(60)
        await api.harness.engine.drain()
    return job


def failed_for_good(job: Job, at: datetime) -> Execution:
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=at,
        status=Status.FAILED,
        started_at=at,
        finished_at=at + timedelta(seconds=1),
        duration_ms=1000,
        attempts=1,
        error=ExecutionError(type="RuntimeError", message="always fails"),
        dead_letter=DeadLetter.OPEN,
    )


async def dead_letters(api: Api, query: str = "") -> list[dict[str, Any]]:
    status, page, _ = await api.call("GET", f"/v1/dead-letters{query}", token=READ)
    assert status == 200, page
    items: list[dict[str, Any]] = page["items"]
    return items


async def test_dead_letters_are_listed_filtered_and_paged(api: Api) -> None:
    second = await failing_job(
        api, "second", runs=0, schedule={"kind": "interval", "every_seconds": 120}
    )
    first = await failing_job(api, "first", runs=2)
    listed = await dead_letters(api)
    assert sorted((d["job_name"], d["dead_letter"]) for d in listed) == [
        ("first", "open"),
        ("first", "open"),
        ("second", "open"),
    ]
    times = [d["scheduled_at"] for d in listed]
    assert times == sorted(times, reverse=True), "newest first"
    assert [d["job_id"] for d in await dead_letters(api, f"?job_id={second['id']}")] == [
        second["id"]
    ]
    assert len(await dead_letters(api, "?handler=boom")) == 3
    assert await dead_letters(api, "?handler=sleep") == []
    since = listed[0]["scheduled_at"].replace("+00:00", "Z")
    assert len(await dead_letters(api, f"?since={since}")) == 2  # the two of the last tick

    _, page, _ = await api.call("GET", "/v1/dead-letters?limit=2")
    _, rest, _ = await api.call("GET", f"/v1/dead-letters?limit=2&cursor={page['next_cursor']}")
    assert [d["id"] for d in page["items"] + rest["items"]] == [d["id"] for d in listed]
    assert rest["next_cursor"] is None
    assert first["id"] in {d["job_id"] for d in listed}

    status, body, _ = await api.call("GET", "/v1/dead-letters?state=stale")
    assert status == 400 and body["errors"][0]["field"] == "query.state"


async def test_a_redrive_reruns_the_occurrence_once_and_is_in_the_history(api: Api) -> None:
    job = await failing_job(api, "flaky")
    [dead] = await dead_letters(api)

    status, request, _ = await api.call(
        "POST", f"/v1/dead-letters/{dead['id']}/redrive", token=WRITE
    )
    assert status == 202, request
    assert (request["reason"], request["scheduled_at"]) == ("redrive", dead["scheduled_at"])
    again, problem, _ = await api.call("POST", f"/v1/dead-letters/{dead['id']}/redrive")
    assert again == 409 and "redriving" in problem["detail"]
    assert await dead_letters(api) == [], "a dead letter being re-driven is handled"

    await api.harness.engine.drain()
    [redriven] = await dead_letters(api, "?state=redriven")
    assert redriven["id"] == dead["id"]
    [new] = await dead_letters(api)  # the re-drive failed too: the occurrence's dead letter now
    assert new["idempotency_key"] == dead["idempotency_key"] and new["id"] != dead["id"]

    _, history, _ = await api.call("GET", f"/v1/jobs/{job['id']}/history")
    entry = history["items"][0]
    assert (entry["action"], entry["actor"]) == ("redrive", "deployer")
    assert entry["changes"]["execution"] == dead["id"]


async def test_redrive_by_filter_is_bounded_and_leaves_the_rest(api: Api) -> None:
    other = await failing_job(
        api, "other", runs=0, schedule={"kind": "once", "at": "2026-03-02T09:01:00Z"}
    )
    await failing_job(api, "many", runs=3)
    status, out, _ = await api.call(
        "POST", "/v1/dead-letters/redrive", json={"handler": "boom", "limit": 2}
    )
    assert status == 202, out
    assert len(out["requests"]) == 2 and out["more"] is True and out["skipped"] == []
    assert len(await dead_letters(api)) == 2

    status, out, _ = await api.call(
        "POST", "/v1/dead-letters/redrive", json={"job_id": other["id"]}
    )
    assert [r["job_id"] for r in out["requests"]] == [other["id"]] and out["more"] is False
    status, body, _ = await api.call("POST", "/v1/dead-letters/redrive", json={"limit": 101})
    assert status == 422 and body["errors"][0]["field"] == "limit"


async def test_discard_gives_up_on_a_dead_letter(api: Api) -> None:
    job = await failing_job(api, "hopeless")
    [dead] = await dead_letters(api)
    status, body, _ = await api.call("POST", f"/v1/dead-letters/{dead['id']}/discard")
    assert (status, body["dead_letter"]) == (200, "discarded")
    assert await dead_letters(api) == []
    again, _, _ = await api.call("POST", f"/v1/dead-letters/{dead['id']}/discard")
    assert again == 409
    redrive, _, _ = await api.call("POST", f"/v1/dead-letters/{dead['id']}/redrive")
    assert redrive == 409
    _, history, _ = await api.call("GET", f"/v1/jobs/{job['id']}/history")
    assert history["items"][0]["action"] == "discard"


async def test_what_is_no_dead_letter_cannot_be_acted_on(api: Api) -> None:
    for path in ("/v1/dead-letters/nope/redrive", "/v1/dead-letters/nope/discard"):
        status, _, _ = await api.call("POST", path)
        assert status == 404
    status, job, _ = await api.call(
        "POST",
        "/v1/jobs",
        json={**FAILING, "name": "fine", "handler": "ping", "params": {"url": "https://x.io"}},
    )
    api.clock.advance(60)
    await api.harness.engine.drain()
    _, runs, _ = await api.call("GET", f"/v1/jobs/{job['id']}/executions")
    status, body, _ = await api.call("POST", f"/v1/dead-letters/{runs['items'][0]['id']}/redrive")
    assert status == 404 and "not a dead letter" in body["detail"]
    status, _, _ = await api.call("POST", "/v1/dead-letters/x/discard", token=READ)
    assert status == 403


async def test_a_jobs_redrive_policy_is_set_shown_and_removed(api: Api) -> None:
    policy = {"max_attempts": 2, "backoff_seconds": 30}
    status, job, _ = await api.call(
        "POST", "/v1/jobs", json={**FAILING, "name": "auto", "redrive": policy}
    )
    assert status == 201 and job["redrive"] == policy
    status, patched, _ = await api.call("PATCH", f"/v1/jobs/{job['id']}", json={"redrive": None})
    assert status == 200 and patched["redrive"] is None
    _, history, _ = await api.call("GET", f"/v1/jobs/{job['id']}/history")
    assert history["items"][0]["changes"]["redrive"] == {"from": policy, "to": None}
    status, body, _ = await api.call(
        "PATCH",
        f"/v1/jobs/{job['id']}",
        json={"redrive": {"max_attempts": 0, "backoff_seconds": 1}},
    )
    assert status == 422 and body["errors"][0]["field"] == "redrive.max_attempts"


async def test_a_dead_letter_read_alone_tells_each_attempt_and_where_it_raised(api: Api) -> None:
    await failing_job(api, "retried", max_retries=1)
    [dead] = await dead_letters(api)
    assert "attempt_log" not in dead, "a listing stays small"
    status, run, _ = await api.call("GET", f"/v1/executions/{dead['id']}", token=READ)
    assert status == 200, run
    first, last = run["attempt_log"]
    assert [first["number"], last["number"]] == [1, 2]
    assert first["error"]["message"] == "always fails" and first["backoff_seconds"] > 0
    assert last["backoff_seconds"] is None
    assert "raise RuntimeError" in run["error"]["traceback"]


async def test_deleting_a_job_discards_its_dead_letters_and_keeps_them_readable(api: Api) -> None:
    job = await failing_job(api, "retired", runs=2)
    assert await api.store.count_dead_letters() == {("boom", "default"): 2}
    status, _, _ = await api.call("DELETE", f"/v1/jobs/{job['id']}", token=WRITE)
    assert status == 204
    assert await dead_letters(api) == [], "nothing is left open to alert on"
    assert await api.store.count_dead_letters() == {}
    kept = await dead_letters(api, "?state=discarded")
    assert [(d["job_id"], d["dead_letter"]) for d in kept] == [(job["id"], "discarded")] * 2


async def left_open_by_a_deleted_job(api: Api) -> dict[str, Any]:
    """A dead letter still open though its job is gone (left so by an older version)."""
    job = await failing_job(api, "gone")
    [dead] = await dead_letters(api)
    await api.store.delete_job(job["id"])
    await api.store.mark_dead_letters(
        [dead["id"]], states=[DeadLetter.DISCARDED], to=DeadLetter.OPEN
    )
    assert await api.store.count_dead_letters() == {("boom", ""): 1}, "of no domain, its job gone"
    return dead


async def test_a_dead_letter_of_a_deleted_job_is_discarded_but_not_redriven(api: Api) -> None:
    dead = await left_open_by_a_deleted_job(api)
    status, problem, _ = await api.call(
        "POST", f"/v1/dead-letters/{dead['id']}/redrive", token=WRITE
    )
    assert status == 409 and "its job was deleted" in problem["detail"]
    status, out, _ = await api.call("POST", "/v1/dead-letters/redrive", json={}, token=WRITE)
    assert (status, out["requests"]) == (202, [])
    assert out["skipped"] == [{"id": dead["id"], "reason": JOB_DELETED}]

    status, body, _ = await api.call("POST", f"/v1/dead-letters/{dead['id']}/discard", token=WRITE)
    assert (status, body["dead_letter"]) == (200, "discarded"), body
    assert await api.store.count_dead_letters() == {}, "the dead-letter alert clears"
    entry, *_ = await api.store.list_changes(dead["job_id"])  # the deleted job's history
    assert (entry.action, entry.job_name, entry.actor) == ("discard", "gone", "deployer")
    assert entry.changes["execution"] == dead["id"]


async def test_redrive_all_on_screen_redrives_exactly_the_ones_listed(api: Api) -> None:
    """The dashboard lists the 1,000 newest of 1,200 open dead letters and its button says so:
    re-driving them by their ids queues exactly those 1,000, 100 a call, and leaves the 200
    older ones open."""
    job = make_job("noisy", "boom")
    await api.store.insert_job(job)
    await api.store.insert_executions(
        [failed_for_good(job, api.clock.now() - timedelta(minutes=m)) for m in range(1, 1201)]
    )
    listed: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(2):  # the dashboard reads two pages of 500
        _, page, _ = await api.call("GET", f"/v1/dead-letters?limit=500{cursor}", token=READ)
        listed += page["items"]
        cursor = f"&cursor={page['next_cursor']}"
    assert len(listed) == 1000

    queued: list[str] = []
    for start in range(0, len(listed), 100):
        ids = [d["id"] for d in listed[start : start + 100]]
        status, out, _ = await api.call(
            "POST", "/v1/dead-letters/redrive", json={"ids": ids}, token=WRITE
        )
        assert status == 202 and out["skipped"] == [] and out["more"] is False, out
        queued += [r["scheduled_at"] for r in out["requests"]]
    assert sorted(queued) == sorted(d["scheduled_at"] for d in listed)
    left = await api.store.list_executions(ExecutionQuery(dead_letter=DeadLetter.OPEN, limit=2000))
    assert len(left) == 200 and max(e.scheduled_at for e in left) < min(
        datetime.fromisoformat(d["scheduled_at"]) for d in listed
    )


async def test_redrive_by_ids_skips_what_is_not_an_open_dead_letter_of_the_filter(
    api: Api,
) -> None:
    await failing_job(api, "twice", runs=2)
    first, _ = await dead_letters(api)
    status, out, _ = await api.call(
        "POST",
        "/v1/dead-letters/redrive",
        json={"ids": [first["id"], "nope"], "handler": "sleep"},
        token=WRITE,
    )
    assert status == 202 and out["requests"] == []
    assert {s["id"] for s in out["skipped"]} == {first["id"], "nope"}
    status, body, _ = await api.call(
        "POST", "/v1/dead-letters/redrive", json={"ids": ["x"] * 101}, token=WRITE
    )
    assert status == 422 and body["errors"][0]["field"] == "ids"
    assert len(await dead_letters(api)) == 2, "a refused call changes nothing"
