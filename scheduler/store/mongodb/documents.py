"""The job store's documents on MongoDB: how jobs, executions, history entries, run requests
and outbox events are written and read, and the collections' indexes."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC

from pymongo import (
    ASCENDING,
    DESCENDING,
    AsyncMongoClient,
    IndexModel,
    UpdateMany,
    UpdateOne,
)
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
    execution_from_doc,
    execution_to_doc,
    job_from_doc,
    job_to_doc,
    request_from_doc,
    request_to_doc,
)
from tickd.scheduler.events import event_time, execution_event
from tickd.scheduler.model import DeadLetter, Execution, Job, Status
from tickd.scheduler.partitions import job_partition
from tickd.scheduler.ports.backends import (
    DuplicateJobName,
    JobChange,
    OutboxEvent,
    RunRequest,
    StoreError,
)
from tickd.scheduler.store.kit.mongodb import (
    from_micros,
    with_exact_times,
    without_exact_times,
)

JOB_TIMES = (
    "next_run_at",
    "created_at",
    "updated_at",
    "lease.until",
    "last_execution.finished_at",
    "schedule.at",
)
EXECUTION_TIMES = ("scheduled_at", "started_at", "finished_at")
ADVANCE_TIMES = ("next_run_at", "last_execution.finished_at")

# Free to run: enabled and not leased (a lease, live or expired, is reaped before a rerun).
# `leased` mirrors `lease is not None` at the top level, where FerretDB 1.24 pushes its equality
# down to PostgreSQL (it cannot push `lease: None` down, nor any filter on `lease.*`); `lease`
# stays in the filter so that the lease itself decides (MongoDB serves it from jobs_due).
FREE: Doc = {"enabled": True, "leased": False, "lease": None}
# Holding a lease, live or expired: the few the reaper and the heartbeat look through.
LEASED: Doc = {"leased": True}
# A run request or shard entry not ended yet: `ended` is False until it ends (not None, which
# FerretDB would not push down).
NOT_ENDED: Doc = {"ended": False}
# The lease's token is the job's fence: a claim increments the fence and sets the lease in one
# statement, so the claim needs no read of the fence first. Leases written before that carry
# their token too, and it always equals the fence.
URGENCY = [("priority", ASCENDING), ("next_run_at_us", ASCENDING)]
OLDEST_DUE_FIRST = [("next_run_at_us", ASCENDING)]
NEWEST_FIRST = [("scheduled_at_us", DESCENDING), ("_id", DESCENDING)]
LEASE_EXPIRED = {"type": "LeaseExpired", "message": "the lease expired before the run ended"}

JOB_INDEXES = [
    IndexModel([("name", ASCENDING)], name="jobs_name", unique=True),
    # Equality on the free state, then the due query's sort order, then its range.
    IndexModel([("enabled", ASCENDING), ("lease", ASCENDING), *URGENCY], name="jobs_due"),
    IndexModel(
        [("enabled", ASCENDING), ("lease", ASCENDING), ("next_run_at_us", ASCENDING)],
        name="jobs_next",
    ),
    IndexModel([("lease.until_us", ASCENDING)], name="jobs_lease_expiry"),
    # Single-field, so that FerretDB's PostgreSQL gets a GIN twin (scripts/services.sh) for
    # the reaper's and the heartbeat's `leased: true`.
    IndexModel([("leased", ASCENDING)], name="jobs_leased"),
    # The store call that last claimed or released the job: a batch's outcome is read back by
    # this one value (an equality FerretDB pushes down), not by an `_id` $in it cannot.
    IndexModel([("batch", ASCENDING)], name="jobs_batch"),
    # The partition an instance reads (scheduler/partitions.py): single-field, so that FerretDB,
    # which reads one partition at a time by this equality, gets a GIN twin for it.
    IndexModel([("part", ASCENDING)], name="jobs_part"),
    # The critical and high jobs FerretDB reads across partitions, by this equality.
    IndexModel([("priority", ASCENDING)], name="jobs_priority"),
    # A due read of one domain, by this equality (FerretDB pushes it down): single-field, so
    # that FerretDB's PostgreSQL gets a GIN twin for it and finds that domain's jobs without
    # scanning every job. MongoDB's planner takes it or jobs_due, whichever serves faster.
    IndexModel([("domain", ASCENDING)], name="jobs_domain"),
]
CHANGE_INDEXES = [
    IndexModel(
        [("job_id", ASCENDING), ("at_us", DESCENDING), ("_id", DESCENDING)], name="changes_by_job"
    ),
    IndexModel([("at_us", ASCENDING)], name="changes_by_time"),
]
REQUEST_INDEXES = [
    IndexModel([("not_before_us", ASCENDING)], name="requests_due"),
    IndexModel([("job_id", ASCENDING), ("scheduled_at_us", ASCENDING)], name="requests_by_job"),
    IndexModel([("leased", ASCENDING)], name="requests_leased"),
]
CHANGE_TIMES = ("at",)
REQUEST_TIMES = (
    "scheduled_at", "not_before", "created_at", "advance_from", "lease.until", "ended.finished_at",
    "claimed_next_run_at",
)  # fmt: skip
# What ops may change of a job (replace_job); the lease, fence and run state are the engine's.
DEFINITION_FIELDS = (
    "name", "handler", "params", "schedule", "enabled", "next_run_at", "timeout_seconds",
    "max_retries", "priority", "misfire", "jitter_seconds", "consecutive_failures",
    "paused_reason", "system", "updated_at", "redrive", "shards", "managed_by", "domain",
    "concurrency_key", "concurrency_limit",
)  # fmt: skip
# Dead letters pruning keeps (DeadLetter.unhandled).
UNHANDLED = [str(state) for state in DeadLetter if state.unhandled]
# What pruning may delete: ended, and not a dead letter still to handle (a missing field too).
PRUNABLE: Doc = {"status": {"$ne": Status.RUNNING.value}, "dead_letter": {"$nin": UNHANDLED}}

EXECUTION_INDEXES = [
    IndexModel([("job_id", ASCENDING), *NEWEST_FIRST], name="executions_by_job"),
    IndexModel(NEWEST_FIRST, name="executions_by_time"),
    IndexModel(
        [("status", ASCENDING), ("scheduled_at_us", DESCENDING)], name="executions_by_status"
    ),
    IndexModel([("dead_letter", ASCENDING), *NEWEST_FIRST], name="executions_dead"),
    # The reaper's read-back of what it abandoned (pruning by age used it before the buckets
    # below). No TTL index: FerretDB 1.24 has none, and one could not spare unhandled dead
    # letters nor a job's newest execution anyway.
    IndexModel([("finished_at_us", ASCENDING)], name="executions_by_finish"),
    # The buckets retention reads (see FINISH_BUCKETS): single-field, so that FerretDB's
    # PostgreSQL gets a GIN twin (scripts/services.sh) for their equality.
    IndexModel([("finished_hour", ASCENDING)], name="executions_finished_hour"),
    IndexModel([("finished_minute", ASCENDING)], name="executions_finished_minute"),
]
# A finished execution's hour and minute (since the epoch) of finishing, None while it runs:
# retention reads executions by these equalities, which FerretDB 1.24 pushes down, where a range
# or a sort on `finished_at_us` made it decode every execution on each pass. By age it walks
# the hours, by count it reads the minutes since its last pass.
HOUR_US = 3_600_000_000
MINUTE_US = 60_000_000
FINISH_BUCKETS = ("finished_hour", "finished_minute")

# The outbox: unsent events oldest first; at one instant (a fake clock), an earlier occurrence's
# events first, and an execution's start before its end (`rank`).
OUTBOX_ORDER = [
    ("written_us", ASCENDING),
    ("scheduled_us", ASCENDING),
    ("rank", ASCENDING),
    ("_id", ASCENDING),
]
# Not sent yet. `sent` is what FerretDB pushes down (it cannot push `sent_at_us: None` down, and
# would decode every event ever written); events written before `sent` existed lack it, hence $ne.
UNSENT: Doc = {"sent": {"$ne": True}, "sent_at_us": None}
# Sent events are pruned by the minute they were sent in (`sent_minute`): an equality FerretDB
# pushes down (and its index's GIN twin serves), where a range on `sent_at_us` would decode every
# event the outbox still holds on each prune.
OUTBOX_INDEXES = [
    IndexModel([("sent_at_us", ASCENDING), *OUTBOX_ORDER], name="outbox_unsent"),
    IndexModel([("sent_minute", ASCENDING)], name="outbox_sent_minute"),
]


Client = AsyncMongoClient[Doc]
Collection = AsyncCollection[Doc]
Update = UpdateOne | UpdateMany


def duplicate_job_error(job: Job, exc: DuplicateKeyError) -> StoreError:
    """MongoDB names the index at fault; FerretDB does not, and then it is the name's."""
    key_pattern = (exc.details or {}).get("keyPattern") or {}
    if key_pattern and "name" not in key_pattern:
        error = StoreError(f"a job with id {job.id!r} exists already")
        error.transient = False
        return error
    return DuplicateJobName(job.name)


