"""Model objects to and from plain documents: the shape every store keeps and every event carries.

Documents hold str, int, float, bool, None, lists, dicts and timezone-aware datetimes; a JSON
encoder or a BSON one takes it from there.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from tickd.scheduler.domains import DEFAULT_DOMAIN
from tickd.scheduler.model import (
    Attempt,
    CronSchedule,
    DeadLetter,
    Execution,
    ExecutionError,
    ExecutionSummary,
    IntervalSchedule,
    Job,
    Lease,
    LogLine,
    Misfire,
    MisfirePolicy,
    OnceSchedule,
    Priority,
    RedrivePolicy,
    Schedule,
    Status,
    ValidationError,
)
from tickd.scheduler.ports.backends import InstanceStatus, RunRequest

Doc = dict[str, Any]

# Stores keep times as integer microseconds since this, so that a compare-and-set compares
# exactly what it read (BSON and SQLite both lose or reorder finer or zoned times).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Made once: building it took half of exact_micros' time, called about ten times a run.
ONE_MICROSECOND = timedelta(microseconds=1)


def exact_micros(when: datetime) -> int:
    return (when - EPOCH) // ONE_MICROSECOND


def micros(when: datetime | None) -> int | None:
    return None if when is None else exact_micros(when)


def schedule_to_doc(schedule: Schedule) -> Doc:
    if isinstance(schedule, CronSchedule):
        return {"kind": "cron", "expr": schedule.expr, "timezone": schedule.timezone}
    if isinstance(schedule, IntervalSchedule):
        return {"kind": "interval", "every_seconds": schedule.every_seconds}
    return {"kind": "once", "at": schedule.at}


def schedule_from_doc(doc: Doc) -> Schedule:
    kind = doc.get("kind")
    try:
        if kind == "cron":
            return CronSchedule(expr=str(doc["expr"]), timezone=str(doc.get("timezone", "UTC")))
        if kind == "interval":
            return IntervalSchedule(every_seconds=float(doc["every_seconds"]))
        if kind == "once":
            return OnceSchedule(at=as_datetime(doc["at"], "schedule.at"))
    except KeyError as exc:
        raise ValidationError(f"schedule.{exc.args[0]}", "is required") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError("schedule", str(exc)) from None
    raise ValidationError("schedule.kind", f"must be cron, interval or once, not {kind!r}")


def as_datetime(value: Any, field: str) -> datetime:
    """A datetime from a document or a config file; naive ones are taken as UTC (BSON's way)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(field, f"not an ISO 8601 time: {value!r}") from None
    if not isinstance(value, datetime):
        raise ValidationError(field, f"expected a time, got {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _maybe_datetime(value: Any, field: str) -> datetime | None:
    return None if value is None else as_datetime(value, field)


def job_to_doc(job: Job) -> Doc:
    return {
        "_id": job.id,
        "name": job.name,
        "handler": job.handler,
        "params": job.params,
        "schedule": schedule_to_doc(job.schedule),
        "enabled": job.enabled,
        "next_run_at": job.next_run_at,
        "timeout_seconds": job.timeout_seconds,
        "max_retries": job.max_retries,
        "priority": int(job.priority),
        "misfire": {"policy": str(job.misfire.policy), "grace_seconds": job.misfire.grace_seconds},
        "jitter_seconds": job.jitter_seconds,
        "lease": _lease_to_doc(job.lease),
        "fence": job.fence,
        "revision": job.revision,
        "consecutive_failures": job.consecutive_failures,
        "paused_reason": job.paused_reason,
        "last_execution": summary_to_doc(job.last_execution),
        "system": job.system,
        "redrive": redrive_to_doc(job.redrive),
        "shards": job.shards,
        "managed_by": job.managed_by,
        "domain": job.domain,
        "concurrency_key": job.concurrency_key,
        "concurrency_limit": job.concurrency_limit,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


def job_from_doc(doc: Doc) -> Job:
    return Job(
        id=str(doc["_id"]),
        name=doc["name"],
        handler=doc["handler"],
        params=dict(doc.get("params") or {}),
        schedule=schedule_from_doc(doc["schedule"]),
        enabled=bool(doc.get("enabled", True)),
        next_run_at=_maybe_datetime(doc.get("next_run_at"), "next_run_at"),
        timeout_seconds=float(doc.get("timeout_seconds", 60.0)),
        max_retries=int(doc.get("max_retries", 0)),
        priority=Priority.parse(doc.get("priority", Priority.NORMAL)),
        misfire=misfire_from_doc(doc.get("misfire")),
        jitter_seconds=float(doc.get("jitter_seconds", 0.0)),
        lease=_lease_from_doc(doc.get("lease")),
        fence=int(doc.get("fence", 0)),
        revision=int(doc.get("revision", 1)),
        consecutive_failures=int(doc.get("consecutive_failures", 0)),
        paused_reason=doc.get("paused_reason"),
        last_execution=summary_from_doc(doc.get("last_execution")),
        system=bool(doc.get("system", False)),
        redrive=redrive_from_doc(doc.get("redrive")),
        shards=int(doc.get("shards") or 1),
        managed_by=doc.get("managed_by"),
        # A job stored before domains existed has none: it is in the default one.
        domain=doc.get("domain") or DEFAULT_DOMAIN,
        # A job stored before keys existed names none.
        concurrency_key=doc.get("concurrency_key"),
        concurrency_limit=doc.get("concurrency_limit"),
        created_at=as_datetime(doc["created_at"], "created_at"),
        updated_at=as_datetime(doc["updated_at"], "updated_at"),
    )


def misfire_from_doc(doc: Doc | None) -> Misfire:
    misfire = doc or {}
    return Misfire(
        policy=MisfirePolicy(misfire.get("policy", MisfirePolicy.COALESCE)),
        grace_seconds=float(misfire.get("grace_seconds", 60.0)),
    )


def redrive_to_doc(policy: RedrivePolicy | None) -> Doc | None:
    if policy is None:
        return None
    return {"max_attempts": policy.max_attempts, "backoff_seconds": policy.backoff_seconds}


def redrive_from_doc(doc: Doc | None) -> RedrivePolicy | None:
    if not doc:
        return None
    return RedrivePolicy(
        max_attempts=int(doc["max_attempts"]), backoff_seconds=float(doc["backoff_seconds"])
    )


def _lease_to_doc(lease: Lease | None) -> Doc | None:
    if lease is None:
        return None
    return {"owner": lease.owner, "token": lease.token, "until": lease.until}


def _lease_from_doc(doc: Doc | None) -> Lease | None:
    if not doc:
        return None
    return Lease(
        owner=doc["owner"], token=int(doc["token"]), until=as_datetime(doc["until"], "lease.until")
    )


def summary_to_doc(summary: ExecutionSummary | None) -> Doc | None:
    if summary is None:
        return None
    return {
        "execution_id": summary.execution_id,
        "status": str(summary.status),
        "finished_at": summary.finished_at,
        "error": summary.error,
    }


def summary_from_doc(doc: Doc | None) -> ExecutionSummary | None:
    if not doc:
        return None
    return ExecutionSummary(
        execution_id=doc["execution_id"],
        status=Status(doc["status"]),
        finished_at=as_datetime(doc["finished_at"], "last_execution.finished_at"),
        error=doc.get("error"),
    )


def error_to_doc(error: ExecutionError | None) -> Doc | None:
    if error is None:
        return None
    doc: Doc = {"type": error.type, "message": error.message}
    if error.traceback is not None:
        doc["traceback"] = error.traceback
    return doc


def error_from_doc(doc: Doc | None) -> ExecutionError | None:
    if not doc:
        return None
    return ExecutionError(type=doc["type"], message=doc["message"], traceback=doc.get("traceback"))


def attempt_to_doc(attempt: Attempt) -> Doc:
    """Times as ISO text: kept to the microsecond by every store, inside a list as at the top."""
    return {
        "number": attempt.number,
        "started_at": attempt.started_at.isoformat(),
        "finished_at": attempt.finished_at.isoformat(),
        "error": error_to_doc(attempt.error),
        "backoff_seconds": attempt.backoff_seconds,
    }


def attempt_from_doc(doc: Doc) -> Attempt:
    return Attempt(
        number=int(doc["number"]),
        started_at=as_datetime(doc["started_at"], "attempt_log.started_at"),
        finished_at=as_datetime(doc["finished_at"], "attempt_log.finished_at"),
        error=error_from_doc(doc.get("error")),
        backoff_seconds=doc.get("backoff_seconds"),
    )


def log_line_to_doc(line: LogLine) -> Doc:
    return {"at": line.at.isoformat(), "level": line.level, "message": line.message}


def log_line_from_doc(doc: Doc) -> LogLine:
    return LogLine(
        at=as_datetime(doc["at"], "log.at"), level=str(doc["level"]), message=str(doc["message"])
    )


def execution_to_doc(execution: Execution) -> Doc:
    return {
        "_id": execution.id,
        "job_id": execution.job_id,
        "job_name": execution.job_name,
        "handler": execution.handler,
        "scheduled_at": execution.scheduled_at,
        "started_at": execution.started_at,
        "finished_at": execution.finished_at,
        "duration_ms": execution.duration_ms,
        "status": str(execution.status),
        "attempts": execution.attempts,
        "error": error_to_doc(execution.error),
        "result": execution.result,
        "owner": execution.owner,
        "token": execution.token,
        "dead_letter": None if execution.dead_letter is None else str(execution.dead_letter),
        "shard": execution.shard,
        "shards": execution.shards,
        "requested": execution.requested,
        "attempt_log": [attempt_to_doc(attempt) for attempt in execution.attempt_log] or None,
        "log": [log_line_to_doc(line) for line in execution.log] or None,
    }


def execution_from_doc(doc: Doc) -> Execution:
    return Execution(
        id=str(doc["_id"]),
        job_id=doc["job_id"],
        job_name=doc["job_name"],
        handler=doc["handler"],
        scheduled_at=as_datetime(doc["scheduled_at"], "scheduled_at"),
        started_at=_maybe_datetime(doc.get("started_at"), "started_at"),
        finished_at=_maybe_datetime(doc.get("finished_at"), "finished_at"),
        duration_ms=doc.get("duration_ms"),
        status=Status(doc["status"]),
        attempts=int(doc.get("attempts", 0)),
        error=error_from_doc(doc.get("error")),
        result=doc.get("result"),
        owner=doc.get("owner"),
        token=doc.get("token"),
        dead_letter=DeadLetter(doc["dead_letter"]) if doc.get("dead_letter") else None,
        shard=int(doc.get("shard") or 0),
        shards=int(doc.get("shards") or 1),
        requested=doc.get("requested"),
        attempt_log=tuple(attempt_from_doc(each) for each in doc.get("attempt_log") or ()),
        log=tuple(log_line_from_doc(each) for each in doc.get("log") or ()),
    )


def request_to_doc(request: RunRequest) -> Doc:
    """A run request, or a shard entry with its lease and how it ended (ports.RunRequest)."""
    return {
        "_id": request.id,
        "job_id": request.job_id,
        "scheduled_at": request.scheduled_at,
        "reason": request.reason,
        "not_before": request.not_before,
        "created_at": request.created_at,
        "redrives": request.redrives,
        "shard": request.shard,
        "shards": request.shards,
        "occurrence": request.occurrence,
        "revision": request.revision,
        "advance_from": request.advance_from,
        "lease": _lease_to_doc(request.lease),
        "fence": request.fence,
        "ended": summary_to_doc(request.ended),
        "claimed_next_run_at": request.claimed_next_run_at,
    }


def request_from_doc(doc: Doc) -> RunRequest:
    return RunRequest(
        id=str(doc["_id"]),
        job_id=doc["job_id"],
        scheduled_at=as_datetime(doc["scheduled_at"], "scheduled_at"),
        reason=doc["reason"],
        not_before=as_datetime(doc["not_before"], "not_before"),
        created_at=as_datetime(doc["created_at"], "created_at"),
        redrives=int(doc.get("redrives") or 0),
        shard=doc.get("shard"),
        shards=doc.get("shards"),
        occurrence=doc.get("occurrence"),
        revision=int(doc.get("revision") or 0),
        advance_from=_maybe_datetime(doc.get("advance_from"), "advance_from"),
        lease=_lease_from_doc(doc.get("lease")),
        fence=int(doc.get("fence") or 0),
        ended=summary_from_doc(doc.get("ended")),
        claimed_next_run_at=_maybe_datetime(doc.get("claimed_next_run_at"), "claimed_next_run_at"),
    )


def to_json_ready(value: Any) -> Any:
    """Datetimes as ISO 8601 strings, recursively: for JSON columns, events and API bodies."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, dict):
        return {k: to_json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_ready(v) for v in value]
    return value


def status_json(status: InstanceStatus) -> str:
    """An instance's status as a heartbeat record holds it (JSON text)."""
    return json.dumps(
        {
            "version": status.version,
            "started_at": micros(status.started_at),
            "runs_in_flight": status.runs_in_flight,
        }
    )


def status_from_json(text: str | None) -> InstanceStatus | None:
    if text is None:
        return None
    doc = json.loads(text)
    return InstanceStatus(
        version=str(doc["version"]),
        started_at=EPOCH + timedelta(microseconds=int(doc["started_at"])),
        runs_in_flight=int(doc["runs_in_flight"]),
    )
