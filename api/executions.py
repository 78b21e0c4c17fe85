"""Executions: a job's, across jobs (status=failed: the dead letters), one by id (with its
attempts and its error's traceback, as its run page shows it)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from pydantic import BaseModel, Field, field_validator

from tickd.api.models import (
    ErrorOut,
    ExecutionListQuery,
    ExecutionOut,
    ExecutionPage,
    JobExecutionQuery,
)
from tickd.api.problems import field_error
from tickd.api.routing import B, Call, Q, Reply, Route, Routes
from tickd.api.scoping import execution_not_found, executions_seen, within
from tickd.api.v1 import JOB, encode_cursor, execution_out, load_job, state, time_cursor
from tickd.scheduler.codec import execution_to_doc, to_json_ready
from tickd.scheduler.model import Execution
from tickd.scheduler.plugin.outcomes import without_install_paths
from tickd.scheduler.ports.backends import ExecutionQuery


class RunErrorOut(ErrorOut):
    traceback: str | None = Field(
        default=None, description="Where the handler raised, secrets masked; null if it did not"
    )

    @field_validator("traceback")
    @classmethod
    def _without_install_paths(cls, text: str | None) -> str | None:
        # Records kept from before frames were stored so are shown without the server's paths too.
        return None if text is None else without_install_paths(text)


class AttemptOut(BaseModel):
    number: int = Field(description="1 for the first")
    started_at: datetime
    finished_at: datetime
    error: RunErrorOut | None = None
    backoff_seconds: float | None = Field(
        default=None, description="The wait before the next attempt; null after the last"
    )


class LogLineOut(BaseModel):
    at: datetime
    level: str = Field(description="INFO, WARNING, ERROR...")
    message: str = Field(
        description="As the handler logged it, secrets masked, cut to 1,000 characters"
    )


class RunOut(ExecutionOut):
    """One execution in full: its attempts, and its error's traceback."""

    error: RunErrorOut | None
    attempt_log: list[AttemptOut] | None = Field(
        default=None,
        description="Every attempt, when the run took more than one; null when the record "
        "keeps none (one attempt: the run's own start, end and error tell it)",
    )
    log: list[LogLineOut] | None = Field(
        default=None,
        description="What the handler logged through ctx.logger at INFO and above: the first "
        "50 lines, and a last one saying how many more there were; null when it logged none",
    )


async def list_executions(call: Call[ExecutionListQuery, None]) -> Reply:
    q = call.query
    refuse_empty_range(q)
    return await execution_page(
        call, q, job_id=q.job_id, handler=q.handler, domains=within(call, q.domain)
    )


async def list_job_executions(call: Call[JobExecutionQuery, None]) -> Reply:
    q = call.query
    refuse_empty_range(q)
    await load_job(call)
    return await execution_page(
        call, q, job_id=call.path("job_id"), handler=None, domains=call.domains
    )


def refuse_empty_range(q: JobExecutionQuery | ExecutionListQuery) -> None:
    """`since` and `until` bound the scheduled times, until excluded: a range that ends where
    or before it starts is a mistake in the query, not a question whose answer is no runs."""
    if q.since is not None and q.until is not None and q.until <= q.since:
        reason = "must be after since (the range of scheduled times is [since, until))"
        raise field_error("query.until", reason, 400)


async def execution_page(
    call: Call[Q, B],
    q: JobExecutionQuery | ExecutionListQuery,
    *,
    job_id: str | None,
    handler: str | None,
    domains: frozenset[str] | None,
) -> Reply:
    query = ExecutionQuery(
        job_id=job_id,
        status=q.status,
        handler=handler,
        since=q.since,
        until=q.until,
        before=time_cursor(q.cursor),
        limit=q.limit,
        domains=domains,
    )
    return await page_of(call, query)


async def page_of(call: Call[Q, B], query: ExecutionQuery) -> Reply:
    """One page of executions, newest first, with the cursor of the next page if there is one
    (one more row is read to know)."""
    runs = await state(call).executions.list_executions(replace(query, limit=query.limit + 1))
    page, more = runs[: query.limit], len(runs) > query.limit
    last = page[-1] if more else None
    cursor = encode_cursor(at=last.scheduled_at.isoformat(), id=last.id) if last else None
    items = [execution_out(e) for e in occurrences_together(page)]
    return Reply(ExecutionPage(items=items, next_cursor=cursor))


def occurrences_together(page: list[Execution]) -> list[Execution]:
    """The page's executions of one occurrence (its shards, and their re-runs) side by side,
    where the first of them was, shard by shard, the newest run of a shard first. Another job's
    run of the same instant, or a later re-run, would otherwise come between them. The page
    holds the same rows, so its cursor (the last row as stored) stands."""
    by_occurrence: dict[str, list[Execution]] = {}
    for execution in page:
        by_occurrence.setdefault(execution.occurrence, []).append(execution)
    return [
        execution
        for runs in by_occurrence.values()
        for execution in sorted(runs, key=lambda e: e.shard)
    ]


async def load_execution(call: Call[Q, B]) -> Execution:
    """The execution of the path; 404 when there is none or its job is not one the token sees
    (for a limited token, one read of its job)."""
    s = state(call)
    execution = await s.executions.get_execution(call.path("execution_id"))
    if execution is None or not await executions_seen(call, s.jobs, [execution]):
        raise execution_not_found(call.path("execution_id"))
    return execution


async def get_execution(call: Call[None, None]) -> Reply:
    return Reply(run_out(await load_execution(call)))


def run_out(execution: Execution) -> RunOut:
    """The execution as stored, the fields of a listing and those only one run shows."""
    doc = to_json_ready(execution_to_doc(execution))
    listed = execution_out(execution).model_dump(mode="json")
    return RunOut.model_validate(
        {
            **listed,
            "error": doc.get("error"),
            "attempt_log": doc.get("attempt_log"),
            "log": doc.get("log"),
        }
    )


EXECUTION_ROUTES: Routes = [
    Route(
        "GET",
        JOB + "/executions",
        list_job_executions,
        "A job's executions, newest first",
        "read",
        ExecutionPage,
        query=JobExecutionQuery,
        tag="executions",
    ),
    Route(
        "GET",
        "/v1/executions",
        list_executions,
        "Executions across jobs, newest first (status=failed: the dead letters)",
        "read",
        ExecutionPage,
        query=ExecutionListQuery,
        tag="executions",
    ),
    Route(
        "GET",
        "/v1/executions/{execution_id}",
        get_execution,
        "Read an execution, with its attempts and its error's traceback",
        "read",
        RunOut,
        tag="executions",
    ),
]
