"""GET /v1/stats (what the dashboard's "Now" view draws) and the dashboard's static shell."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.api.conftest import READ, WRITE, Api
from tests.conftest import T0, make_job
from tickd.api import stats
from tickd.api.ui import ui_files
from tickd.scheduler.model import Execution, ExecutionError, Status


def run(
    minutes_ago: float, status: Status, lag: float = 0.0, *, reason: str | None = None
) -> Execution:
    scheduled = T0 - timedelta(minutes=minutes_ago)
    started = scheduled + timedelta(seconds=lag)
    error = ExecutionError(type="Misfire" if status is Status.SKIPPED else "RuntimeError",
                           message=reason) if reason else None  # fmt: skip
    return Execution(
        job_id="job-1",
        job_name="report",
        handler="ping",
        scheduled_at=scheduled,
        status=status,
        started_at=started,
        finished_at=started,
        error=error,
    )


async def test_stats_count_the_window_by_status_and_minute_with_lag_percentiles(api: Api) -> None:
    api.clock.set(T0)
    await api.store.insert_job(make_job("due-now", "ping", next_run_at=T0 - timedelta(seconds=5)))
    await api.store.insert_executions(
        [run(1.5, Status.SUCCESS, lag) for lag in (0.1, 0.2, 0.3, 0.4)]
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
    assert body["lag_p50_seconds"] == 0.3 and body["lag_p99_seconds"] == 9.0
    assert body["due_backlog"] == 1 and body["busy_workers"] == 0
    assert body["bucket_seconds"] == 60 and len(body["buckets"]) == 60
    last_but_one = body["buckets"][-2]
    assert last_but_one["counts"] == {"success": 4, "failed": 1}
    assert last_but_one["lag_p50_seconds"] == 0.3
    assert [p["error"]["message"] for p in body["problems"]] == [
        "upstream said no",
        "missed by 400 s",
    ]
    assert body["truncated"] is False and body["executions_read"] == 6


async def test_stats_read_a_bounded_number_of_executions_and_say_so(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.clock.set(T0)
    monkeypatch.setattr(stats, "MAX_EXECUTIONS", 3)
    await api.store.insert_executions([run(m, Status.SUCCESS) for m in (1, 2, 3, 4, 5)])

    _, body, _ = await api.call("GET", "/v1/stats?window=600", token=READ)

    assert body["executions_read"] == 3 and body["truncated"] is True
    assert body["complete_since"] == (T0 - timedelta(minutes=3)).isoformat().replace("+00:00", "Z")


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
