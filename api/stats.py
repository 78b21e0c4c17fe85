"""GET /v1/stats: what the dashboard's "Now" view draws, from the daemon's own data; GET
/v1/session: whose token the dashboard holds, so it offers only what that token may do.

Executions of the window are read from the store newest first, at most MAX_EXECUTIONS of them,
so a busy daemon costs one bounded query however long the window: when the cap is reached the
reply says so (`truncated`) and from when on it is complete (`complete_since`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from tickd.api.models import ExecutionOut, Strict
from tickd.api.routing import B, Call, Q, Reply, Route, Routes
from tickd.api.v1 import execution_out, state
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports import ExecutionQuery

MAX_EXECUTIONS = 5000
# One chart point per bucket: about 60 points whatever the window.
BUCKETS = 60
MIN_BUCKET_SECONDS = 60
PROBLEMS_SHOWN = 20
PROBLEM_STATUSES = (Status.FAILED, Status.TIMEOUT, Status.ABANDONED, Status.SKIPPED)


class StatsQuery(Strict):
    window: int = Field(default=3600, ge=60, le=7 * 86400, description="Seconds back from now")


class Bucket(BaseModel):
    start: datetime
    counts: dict[str, int] = Field(description="Executions by status, by scheduled time")
    lag_p50_seconds: float | None
    lag_p99_seconds: float | None


class StatsOut(BaseModel):
    now: datetime
    window_seconds: int
    bucket_seconds: int
    due_backlog: int = Field(description="Enabled jobs due now and not running")
    busy_workers: int | None = Field(description="Null when no dispatcher runs in this process")
    workers: int
    totals: dict[str, int]
    lag_p50_seconds: float | None
    lag_p99_seconds: float | None
    buckets: list[Bucket]
    problems: list[ExecutionOut] = Field(
        description="The newest failed, timed-out, abandoned and skipped executions"
    )
    executions_read: int
    truncated: bool = Field(description=f"More than {MAX_EXECUTIONS} executions in the window")
    complete_since: datetime = Field(description="Counts are complete from here on")


async def stats(call: Call[StatsQuery, None]) -> Reply:
    s = state(call)
    q = call.query
    now = s.clock.now()
    since = now - timedelta(seconds=q.window)
    runs = await s.store.list_executions(
        ExecutionQuery(since=since, until=now + timedelta(microseconds=1), limit=MAX_EXECUTIONS)
    )
    truncated = len(runs) >= MAX_EXECUTIONS
    bucket_seconds = max(MIN_BUCKET_SECONDS, math.ceil(q.window / BUCKETS))
    lags = [lag for run in runs if (lag := lag_seconds(run)) is not None]
    return Reply(
        StatsOut(
            now=now,
            window_seconds=q.window,
            bucket_seconds=bucket_seconds,
            due_backlog=(await s.store.due_backlog(now)).due,
            busy_workers=busy_workers(call),
            workers=s.settings.workers,
            totals=dict(Counter(str(run.status) for run in runs)),
            lag_p50_seconds=percentile(lags, 0.50),
            lag_p99_seconds=percentile(lags, 0.99),
            buckets=buckets(runs, since, now, bucket_seconds),
            problems=[execution_out(r) for r in runs if r.status in PROBLEM_STATUSES][
                :PROBLEMS_SHOWN
            ],
            executions_read=len(runs),
            truncated=truncated,
            complete_since=runs[-1].scheduled_at if truncated else since,
        )
    )


def busy_workers(call: Call[Q, B]) -> int | None:
    s = state(call)
    if s.dispatcher_health is None:
        return None  # `tickd api`: the workers are in another process
    value = s.metrics.registry.get_sample_value("tickd_busy_workers")
    return int(value or 0)


def lag_seconds(run: Execution) -> float | None:
    # A skipped occurrence never started (the engine stamps it when it gave up on it): counting
    # it would report the outage that caused the skip as fire lag.
    if run.started_at is None or run.status is Status.SKIPPED:
        return None
    return max(0.0, (run.started_at - run.scheduled_at).total_seconds())


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest rank: a value that was measured, never one between two."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def buckets(
    runs: Sequence[Execution], since: datetime, now: datetime, bucket_seconds: int
) -> list[Bucket]:
    count = math.ceil((now - since).total_seconds() / bucket_seconds)
    grouped: list[list[Execution]] = [[] for _ in range(count)]
    for run in runs:
        index = int((run.scheduled_at - since).total_seconds() // bucket_seconds)
        grouped[min(max(index, 0), count - 1)].append(run)
    return [bucket(since + timedelta(seconds=i * bucket_seconds), g) for i, g in enumerate(grouped)]


def bucket(start: datetime, runs: Sequence[Execution]) -> Bucket:
    lags = [lag for run in runs if (lag := lag_seconds(run)) is not None]
    return Bucket(
        start=start,
        counts=dict(Counter(str(run.status) for run in runs)),
        lag_p50_seconds=percentile(lags, 0.50),
        lag_p99_seconds=percentile(lags, 0.99),
    )


class SessionOut(BaseModel):
    actor: str = Field(description="The token's name; `anonymous` when the API has no tokens")
    scope: str = Field(description="read, write or admin: what the dashboard offers to do")
    now: datetime = Field(description="The daemon's clock, which relative times are shown against")


async def session(call: Call[None, None]) -> Reply:
    return Reply(SessionOut(actor=call.actor, scope=call.scope, now=state(call).clock.now()))


STATS_ROUTES: Routes = [
    Route(
        "GET",
        "/v1/session",
        session,
        "Who the presented token is and its scope",
        "read",
        SessionOut,
        tag="operations",
    ),
    Route(
        "GET",
        "/v1/stats",
        stats,
        "Executions of the last `window` seconds by status and minute, fire lag percentiles, "
        "the due backlog and the newest failures and skips (what the dashboard draws)",
        "read",
        StatsOut,
        query=StatsQuery,
        tag="operations",
    ),
]
