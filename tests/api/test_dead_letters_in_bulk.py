"""Dead letters in bulk: several discarded at once, by their ids or all that match a filter,
bounded and counted exactly; identical errors grouped with their counts."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from tests.api.conftest import ADMIN, READ, WRITE, Api
from tests.api.test_dead_letters_api import dead_letters, failed_for_good
from tests.conftest import make_job
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job
from tickd.scheduler.ports.backends import ExecutionQuery

REFUSED = ExecutionError(type="ConnectionError", message="upstream refused the connection")
EXPIRED = ExecutionError(type="HTTPError", message="401 token expired\nrequest id 7f3a")


async def job_with_dead_letters(
    api: Api,
    name: str,
    errors: list[ExecutionError],
    *,
    start_minutes: int = 1,
    system: bool = False,
) -> tuple[Job, list[Execution]]:
    """A job and one open dead letter per error, the first of them the newest."""
    job = make_job(name, "boom", system=system)
    await api.store.insert_job(job)
    now = api.clock.now()
    runs = [
        replace(failed_for_good(job, now - timedelta(minutes=start_minutes + i)), error=error)
        for i, error in enumerate(errors)
    ]
    await api.store.insert_executions(runs)
    return job, runs


async def discard(api: Api, body: dict[str, Any], token: str = WRITE) -> tuple[int, Any]:
    status, out, _ = await api.call("POST", "/v1/dead-letters/discard", json=body, token=token)
    return status, out


async def test_discarding_several_by_id_discards_exactly_those_and_counts_them(api: Api) -> None:
    job, runs = await job_with_dead_letters(api, "export", [REFUSED] * 4)
    chosen = [runs[0].id, runs[2].id]
    status, out = await discard(api, {"ids": [*chosen, "no-such-run"]})
    assert status == 200, out
    assert (out["discarded"], out["count"], out["more"]) == (chosen, 2, False)
    assert [s["id"] for s in out["skipped"]] == ["no-such-run"]
    assert {d["id"] for d in await dead_letters(api)} == {runs[1].id, runs[3].id}
    assert {d["id"] for d in await dead_letters(api, "?state=discarded")} == set(chosen)
    [entry, *_] = await api.store.list_changes(job.id)
    assert (entry.action, entry.actor, entry.changes["count"]) == ("discard", "deployer", 2)

    again, out = await discard(api, {"ids": chosen})
    assert again == 200 and out["count"] == 0 and len(out["skipped"]) == 2, "discarded once"


async def test_discard_all_matching_a_filter_is_bounded_and_says_more_match(api: Api) -> None:
    await job_with_dead_letters(api, "export", [REFUSED] * 3)
    other, _ = await job_with_dead_letters(api, "import", [REFUSED], start_minutes=30)
    status, out = await discard(api, {"handler": "boom", "limit": 2})
    assert status == 200 and out["count"] == 2 and out["more"] is True, out
    status, out = await discard(api, {"job_id": other.id})
    assert status == 200 and out["count"] == 1 and out["more"] is False, out
    assert [d["job_name"] for d in await dead_letters(api)] == ["export"]


async def test_discard_all_of_one_error_type_leaves_the_other_errors_open(api: Api) -> None:
    _, runs = await job_with_dead_letters(api, "export", [REFUSED, EXPIRED, REFUSED, EXPIRED])
    status, out = await discard(api, {"error_type": "HTTPError"})
    assert status == 200 and out["discarded"] == [runs[1].id, runs[3].id], out
    left = await dead_letters(api)
    assert {d["error"]["type"] for d in left} == {"ConnectionError"} and len(left) == 2


async def test_discard_by_time_keeps_what_is_outside_the_window(api: Api) -> None:
    _, runs = await job_with_dead_letters(api, "export", [REFUSED] * 3)
    since, until = runs[2].scheduled_at, runs[0].scheduled_at  # the middle one alone, and the last
    status, out = await discard(api, {"since": since.isoformat(), "until": until.isoformat()})
    assert status == 200 and out["discarded"] == [runs[1].id, runs[2].id], out


async def test_bad_bulk_discards_name_the_field_and_change_nothing(api: Api) -> None:
    await job_with_dead_letters(api, "export", [REFUSED])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ids": ["x"] * 101}, "ids"),
        ({"limit": 0}, "limit"),
        ({"error_type": ""}, "error_type"),
        ({"state": "open"}, "state"),
    ]
    for body, field in cases:
        status, problem = await discard(api, body)
        assert status == 422, (body, problem)
        assert problem["errors"][0]["field"] == field
    status, _ = await discard(api, {}, token=READ)
    assert status == 403
    assert len(await dead_letters(api)) == 1


async def test_identical_errors_are_grouped_per_job_with_their_counts(api: Api) -> None:
    # The same error a second line apart is one error; the same error of another job is
    # another group: on call re-drives or discards a job's failures, not another's.
    job, runs = await job_with_dead_letters(api, "export", [EXPIRED, REFUSED, REFUSED, EXPIRED])
    other, other_runs = await job_with_dead_letters(api, "import", [REFUSED], start_minutes=30)
    second_line = replace(EXPIRED, message="401 token expired\nrequest id 9c1d")
    await api.store.insert_executions(
        [replace(failed_for_good(job, api.clock.now() - timedelta(minutes=20)), error=second_line)]
    )
    status, out, _ = await api.call("GET", "/v1/dead-letters/groups", token=READ)
    assert status == 200, out
    assert (out["read"], out["complete"]) == (6, True)
    summary = [(g["job_name"], g["error_type"], g["error"], g["count"]) for g in out["groups"]]
    assert summary == [
        ("export", "HTTPError", "401 token expired", 3),
        ("export", "ConnectionError", "upstream refused the connection", 2),
        ("import", "ConnectionError", "upstream refused the connection", 1),
    ]
    refused = out["groups"][1]
    assert refused["ids"] == [runs[1].id, runs[2].id], "newest first, to act on exactly those"
    assert out["groups"][2]["ids"] == [other_runs[0].id] and other.id == out["groups"][2]["job_id"]

    _, only, _ = await api.call("GET", f"/v1/dead-letters/groups?job_id={other.id}")
    assert [g["count"] for g in only["groups"]] == [1]


async def test_groups_count_the_newest_two_thousand_and_say_they_stopped_there(api: Api) -> None:
    job = make_job("noisy", "boom")
    await api.store.insert_job(job)
    await api.store.insert_executions(
        [failed_for_good(job, api.clock.now() - timedelta(minutes=m)) for m in range(1, 2101)]
    )
    status, out, _ = await api.call("GET", "/v1/dead-letters/groups")
    assert status == 200
    assert (out["read"], out["complete"], out["groups"][0]["count"]) == (2000, False, 2000)
    everything = await api.store.list_executions(
        ExecutionQuery(dead_letter=DeadLetter.OPEN, limit=3000)
    )
    assert len(everything) == 2100, "reading the groups changes nothing"


async def test_a_system_jobs_dead_letters_are_skipped_for_a_token_without_admin(
    api: Api,
) -> None:
    _, system_runs = await job_with_dead_letters(api, "alert-scan", [REFUSED], system=True)
    _, runs = await job_with_dead_letters(api, "export", [REFUSED], start_minutes=30)
    status, out = await discard(api, {})
    assert status == 200 and out["discarded"] == [runs[0].id], out
    [skipped] = out["skipped"]
    assert skipped["id"] == system_runs[0].id and "admin" in skipped["reason"]
    status, out = await discard(api, {"ids": [system_runs[0].id]}, token=ADMIN)
    assert status == 200 and out["count"] == 1, out


async def test_redrive_all_of_one_error_type_leaves_the_other_errors_open(api: Api) -> None:
    _, runs = await job_with_dead_letters(api, "export", [REFUSED, EXPIRED, REFUSED])
    status, out, _ = await api.call(
        "POST", "/v1/dead-letters/redrive", json={"error_type": "ConnectionError"}, token=WRITE
    )
    assert status == 202 and len(out["requests"]) == 2 and out["more"] is False, out
    assert [d["id"] for d in await dead_letters(api)] == [runs[1].id]
