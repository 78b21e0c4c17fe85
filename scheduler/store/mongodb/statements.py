"""The job store's filters and updates on MongoDB that its roles run: the due and claim
queries, a run's end and its lease's release, abandoning and re-driving runs, the lists'
filters, and the shards' claims and ends."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pymongo import (
    ReplaceOne,
    UpdateMany,
    UpdateOne,
)

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
    micros,
    summary_to_doc,
)
from tickd.scheduler.domains import DEFAULT_DOMAIN
from tickd.scheduler.model import DeadLetter, Execution, Status
from tickd.scheduler.ports.backends import (
    EVERY_DUE,
    Advance,
    Claim,
    DueFilter,
    ExecutionQuery,
    JobQuery,
    Retention,
    RunEnd,
    RunRequest,
)
from tickd.scheduler.store.kit.mongodb import (
    with_exact_times,
)
from tickd.scheduler.store.mongodb.documents import (
    ADVANCE_TIMES,
    FREE,
    LEASE_EXPIRED,
    NOT_ENDED,
    UNHANDLED,
    execution_document,
    finish_buckets,
)


def held_by(job_id: str, token: int) -> Doc:
    """The job while the lease of `token` holds it (the fence moves only with a new claim)."""
    return {"_id": job_id, "fence": token, "lease": {"$ne": None}}


def due_filter(now: datetime, where: DueFilter = EVERY_DUE) -> Doc:
    """The free jobs due by `now` of `where`'s handlers, keys and domains (its partitions,
    first jobs and order are the reads')."""
    due: Doc = {**FREE, "next_run_at_us": {"$lte": exact_micros(now)}}
    if where.exclude_handlers:
        due["handler"] = {"$nin": list(where.exclude_handlers)}
    if where.exclude_keys:  # $nin keeps the jobs without a key (null or missing)
        due["concurrency_key"] = {"$nin": list(where.exclude_keys)}
    return due | in_domains(where.domains, where.exclude_domains)


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


def finished_document(finish: RunEnd) -> ReplaceOne[Doc]:
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


def finish_update(finish: RunEnd, *, schedule: bool, batch: str) -> UpdateOne:
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


def in_domain(domain: str) -> Doc:
    """The jobs of `domain`; the default one's include the jobs written without a domain (by
    a tickd from before domains, which reads as DEFAULT_DOMAIN)."""
    if domain == DEFAULT_DOMAIN:
        return {"domain": {"$in": [DEFAULT_DOMAIN, None]}}
    return {"domain": domain}


def in_domains(domains: Sequence[str] | None, exclude_domains: Sequence[str] = ()) -> Doc:
    """The jobs of `domains` (None: of any) and not of `exclude_domains`, a job written without
    a domain being in the default one. One domain other than the default is an equality, which
    FerretDB pushes down: it then decodes only that domain's jobs."""
    wanted: Doc = {}
    if domains is not None:
        named = with_unnamed(domains)
        wanted = {"$eq": named[0]} if len(named) == 1 else {"$in": named}
    if exclude_domains:
        wanted["$nin"] = with_unnamed(exclude_domains)
    return {"domain": wanted} if wanted else {}


def with_unnamed(domains: Sequence[str]) -> list[str | None]:
    """`domains`, and None (a job written without a domain) where the default one is there."""
    return [*domains, None] if DEFAULT_DOMAIN in domains else list(domains)


def jobs_filter(query: JobQuery) -> Doc:
    found: Doc = {}
    if query.handler is not None:
        found["handler"] = query.handler
    if query.domain is not None:
        found |= in_domain(query.domain)
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


def shard_end(finish: RunEnd, batch: str) -> UpdateOne:
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
