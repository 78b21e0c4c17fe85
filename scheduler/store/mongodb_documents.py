"""The job store's documents on MongoDB: how jobs, executions, history entries and run requests
are written and read, their indexes, and the filters and updates of the engine's queries."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import ParamSpec, TypeVar

from pymongo import (
    ASCENDING,
    DESCENDING,
    AsyncMongoClient,
    IndexModel,
    ReplaceOne,
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
    micros,
    request_from_doc,
    request_to_doc,
    summary_to_doc,
)
from tickd.scheduler.events import event_time, execution_event
from tickd.scheduler.model import DeadLetter, Execution, Job, Status
from tickd.scheduler.ports import (
    Advance,
    Claim,
    DuplicateJobName,
    ExecutionQuery,
    Finish,
    JobChange,
    JobQuery,
    OutboxEvent,
    Retention,
    RunRequest,
    StoreError,
)
from tickd.scheduler.store_kit.mongodb import (
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
    "paused_reason", "system", "updated_at", "redrive", "shards", "managed_by",
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

P = ParamSpec("P")
T = TypeVar("T")
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


# -- documents ----------------------------------------------------------------------------------


def job_document(job: Job) -> Doc:
    doc = with_exact_times(job_to_doc(job), JOB_TIMES)
    doc["leased"] = job.lease is not None
    return doc


def job_from_document(doc: Doc) -> Job:
    lease = doc.get("lease")
    if lease is not None and "token" not in lease:
        lease["token"] = doc["fence"]
    return job_from_doc(without_exact_times(doc, JOB_TIMES))


def held_by(job_id: str, token: int) -> Doc:
    """The job while the lease of `token` holds it (the fence moves only with a new claim)."""
    return {"_id": job_id, "fence": token, "lease": {"$ne": None}}


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


def due_filter(now: datetime, exclude_handlers: Sequence[str] = ()) -> Doc:
    due: Doc = {**FREE, "next_run_at_us": {"$lte": exact_micros(now)}}
    if exclude_handlers:
        due["handler"] = {"$nin": list(exclude_handlers)}
    return due


def take_lease(claim: Claim, batch: str) -> Doc:
    """The claim's update: the next fence is the lease's token; `batch` names the claim call."""
    lease = {"owner": claim.owner, "until": claim.until}
    taken = {"lease": with_exact_times(lease, ["until"]), "leased": True, "batch": batch}
    return {"$inc": {"fence": 1}, "$set": taken}


def claim_update(claim: Claim, batch: str) -> UpdateOne:
    """Lease the job only if it is still as the due query read it."""
    return UpdateOne(
        {
            "_id": claim.job_id,
            "revision": claim.revision,
            "next_run_at_us": micros(claim.next_run_at),
            **FREE,
        },
        take_lease(claim, batch),
    )


def release_update(advance: Advance | None, *, schedule: bool = True) -> Doc:
    """Clear the lease; with an advance, record the run and (unless `schedule` is False: the
    job changed during the run) move the job on to its next run."""
    changes: Doc = {"lease": None, "leased": False}
    if advance is not None:
        state: Doc = {
            "consecutive_failures": advance.consecutive_failures,
            "last_execution": summary_to_doc(advance.last_execution),
        }
        if schedule:
            state |= {
                "next_run_at": advance.next_run_at,
                "enabled": advance.enabled,
                "paused_reason": advance.paused_reason,
            }
        changes |= with_exact_times(state, ADVANCE_TIMES)
    return {"$set": changes}


def finished_document(finish: Finish) -> ReplaceOne[Doc]:
    """A run's execution as final, whether or not it was recorded as running before; with the
    job update its end makes (`release`), when that update is fenced by the job's lease."""
    execution = finish.execution
    doc = execution_document(execution)
    if finish.advance is not None and finish.shard is None and execution.token is not None:
        doc["release"] = {
            "revision": finish.advance.revision,
            "unchanged": schedule_unchanged(finish.advance),
            "set": release_update(finish.advance)["$set"],
            "request_id": finish.request_id,
        }
    return ReplaceOne({"_id": execution.id}, doc, upsert=True)


# What of a run's job update moves the schedule: left out when ops changed the job meanwhile.
SCHEDULE_FIELDS = ("next_run_at", "next_run_at_us", "enabled", "paused_reason")


def schedule_unchanged(advance: Advance) -> Doc:
    """The job as the run claimed it, as far as when it runs goes (see Advance): the filter
    under which the run's end may move its schedule."""
    if advance.claimed_next_run_at is None:
        return {"revision": advance.revision}
    return {"enabled": True, "next_run_at_us": exact_micros(advance.claimed_next_run_at)}


def rolled_forward(ended: Doc, *, schedule: bool, batch: str) -> UpdateOne:
    """The job update a finished execution kept (`finished_document`), fenced as the run's own
    end was (`finish_update`): for the reaper, when a crash came between the two writes. An
    execution ended by an older tickd kept only the revision."""
    fenced = held_by(ended["job_id"], ended["token"])
    changes = dict(ended["release"]["set"])
    if schedule:
        fenced |= ended["release"].get("unchanged") or {"revision": ended["release"]["revision"]}
    else:
        for field in SCHEDULE_FIELDS:
            changes.pop(field, None)
    return UpdateOne(fenced, {"$set": changes | {"last_release": ended["_id"], "batch": batch}})


def finish_update(finish: Finish, *, schedule: bool, batch: str) -> UpdateOne:
    """The fenced update that ends a run: only while its token holds the lease, and with the
    schedule only while ops have not changed when the job runs (`schedule_unchanged`). It names
    the execution in `last_release` and the store call in `batch`, so the store can tell
    afterwards which of a batch applied."""
    execution, advance = finish.execution, finish.advance
    assert execution.token is not None
    fenced = held_by(execution.job_id, execution.token)
    if schedule and advance is not None:
        fenced |= schedule_unchanged(advance)
    update = release_update(advance, schedule=schedule)
    update["$set"] |= {"last_release": execution.id, "batch": batch}
    return UpdateOne(fenced, update)


