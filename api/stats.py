"""GET /v1/stats: what the dashboard's "Now" view draws, from the daemon's own data; GET
/v1/session: whose token the dashboard holds, so it offers only what that token may do.

The store aggregates the window's executions (ViewStore.execution_stats: every one of them, however
many) and gathers what needs attention grouped by job (ViewStore.attention): a few bounded queries
whatever the number of jobs and runs, and no figure drawn from a sample. A store that stops a
long read at its time limit counts the newest executions first and says since when it counted:
the answer is then `complete: false`, with `counted_since` and the reason.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from tickd.api.models import ErrorOut, Strict, of_domain
from tickd.api.routing import B, Call, Q, Reply, Route, Routes
from tickd.api.scoping import within
from tickd.api.v1 import state
from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import Attention, ExecutionStats, JobTrouble, LagPercentiles

# One chart point per bucket: about 60 points whatever the window.
BUCKETS = 60
MIN_BUCKET_SECONDS = 60
# Jobs of each kind of trouble listed; their totals are whole.
ATTENTION_SHOWN = 20
# A job free to run and due longer ago than this is late (the dispatcher takes due jobs within
# a tick or two).
LATE_AFTER_SECONDS = 60


class StatsQuery(Strict):
    window: int = Field(default=3600, ge=60, le=7 * 86400, description="Seconds back from now")
    domain: str | None = of_domain(
        "Only the figures of the jobs of this domain (the busy workers are null)"
    )


class Bucket(BaseModel):
    start: datetime
    counts: dict[str, int] = Field(description="Executions by status, by scheduled time")
    lag_p50_seconds: float | None
    lag_p99_seconds: float | None


class RecentError(BaseModel):
    status: str
    error: ErrorOut | None
    scheduled_at: datetime


class JobTroubleOut(BaseModel):
    job_id: str
    job_name: str
    handler: str
    count: int
    newest_at: datetime = Field(description="Scheduled time of the newest of them")
    errors: list[RecentError] = Field(description="The newest distinct statuses and errors")


class FailingJobOut(BaseModel):
    job_id: str
    job_name: str
    handler: str
    consecutive_failures: int
    last_status: str | None
    last_error: str | None
    last_finished_at: datetime | None


class LateJobOut(BaseModel):
    job_id: str
    job_name: str
    handler: str
    due_at: datetime
    late_seconds: float


class AttentionOut(BaseModel):
    dead_letters: list[JobTroubleOut] = Field(description="Open dead letters, by job")
    dead_letters_total: int
    dead_letter_jobs: int
    failures: list[JobTroubleOut] = Field(
        description="Failed, timed-out, abandoned and skipped executions of the window, by job"
    )
    failure_jobs: int
    failing: list[FailingJobOut] = Field(description="Jobs whose last runs failed, most first")
    failing_total: int
    late: list[LateJobOut] = Field(
        description=f"Jobs free to run and due over {LATE_AFTER_SECONDS} s ago, most late first"
    )
    late_total: int


class StatsOut(BaseModel):
    now: datetime
    window_seconds: int
    bucket_seconds: int
    due_backlog: int = Field(description="Enabled jobs due now and not running")
    busy_workers: int | None = Field(
        description="Null when no dispatcher runs in this process, for a token limited to "
        "domains and for the figures of one domain (the workers are shared by every domain)"
    )
    workers: int
    totals: dict[str, int] = Field(description="Every execution of the window, by status")
    by_handler: dict[str, dict[str, int]] = Field(description="Handler -> status -> executions")
    lag_p50_seconds: float | None = Field(description="Fire lag of first starts, nearest rank")
    lag_p99_seconds: float | None
    lag_measured: int = Field(description="Occurrences the lag percentiles are of")
    buckets: list[Bucket]
    complete: bool = Field(
        default=True,
        description="False when the store stopped its read at its time limit: every figure "
        "of the executions (totals, lag, buckets) is then of those due since counted_since only",
    )
    counted_since: datetime | None = Field(
        default=None,
        description="When not complete, the executions due from here on are counted, those due "
        "before it are not; null when complete",
    )
    partial_reason: str | None = Field(
        default=None, description="Why the figures are partial; null when complete"
    )
    open_dead_letters: int
    attention: AttentionOut


async def stats(call: Call[StatsQuery, None]) -> Reply:
    s = state(call)
    now = s.clock.now()
    since = now - timedelta(seconds=call.query.window)
    until = now + timedelta(microseconds=1)
    bucket_seconds = max(MIN_BUCKET_SECONDS, math.ceil(call.query.window / BUCKETS))
    domains = within(call, call.query.domain)
    figures = await s.views.execution_stats(since, until, bucket_seconds, domains=domains)
    late_before = now - timedelta(seconds=LATE_AFTER_SECONDS)
    attention = await s.views.attention(
        since, until, late_before, limit=ATTENTION_SHOWN, domains=domains
    )
    return Reply(
        StatsOut(
            now=now,
            window_seconds=call.query.window,
            bucket_seconds=bucket_seconds,
            due_backlog=(await s.housekeeping.due_backlog(now, domains=domains)).due,
            busy_workers=None if call.query.domain else busy_workers(call),
            workers=s.settings.workers,
            totals=totals(figures),
            by_handler=by_handler(figures),
            lag_p50_seconds=figures.lag.p50,
            lag_p99_seconds=figures.lag.p99,
            lag_measured=figures.lag.measured,
            buckets=buckets(figures, since, bucket_seconds),
            complete=figures.counted_since is None,
            counted_since=figures.counted_since,
            partial_reason=partial_reason(figures, since),
            open_dead_letters=attention.dead_letters_total,
            attention=attention_out(attention, now),
        )
    )


def partial_reason(figures: ExecutionStats, since: datetime) -> str | None:
    if figures.counted_since is None:
        return None
    left_out = (figures.counted_since - since).total_seconds()
    return (
        "the store stopped the read at its time limit: the window's oldest "
        f"{left_out:g} s (executions due before counted_since) are not counted"
    )


def busy_workers(call: Call[Q, B]) -> int | None:
    s = state(call)
    if s.dispatcher_health is None:
        return None  # `tickd api`: the workers are in another process
    if call.domains is not None:
        return None  # the workers are every domain's: not for a token limited to some
    value = s.metrics.registry.get_sample_value("tickd_busy_workers")
    return int(value or 0)


def totals(figures: ExecutionStats) -> dict[str, int]:
    counted: dict[str, int] = {}
    for (status, _), count in figures.counts.items():
        counted[status] = counted.get(status, 0) + count
    return counted


def by_handler(figures: ExecutionStats) -> dict[str, dict[str, int]]:
    counted: dict[str, dict[str, int]] = {}
    for (status, handler), count in figures.counts.items():
        counted.setdefault(handler, {})[status] = count
    return counted


def buckets(figures: ExecutionStats, since: datetime, bucket_seconds: int) -> list[Bucket]:
    return [
        bucket(since + timedelta(seconds=i * bucket_seconds), counts, lag)
        for i, (counts, lag) in enumerate(
            zip(figures.bucket_counts, figures.bucket_lags, strict=True)
        )
    ]


def bucket(start: datetime, counts: dict[str, int], lag: LagPercentiles) -> Bucket:
    return Bucket(start=start, counts=counts, lag_p50_seconds=lag.p50, lag_p99_seconds=lag.p99)


def attention_out(attention: Attention, now: datetime) -> AttentionOut:
    return AttentionOut(
        dead_letters=[trouble_out(t) for t in attention.dead_letters],
        dead_letters_total=attention.dead_letters_total,
        dead_letter_jobs=attention.dead_letter_jobs,
        failures=[trouble_out(t) for t in attention.failures],
        failure_jobs=attention.failure_jobs,
        failing=[failing_out(job) for job in attention.failing],
        failing_total=attention.failing_total,
        late=[late_out(job, now) for job in attention.late],
        late_total=attention.late_total,
    )


def trouble_out(trouble: JobTrouble) -> JobTroubleOut:
    return JobTroubleOut(
        job_id=trouble.job_id,
        job_name=trouble.job_name,
        handler=trouble.handler,
        count=trouble.count,
        newest_at=trouble.newest_at,
        errors=[
            RecentError(
                status=str(status),
                error=None if error is None else ErrorOut(type=error.type, message=error.message),
                scheduled_at=at,
            )
            for status, error, at in trouble.errors
        ],
    )


def failing_out(job: Job) -> FailingJobOut:
    last = job.last_execution
    return FailingJobOut(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        consecutive_failures=job.consecutive_failures,
        last_status=None if last is None else str(last.status),
        last_error=None if last is None else last.error,
        last_finished_at=None if last is None else last.finished_at,
    )


def late_out(job: Job, now: datetime) -> LateJobOut:
    assert job.next_run_at is not None  # a late job is due
    return LateJobOut(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        due_at=job.next_run_at,
        late_seconds=(now - job.next_run_at).total_seconds(),
    )


class SessionOut(BaseModel):
    actor: str = Field(description="The token's name; `anonymous` when the API has no tokens")
    scope: str = Field(description="read, write or admin: what the dashboard offers to do")
    domains: list[str] | None = Field(
        default=None,
        description="The only domains the token reaches, by name; null: every domain",
    )
    now: datetime = Field(description="The daemon's clock, which relative times are shown against")


async def session(call: Call[None, None]) -> Reply:
    domains = None if call.domains is None else sorted(call.domains)
    out = SessionOut(
        actor=call.actor, scope=call.scope, domains=domains, now=state(call).clock.now()
    )
    return Reply(out)


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
        "Executions of the last `window` seconds by status, handler and minute, fire lag "
        "percentiles, the due backlog and what needs attention by job (what the dashboard "
        "draws)",
        "read",
        StatsOut,
        query=StatsQuery,
        tag="operations",
    ),
]
