"""/v1/dead-letters: list with filters and pages, re-drive one or by filter, discard; each
action in the job's history; a job's re-drive policy through the job endpoints; a dead letter
read alone, with its attempts and its traceback."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import READ, WRITE, Api

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
