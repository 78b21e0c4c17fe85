"""How jobs, executions, history entries and run requests become rows on SQLite and back. Times
are integer microseconds since the epoch.

The PostgreSQL store keeps the same columns in the same shapes (BIGINT microseconds, JSON as
text, integer booleans), so it reads its rows with these same functions: each takes a `Row`,
which sqlite3.Row and asyncpg.Record both are."""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from tickd.scheduler.codec import (
    EPOCH,
    Doc,
    attempt_to_doc,
    error_to_doc,
    execution_from_doc,
    job_to_doc,
    log_line_to_doc,
    micros,
    misfire_from_doc,
    redrive_from_doc,
    request_from_doc,
    request_to_doc,
    schedule_from_doc,
    status_from_json,
    summary_from_doc,
    to_json_ready,
)
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.model import (
    Execution,
    ExecutionSummary,
    Job,
    Lease,
    Misfire,
    Priority,
    RedrivePolicy,
    Schedule,
)
from tickd.scheduler.ports.backends import (
    InstanceView,
    OutboxEvent,
    RunRequest,
)
from tickd.scheduler.store.sqlite.schema import (
    JOB_COLUMNS,
    JSON_COLUMNS,
    REQUEST_COLUMNS,
    TIME_COLUMNS,
)


class Row(Protocol):
    """A row as a driver returns it: its values by column name or position, its column names
    in order, and its values in that order when iterated."""

    def keys(self) -> Iterable[str]: ...

    def __getitem__(self, key: int | str, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...


def from_micros(value: int | None) -> datetime | None:
    return None if value is None else EPOCH + timedelta(microseconds=value)


def to_row(doc: Doc, columns: Sequence[str]) -> tuple[Any, ...]:
    values = []
    for column in columns:
        value = doc[column]
        if column in JSON_COLUMNS:
            value = None if value is None else json.dumps(to_json_ready(value))
        elif column in TIME_COLUMNS:
            value = micros(value)
        elif isinstance(value, bool):
            value = int(value)
        values.append(value)
    return tuple(values)


def from_row(row: Row, key: str = "_id") -> Doc:
    doc: Doc = {}
    for column in row.keys():  # noqa: SIM118 - a Row is not a mapping
        value = row[column]
        if column in JSON_COLUMNS and value is not None:
            value = json.loads(value)
        elif column in TIME_COLUMNS:
            value = from_micros(value)
        doc[column] = value
    doc[key] = doc.pop("id")
    return doc


def job_doc(job: Job) -> Doc:
    doc = job_to_doc(job)
    doc["id"] = doc.pop("_id")
    return doc


def job_row(job: Job) -> tuple[Any, ...]:
    doc = job_doc(job)
    lease = doc.pop("lease") or {}
    doc.update(
        lease_owner=lease.get("owner"),
        lease_token=lease.get("token"),
        lease_until=lease.get("until"),
    )
    return to_row(doc, JOB_COLUMNS)


# The columns a job is decoded from, in the order job_from_row unpacks them.
JOB_DECODED = (
    "id", "name", "handler", "params", "schedule", "enabled", "next_run_at", "timeout_seconds",
    "max_retries", "priority", "misfire", "jitter_seconds", "lease_owner", "lease_token",
    "lease_until", "fence", "revision", "consecutive_failures", "paused_reason",
    "last_execution", "system", "redrive", "shards", "managed_by", "domain", "concurrency_key",
    "concurrency_limit", "created_at", "updated_at",
)  # fmt: skip
PRIORITY_OF = {int(priority): priority for priority in Priority}


@functools.lru_cache(maxsize=16)
def _job_columns(columns: tuple[str, ...]) -> operator.itemgetter[tuple[Any, ...]]:
    """JOB_DECODED out of a row with these columns: a database made by an older tickd has the
    columns added since (ADDED_COLUMNS) last, so the positions are looked up, once a shape."""
    return operator.itemgetter(*(columns.index(name) for name in JOB_DECODED))


def job_from_row(row: Row) -> Job:
    """The dispatcher decodes every job it fetches and claims: read by position, with the few
    distinct schedules, misfire policies and re-drive policies decoded once each."""
    (
        id_, name, handler, params, schedule, enabled, next_run_at, timeout_seconds,
        max_retries, priority, misfire, jitter_seconds, lease_owner, lease_token, lease_until,
        fence, revision, consecutive_failures, paused_reason, last_execution, system, redrive,
        shards, managed_by, domain, concurrency_key, concurrency_limit, created_at, updated_at,
    ) = _job_columns(tuple(row.keys()))(tuple(row))  # fmt: skip
    return Job(
        id=id_,
        name=name,
        handler=handler,
        schedule=_schedule(schedule),
        params={} if params == "{}" else dict(json.loads(params) or {}),
        enabled=bool(enabled),
        next_run_at=None if next_run_at is None else _time(next_run_at),
        timeout_seconds=float(timeout_seconds),
        max_retries=int(max_retries),
        priority=PRIORITY_OF[priority] if priority in PRIORITY_OF else Priority(priority),
        misfire=_misfire(misfire),
        jitter_seconds=float(jitter_seconds),
        lease=None
        if lease_token is None
        else Lease(owner=lease_owner, token=int(lease_token), until=_time(lease_until)),
        fence=int(fence),
        revision=int(revision),
        consecutive_failures=int(consecutive_failures),
        paused_reason=paused_reason,
        last_execution=_summary(last_execution),
        system=bool(system),
        redrive=_redrive(redrive),
        shards=int(shards),
        managed_by=managed_by,
        domain=domain,
        concurrency_key=concurrency_key,
        concurrency_limit=concurrency_limit,
        created_at=_time(created_at),
        updated_at=_time(updated_at),
    )


# What a claim writes: a claimed job's row differs from the one the due query read only here.
CLAIM_COLUMNS = frozenset({"lease_owner", "lease_token", "lease_until", "fence"})


def unclaimed_part(columns: Sequence[str]) -> operator.itemgetter[tuple[Any, ...]]:
    """What of a job's row (as a tuple, of these columns) a claim leaves as it was."""
    return operator.itemgetter(*(i for i, name in enumerate(columns) if name not in CLAIM_COLUMNS))


# The id and the claim's columns of a claimed row, by position (see claim_part).
CLAIM_PART = ("id", "lease_owner", "lease_token", "lease_until", "fence")


def claim_part(columns: Sequence[str]) -> operator.itemgetter[tuple[Any, ...]]:
    """CLAIM_PART out of a row (as a tuple) of these columns."""
    return operator.itemgetter(*(list(columns).index(name) for name in CLAIM_PART))


def with_claim(job: Job, claim: tuple[Any, ...]) -> Job:
    """`job` with the lease and fence of its claimed row (`claim`, its CLAIM_PART); the rest
    is unchanged (unclaimed_part), so it is copied, not read again."""
    _, owner, token, until, fence = claim
    lease = None if token is None else Lease(owner=owner, token=int(token), until=_time(until))
    return dataclasses.replace(job, lease=lease, fence=int(fence))


# Distinct values are few (the same schedule text for every job of a kind), the objects frozen.
DECODED_VALUES_KEPT = 4096


@functools.lru_cache(maxsize=DECODED_VALUES_KEPT)
def _schedule(text: str) -> Schedule:
    return schedule_from_doc(json.loads(text))


@functools.lru_cache(maxsize=DECODED_VALUES_KEPT)
def _misfire(text: str | None) -> Misfire:
    return misfire_from_doc(json.loads(text) if text else None)


@functools.lru_cache(maxsize=DECODED_VALUES_KEPT)
def _redrive(text: str | None) -> RedrivePolicy | None:
    return None if text is None else redrive_from_doc(json.loads(text))


def _summary(text: str | None) -> ExecutionSummary | None:
    return None if text is None else summary_from_doc(json.loads(text))


def _time(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def execution_row(execution: Execution) -> tuple[Any, ...]:
    """The executions' columns, in EXECUTION_COLUMNS' order (two writes per run)."""
    e, error, result = execution, execution.error, execution.result
    return (
        e.id,
        e.job_id,
        e.job_name,
        e.handler,
        micros(e.scheduled_at),
        micros(e.started_at),
        micros(e.finished_at),
        e.duration_ms,
        str(e.status),
        e.attempts,
        None if error is None else json.dumps(error_to_doc(error)),
        None if result is None else json.dumps(to_json_ready(result)),
        e.owner,
        e.token,
        None if e.dead_letter is None else str(e.dead_letter),
        e.shard,
        e.shards,
        e.requested,
        json.dumps([attempt_to_doc(attempt) for attempt in e.attempt_log])
        if e.attempt_log
        else None,
        json.dumps([log_line_to_doc(line) for line in e.log]) if e.log else None,
    )


def outbox_event_from_row(row: Row) -> OutboxEvent:
    written_at = from_micros(row["written_at"])
    assert written_at is not None
    return OutboxEvent(
        id=row["id"], job_id=row["job_id"], event=json.loads(row["event"]), written_at=written_at
    )


def request_row(request: RunRequest) -> tuple[Any, ...]:
    doc = request_to_doc(request)
    doc["id"] = doc.pop("_id")
    lease = doc.pop("lease") or {}
    doc.update(
        lease_owner=lease.get("owner"),
        lease_token=lease.get("token"),
        lease_until=lease.get("until"),
    )
    return to_row(doc, REQUEST_COLUMNS)


def request_from_row(row: Row) -> RunRequest:
    doc = from_row(row)
    owner, token, until = doc.pop("lease_owner"), doc.pop("lease_token"), doc.pop("lease_until")
    doc["lease"] = None if token is None else {"owner": owner, "token": token, "until": until}
    return request_from_doc(doc)


def execution_from_row(row: Row) -> Execution:
    return execution_from_doc(from_row(row))


def instance_view(row: Row) -> InstanceView:
    """A row of INSTANCE_VIEWS (statements.py)."""
    beat_at = from_micros(row[1])
    assert beat_at is not None
    return InstanceView(str(row[0]), beat_at, status_from_json(row[2]), int(row[3]))


def domain_row(settings: DomainSettings) -> tuple[Any, ...]:
    """A domain's settings, in DOMAIN_COLUMNS' order."""
    objective = settings.lag_objective_seconds
    return (
        settings.name,
        settings.weight,
        settings.max_running,
        settings.max_jobs,
        None if objective is None else float(objective),  # a float column on PostgreSQL
        micros(settings.updated_at),
    )


def domain_from_row(row: Row) -> DomainSettings:
    """A row of DOMAIN_COLUMNS, by name."""
    objective = row["lag_objective_seconds"]
    return DomainSettings(
        name=row["name"],
        weight=int(row["weight"]),
        max_running=row["max_running"],
        max_jobs=row["max_jobs"],
        lag_objective_seconds=None if objective is None else float(objective),
        updated_at=from_micros(row["updated_at"]),
    )
