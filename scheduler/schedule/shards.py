"""Sharded occurrences: a job with `shards: N` runs each occurrence as N executions (shard 0 to
N-1), which any instance may take, so that they spread over the workers of every instance.

The occurrence is claimed once, like any run (one compare-and-set, so its schedule advances once),
then handed to its shards (Store.start_occurrence): the job's lease becomes the occurrence's, held
by no instance, so the job never overlaps itself, and N shard entries are queued beside the run
requests. Each entry is taken through the dispatcher's one path (handler limits, its own lock,
its own compare-and-set lease and fencing token, record, submit), runs, retries and ends on its
own. A shard whose instance dies (its lease expired or its heartbeat lapsed) is taken over and
runs again alone; a shard fenced off cannot end anything. The last shard to end (every entry
ended) ends the occurrence, fenced by the occurrence's token: the job's advance is computed from
every shard's outcome (succeeded only if every shard did), once.

A shard that failed for good is a dead letter of its own, whose re-drive (or retry) runs that
shard alone, as an ordinary requested run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from tickd.scheduler.lock import lock_key, shard_lock_key
from tickd.scheduler.model import ExecutionSummary, Job, Status
from tickd.scheduler.ports.backends import RunRequest, shard_fence

# The reason of a shard entry, among the run requests.
SHARD = "shard"


def shard_entry_of(request: RunRequest | None) -> RunRequest | None:
    """The shard entry a run runs, if it is a shard of an occurrence in progress (a request to
    re-run one shard alone is an ordinary request)."""
    if request is not None and request.occurrence is not None:
        return request
    return None


def requested_as(request: RunRequest | None) -> str | None:
    """How a run was asked for (the request's reason); None for an occurrence of its job's
    schedule, a shard of one included."""
    if request is None:
        return None
    if request.occurrence is not None and request.advance_from is not None:
        return None
    return request.reason


def run_lock_key(job_id: str, request: RunRequest | None) -> str:
    """What a run locks: its shard, for a shard of an occurrence in progress; else its job."""
    entry = shard_entry_of(request)
    if entry is not None and entry.shard is not None:
        return shard_lock_key(job_id, entry.shard)
    return lock_key(job_id)


def shard_entries(
    job: Job, scheduled_at: datetime, advance_from: datetime | None, now: datetime
) -> list[RunRequest]:
    """The entries of a claimed occurrence of `job`, one a shard; `advance_from` None for a
    requested occurrence (it leaves the schedule alone). Their ids derive from the occurrence's
    token, so that writing them twice queues them once."""
    assert job.lease is not None
    token = job.lease.token
    return [
        RunRequest(
            id=f"{job.id}-o{token}-s{shard:04}",
            job_id=job.id,
            scheduled_at=scheduled_at,
            reason=SHARD,
            not_before=now,
            created_at=now,
            shard=shard,
            shards=job.shards,
            occurrence=token,
            revision=job.revision,
            advance_from=advance_from,
            claimed_next_run_at=job.next_run_at,
            fence=shard_fence(token, shard),
        )
        for shard in range(job.shards)
    ]


def all_ended(entries: Sequence[RunRequest]) -> bool:
    return bool(entries) and all(entry.ended is not None for entry in entries)


def outcome(entries: Sequence[RunRequest]) -> ExecutionSummary:
    """The occurrence as one run, for the job's advance (its last run, its circuit breaker): the
    first shard that failed, else a success if any shard succeeded, with the status of them all.
    It ended when its last shard did (an interval job's next run counts from then)."""
    ended = [(entry, entry.ended) for entry in entries if entry.ended is not None]
    finished_at = max(summary.finished_at for _, summary in ended)
    failed = [(entry, summary) for entry, summary in ended if summary.status.is_failure]
    if failed:
        entry, first = min(failed, key=lambda pair: pair[0].shard or 0)
        others = f" (and {len(failed) - 1} other shards)" if len(failed) > 1 else ""
        prefix = f"shard {entry.shard} of {entry.shards}{others}: "
        error = prefix + (first.error or str(first.status))
        return replace(first, error=error, finished_at=finished_at)
    last = max((summary for _, summary in ended), key=lambda summary: summary.finished_at)
    if any(summary.status is Status.SUCCESS for _, summary in ended):
        return replace(last, status=Status.SUCCESS)
    return last