def job_document(job: Job, partitions: int) -> Doc:
    """`partitions`: the store's partition count; the job's partition is `part`."""
    doc = with_exact_times(job_to_doc(job), JOB_TIMES)
    doc["leased"] = job.lease is not None
    doc["part"] = job_partition(job, partitions)
    return doc


def job_from_document(doc: Doc) -> Job:
    lease = doc.get("lease")
    if lease is not None and "token" not in lease:
        lease["token"] = doc["fence"]
    return job_from_doc(without_exact_times(doc, JOB_TIMES))


def execution_document(execution: Execution) -> Doc:
    doc = with_exact_times(execution_to_doc(execution), EXECUTION_TIMES)
    return doc | finish_buckets(doc["finished_at_us"])


def finish_buckets(finished_at_us: int | None) -> Doc:
    """The FINISH_BUCKETS of an execution that finished then (None: still running)."""
    if finished_at_us is None:
        return dict.fromkeys(FINISH_BUCKETS)
    return {
        "finished_hour": finished_at_us // HOUR_US,
        "finished_minute": finished_at_us // MINUTE_US,
    }


def execution_from_document(doc: Doc) -> Execution:
    return execution_from_doc(without_exact_times(doc, EXECUTION_TIMES))


def event_document(execution: Execution, source: str) -> Doc:
    """An execution's event as the outbox holds it: the CloudEvent as JSON text (kept exactly
    as built), keyed by its stable id; `sent_at_us` is set once it is delivered."""
    event = execution_event(execution, source=source)
    return {
        "_id": event["id"],
        "job_id": execution.job_id,
        "event": json.dumps(event, separators=(",", ":")),
        "written_us": exact_micros(event_time(execution)),
        "scheduled_us": exact_micros(execution.scheduled_at),
        "rank": 0 if execution.status is Status.RUNNING else 1,
        "sent": False,
        "sent_at_us": None,
    }


def outbox_event_from_document(doc: Doc) -> OutboxEvent:
    return OutboxEvent(
        id=doc["_id"],
        job_id=doc["job_id"],
        event=json.loads(doc["event"]),
        written_at=from_micros(doc["written_us"]),
    )


def change_document(change: JobChange) -> Doc:
    doc = dataclasses.asdict(change)
    doc["_id"] = doc.pop("id")
    return with_exact_times(doc, CHANGE_TIMES)


def change_from_document(doc: Doc) -> JobChange:
    doc = without_exact_times(doc, CHANGE_TIMES)
    doc["id"] = doc.pop("_id")
    doc["at"] = doc["at"].astimezone(UTC)
    return JobChange(**doc)


def request_document(request: RunRequest) -> Doc:
    doc = with_exact_times(request_to_doc(request), REQUEST_TIMES)
    doc["leased"] = request.lease is not None
    if doc["ended"] is None:
        doc["ended"] = False  # NOT_ENDED; the codec reads False as not ended
    return doc


def request_from_document(doc: Doc) -> RunRequest:
    return request_from_doc(without_exact_times(doc, REQUEST_TIMES))
