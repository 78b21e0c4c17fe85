"""What the stages hand forward: a Task (a run claimed, locked and recorded by the dispatcher)
to the executor, and the Outcome of its handler to the completer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tickd.scheduler.model import Attempt, Execution, ExecutionError, Job, Status
from tickd.scheduler.ports.backends import RunRequest
from tickd.scheduler.run.shards import run_lock_key, shard_entry_of
from tickd.scheduler.schedule.planning import Plan


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


@dataclass(frozen=True, kw_only=True)
class Outcome:
    status: Status
    attempts: int = 0
    result: dict[str, Any] | None = None
    error: ExecutionError | None = None
    attempt_log: tuple[Attempt, ...] = ()  # when there was more than one attempt