def abandon_running(job_id: str, token: int, now: datetime) -> UpdateMany:
    """Mark `abandoned` the run the expired lease guarded, unless it has finished meanwhile."""
    abandoned = {"status": Status.ABANDONED.value, "finished_at": now, "error": LEASE_EXPIRED}
    changes = with_exact_times(abandoned, ["finished_at"]) | finish_buckets(exact_micros(now))
    return UpdateMany(
        {"job_id": job_id, "token": token, "status": Status.RUNNING.value},
        {"$set": changes},
    )


def release_lease(job_id: str, token: int) -> UpdateOne:
    return UpdateOne(held_by(job_id, token), {"$set": {"lease": None, "leased": False}})


def executions_filter(query: ExecutionQuery) -> Doc:
    wanted = {
        "job_id": query.job_id,
        "status": query.status,
        "handler": query.handler,
        "dead_letter": query.dead_letter,
    }
    found: Doc = {field: str(value) for field, value in wanted.items() if value is not None}
    window: Doc = {}
    if query.since is not None:
        window["$gte"] = exact_micros(query.since)
    if query.until is not None:
        window["$lt"] = exact_micros(query.until)
    if window:
        found["scheduled_at_us"] = window
    if query.before is not None:
        at, last_id = exact_micros(query.before[0]), query.before[1]
        found["$or"] = [
            {"scheduled_at_us": {"$lt": at}},
            {"scheduled_at_us": at, "_id": {"$lt": last_id}},
        ]
    return found


def settle_dead_letters(execution: Execution) -> UpdateMany:
    """The occurrence's other unhandled dead letters of the same shard: a later run of it has
    ended. (Executions written before shards have no `shard`: they are shard 0.)"""
    shard = {"$in": [0, None]} if execution.shard == 0 else execution.shard
    return UpdateMany(
        {
            "job_id": execution.job_id,
            "scheduled_at_us": exact_micros(execution.scheduled_at),
            "shard": shard,
            "_id": {"$ne": execution.id},
            "dead_letter": {"$in": UNHANDLED},
        },
        {"$set": {"dead_letter": DeadLetter.REDRIVEN.value}},
    )


def retention_scope(retention: Retention) -> Doc:
    if retention.handler is not None:
        return {"handler": retention.handler}
    if retention.except_handlers:
        return {"handler": {"$nin": list(retention.except_handlers)}}
    return {}


def jobs_filter(query: JobQuery) -> Doc:
    found: Doc = {}
    if query.handler is not None:
        found["handler"] = query.handler
    if query.enabled is not None:
        found["enabled"] = query.enabled
    name: Doc = {}
    if query.name_prefix is not None:
        name |= {"$gte": query.name_prefix, "$lt": query.name_prefix + "\U0010ffff"}
    if query.after_name is not None:
        name["$gt"] = query.after_name
    if name:
        found["name"] = name
    window: Doc = {}
    if query.next_run_from is not None:
        window["$gte"] = exact_micros(query.next_run_from)
    if query.next_run_to is not None:
        window["$lt"] = exact_micros(query.next_run_to)
    if window:
        found["next_run_at_us"] = window
    return found


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


def shard_held_by(entry_id: str, token: int) -> Doc:
    """A shard entry while the lease of `token` holds it (its fence moves only with a claim)."""
    return {"_id": entry_id, "fence": token, "lease": {"$ne": None}}


def shard_claim(entry: RunRequest, claim: Claim, batch: str) -> UpdateOne:
    """Lease the entry only if it is still as the due query read it: the same fence, and the
    same lease (none, or the one that expired)."""
    read: Doc = {"_id": entry.id, "fence": entry.fence, **NOT_ENDED}
    if entry.lease is None:
        read["lease"] = None
    else:
        read["lease.until_us"] = exact_micros(entry.lease.until)
    token = entry.fence + 1
    lease = with_exact_times(
        {"owner": claim.owner, "token": token, "until": claim.until}, ["until"]
    )
    taken = {"fence": token, "lease": lease, "leased": True, "batch": batch}
    return UpdateOne(read, {"$set": taken})


def shard_end(finish: Finish, batch: str) -> UpdateOne:
    """A shard's end on its entry, fenced by its token: the lease goes; the entry is ended,
    unless the run was abandoned (then the shard is due again)."""
    execution, entry = finish.execution, finish.shard
    assert entry is not None
    assert execution.token is not None
    changes: Doc = {"lease": None, "leased": False, "batch": batch}
    if execution.status is not Status.ABANDONED:
        summary = execution.summary()
        changes["ended"] = with_exact_times(summary_to_doc(summary) or {}, ["finished_at"])
    return UpdateOne(shard_held_by(entry.id, execution.token), {"$set": changes})


def lease_until_at_least(job_id: str, token: int, until: datetime) -> UpdateOne:
    """Push back the lease of `token` on the job to `until`, never forward."""
    fenced = {**held_by(job_id, token), "lease.until_us": {"$lt": exact_micros(until)}}
    return UpdateOne(
        fenced, {"$set": {"lease.until": until, "lease.until_us": exact_micros(until)}}
    )


def request_claim(claim: Claim, batch: str) -> UpdateOne:
    """Like claim_update, whenever the job is due: a requested run ignores the schedule."""
    return UpdateOne(
        {"_id": claim.job_id, "revision": claim.revision, "lease": None},
        take_lease(claim, batch),
    )
