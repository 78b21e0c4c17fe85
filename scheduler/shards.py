"""Sharded occurrences: a job with `shards: N` runs each occurrence as N executions (shard 0 to
N-1), submitted to the pool as N tasks, so that they spread over its workers.

The occurrence is claimed once (one lease, one fencing token, one lock, which fence and lock
every shard of it), so the job never overlaps itself and its schedule advances once. Each shard
runs, retries and ends on its own; its execution is written as it ends, the job left leased. The
last shard to end ends the occurrence: its finish carries the job's advance, computed from every
shard's outcome (succeeded only if every shard did), and releases the lease and the lock.

A shard that failed for good is a dead letter of its own, whose re-drive (or retry) runs that
shard alone, as an ordinary requested run. Shards run in the instance that claimed their
occurrence: they spread over its workers, not over instances.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scheduler.model import Execution, ExecutionError, Status


@dataclass(eq=False)
class Occurrence:
    """The shards of one claimed occurrence, as they end in this instance."""

    shards: int
    ended: list[Execution] = field(default_factory=list)
    # Shards that never started (their lease or lock could not be renewed).
    not_started: int = 0

    def end(self, execution: Execution | None) -> bool:
        """Count a shard's end (None: it never started); True once every shard has ended."""
        if execution is None:
            self.not_started += 1
        else:
            self.ended.append(execution)
        return len(self.ended) + self.not_started == self.shards

    @property
    def whole(self) -> bool:
        """Every shard ran: the occurrence may end. A shard that never started leaves the lease
        to expire, and the reaper gives the occurrence back, as for an unsharded run."""
        return self.not_started == 0

    def outcome(self) -> Execution:
        """The occurrence as one execution, for the job's advance (its last run, its circuit
        breaker): the first shard that failed, else one that was abandoned (the occurrence is
        given back), else the last to end, with the status of them all. It ended when the last
        shard did (an interval job's next run counts from then)."""
        last = self.ended[-1]
        failed = [e for e in self.ended if e.status.is_failure]
        if failed:
            first = min(failed, key=lambda e: e.shard)
            return replace(first, error=_of_shard(first, len(failed)), finished_at=last.finished_at)
        abandoned = [e for e in self.ended if e.status is Status.ABANDONED]
        if abandoned:
            return abandoned[0]
        if any(e.status is Status.SUCCESS for e in self.ended):
            return replace(last, status=Status.SUCCESS)
        return last


def _of_shard(execution: Execution, failures: int) -> ExecutionError:
    """The failed shard's error, saying which shard it was and how many failed."""
    error = execution.error or ExecutionError(type=str(execution.status), message="")
    others = f" (and {failures - 1} other shards)" if failures > 1 else ""
    prefix = f"shard {execution.shard} of {execution.shards}{others}: "
    return replace(error, message=prefix + error.message)
