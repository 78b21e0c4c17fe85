"""What the dispatcher fetches and claims: a DueRun, a job's occurrence or a run someone asked
for, and when it starts and is recorded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import RunRequest
from tickd.scheduler.schedule.shards import run_lock_key, shard_entry_of

# A run armed ahead is recorded this long before its time, and released to the workers at it: a
# thousand runs due at one instant then cost that instant their starts only, not their insert.
# It is also about the longest a run recorded `running` waits for a worker (Firing.room).
RECORDED_AHEAD_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class DueRun:
    """A job to run: its schedule's occurrence, or one someone asked for (`request`)."""

    job: Job
    request: RunRequest | None = None

    def starts_at(self, now: datetime) -> datetime:
        """When it should start: a request at once, a scheduled run at its time."""
        if self.request is not None or self.job.next_run_at is None:
            return now
        return max(now, self.job.next_run_at)

    def records_at(self, now: datetime) -> datetime:
        """When its run is recorded, armed ahead: RECORDED_AHEAD_SECONDS before its time, to be
        released to the workers at it. A sharded occurrence is handed to its shards when it is
        recorded, and they are due from then: at its time."""
        starts = self.starts_at(now)
        return starts if self.width == 0 else starts - timedelta(seconds=RECORDED_AHEAD_SECONDS)

    def wait_seconds(self, now: datetime) -> float:
        return (self.starts_at(now) - now).total_seconds()

    @property
    def width(self) -> int:
        """How many runs it starts: one, or none for a sharded occurrence, which is handed to
        its shards (scheduler/schedule/shards.py), each taken later against its handler's limit."""
        if self.request is not None and self.request.shard is not None:
            return 1
        return 1 if self.job.shards == 1 else 0

    @property
    def shard_entry(self) -> RunRequest | None:
        return shard_entry_of(self.request)

    @property
    def lock_key(self) -> str:
        return run_lock_key(self.job.id, self.request)

    @property
    def token(self) -> int:
        """The fencing token of its claim: its shard entry's, or its job's."""
        lease = self.shard_entry.lease if self.shard_entry is not None else self.job.lease
        assert lease is not None
        return lease.token


def _key(run: DueRun) -> str:
    """What runs once at a time: a job, or one shard of an occurrence in progress."""
    return run.request.id if run.shard_entry is not None and run.request else run.job.id


def one_per_job(runs: list[DueRun]) -> list[DueRun]:
    """A job runs once at a time: of its runs due in one batch, the first (a request before
    the schedule's own, the oldest request first) goes now, the others in a later tick."""
    seen: set[str] = set()
    first = []
    for run in runs:
        if _key(run) not in seen:
            seen.add(_key(run))
            first.append(run)
    return first
