"""GET /v1/stats (what the dashboard's "Now" view draws) and the dashboard's static shell."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.api.conftest import READ, WRITE, Api
from tests.conftest import T0, make_job
from tickd.api.ui import ui_files
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Status

# Rows a test writes in one call: a FerretDB write of thousands can outlast the client's timeout.
INSERT_BATCH = 1000


def run(
    minutes_ago: float,
    status: Status,
    lag: float = 0.0,
    *,
    reason: str | None = None,
    job: str = "report",
    dead_letter: DeadLetter | None = None,
) -> Execution:
    """A run of `job` (its id is its name with "id-" before it), due `minutes_ago`."""
    scheduled = T0 - timedelta(minutes=minutes_ago)
    started = scheduled + timedelta(seconds=lag)
    error = ExecutionError(type="Misfire" if status is Status.SKIPPED else "RuntimeError",
                           message=reason) if reason else None  # fmt: skip
    return Execution(
        job_id=f"id-{job}",
        job_name=job,
        handler="ping",
        scheduled_at=scheduled,
        status=status,
        started_at=started,
        finished_at=started,
        error=error,
        dead_letter=dead_letter,
    )


async def test_stats_count_the_window_by_status_and_minute_with_lag_percentiles(api: Api) -> None:
    api.clock.set(T0)
    await api.store.insert_job(make_job("due-now", "ping", next_run_at=T0 - timedelta(seconds=5)))
    await api.store.insert_executions(
        [run(1.5, Status.SUCCESS, lag, job=f"ok-{lag}") for lag in (0.1, 0.2, 0.3, 0.4)]
        + [
            run(1.5, Status.FAILED, 9.0, reason="upstream said no"),
            # Stamped when the engine gave up on it, half an hour late: no fire lag.
            run(30, Status.SKIPPED, 1800.0, reason="missed by 400 s"),
            run(61, Status.FAILED, reason="outside the window"),
        ]
    )

    status, body, _ = await api.call("GET", "/v1/stats?window=3600", token=READ)

    assert status == 200
    assert body["totals"] == {"success": 4, "failed": 1, "skipped": 1}
    assert body["by_handler"] == {"ping": {"success": 4, "failed": 1, "skipped": 1}}
    assert body["lag_p50_seconds"] == 0.3 and body["lag_p99_seconds"] == 9.0
    assert body["lag_measured"] == 5
    assert body["due_backlog"] == 1 and body["busy_workers"] == 0
    assert body["bucket_seconds"] == 60 and len(body["buckets"]) == 60
    last_but_one = body["buckets"][-2]
    assert last_but_one["counts"] == {"success": 4, "failed": 1}
    assert last_but_one["lag_p50_seconds"] == 0.3
    failures = body["attention"]["failures"]
    assert [(f["job_name"], f["count"]) for f in failures] == [("report", 2)]
    assert [e["error"]["message"] for e in failures[0]["errors"]] == [
        "upstream said no",
        "missed by 400 s",
    ]


async def test_stats_count_every_execution_of_a_burst_beyond_five_thousand(api: Api) -> None:
    api.clock.set(T0)
    dead = [
        run(50, Status.FAILED, reason="card declined", job=f"billing-{i}",
            dead_letter=DeadLetter.OPEN)
        for i in range(18)
    ]  # fmt: skip
    burst = [run(i / 1000, Status.SUCCESS, 0.01, job=f"burst-{i}") for i in range(6000)]
    runs = dead + burst
    for start in range(0, len(runs), INSERT_BATCH):
        await api.store.insert_executions(runs[start : start + INSERT_BATCH])

    _, body, _ = await api.call("GET", "/v1/stats?window=3600", token=READ)

    assert body["totals"] == {"success": 6000, "failed": 18}
    assert body["lag_measured"] == 6018
    assert body["open_dead_letters"] == 18
    attention = body["attention"]
    assert attention["dead_letters_total"] == 18 and attention["dead_letter_jobs"] == 18
    assert len(attention["dead_letters"]) == 18
    assert attention["failure_jobs"] == 18


async def test_one_job_that_always_fails_leaves_room_for_the_others(api: Api) -> None:
    api.clock.set(T0)
    noisy = [run(i / 10, Status.FAILED, reason="always", job="noisy") for i in range(100)]
    quiet = run(40, Status.TIMEOUT, reason="slow upstream", job="quiet")
    await api.store.insert_executions([*noisy, quiet])
    await api.store.insert_job(make_job("stuck", "ping", next_run_at=T0 - timedelta(minutes=7)))
    await api.store.insert_job(make_job("failing", "ping", consecutive_failures=3))

    _, body, _ = await api.call("GET", "/v1/stats?window=3600", token=READ)

    attention = body["attention"]
    failures = [(f["job_name"], f["count"]) for f in attention["failures"]]
    assert failures == [("noisy", 100), ("quiet", 1)]
    assert [(j["job_name"], j["late_seconds"]) for j in attention["late"]] == [("stuck", 420.0)]
    assert [j["job_name"] for j in attention["failing"]] == ["failing"]
    assert attention["failing"][0]["consecutive_failures"] == 3


@pytest.mark.parametrize(("query", "field"), [("window=10", "query.window"), ("x=1", "query.x")])
async def test_bad_stats_queries_name_the_parameter(api: Api, query: str, field: str) -> None:
    status, body, _ = await api.call("GET", f"/v1/stats?{query}")
    assert status == 400
    assert [e["field"] for e in body["errors"]] == [field]


async def test_stats_need_a_token(api: Api) -> None:
    status, _, _ = await api.call("GET", "/v1/stats", token=None)
    assert status == 401


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ],
)
async def test_the_dashboard_shell_loads_without_a_token_under_a_strict_policy(
    api: Api, path: str, content_type: str
) -> None:
    async with api.client.get(path) as response:
        assert response.status == 200
        assert response.content_type == content_type
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "unsafe-inline" not in policy


# A script, style, font or image from another origin: a CDN the daemon may not reach.
ELSEWHERE = re.compile(
    r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//"""
    r"""|from\s+["'](?:https?:)?//|@import|import\(\s*["'](?:https?:)?//"""
)


def test_the_dashboard_loads_nothing_from_elsewhere() -> None:
    shipped = ui_files()
    assert {"index.html", "app.js", "app.css"} <= set(shipped)
    for name, (content, _) in shipped.items():
        assert not ELSEWHERE.search(content.decode()), name


@pytest.mark.parametrize("name", ["nope.js", "..%2Fapp.py", "%2E%2E%2Fui.py", "app.js%00.css"])
async def test_only_the_dashboards_own_files_are_served(api: Api, name: str) -> None:
    async with api.client.get(f"/ui/{name}") as response:
        assert response.status == 404


@pytest.mark.parametrize(("token", "scope"), [(READ, "read"), (WRITE, "write")])
async def test_the_session_names_the_tokens_scope(api: Api, token: str, scope: str) -> None:
    status, body, _ = await api.call("GET", "/v1/session", token=token)
    assert status == 200 and body["scope"] == scope
    assert token not in str(body)
