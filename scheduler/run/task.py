"""What the stages hand forward: a Task (a run claimed, locked and recorded by the dispatcher)
to the executor, and the Outcome of its handler to the completer."""

from __future__ import annotations

__all__ = ["Outcome", "Task"]

from dataclasses import dataclass
from datetime import datetime

from tickd.scheduler.model import Execution, Job
from tickd.scheduler.plugin.outcomes import Outcome
from tickd.scheduler.ports.backends import RunRequest
from tickd.scheduler.schedule.planning import Plan
from tickd.scheduler.schedule.shards import run_lock_key, shard_entry_of


@dataclass(frozen=True, kw_only=True)
class Task:
    job: Job  # as claimed: carries the lease and its fencing token
    execution: Execution  # recorded as running
    plan: Plan
    lock_token: str
    claimed_at: datetime
    # Set for a run someone asked for (trigger, retry, backfill): it leaves the schedule alone;
    # or for a shard of an occurrence in progress (its entry): the last shard to end ends it.
    request: RunRequest | None = None
    # Armed ahead and fired at its time: with others due at the same instant, it starts before
    # the ends of runs already over are written (scheduler/run/fired_runs.py).
    fired: bool = False

    @property
    def shard_entry(self) -> RunRequest | None:
        return shard_entry_of(self.request)

    @property
    def lock_key(self) -> str:
        return run_lock_key(self.job.id, self.request)
