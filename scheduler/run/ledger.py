"""The runs this instance holds until their end is written: the values a run is at each step (a
DueRun claimed, a Task recorded), and the Ledger that keeps every one. A run due later enters it
when armed, at its claim; a run due now when queued, in the same tick as its claim and record.

The ledger is the run path's one piece of shared state, made once by the dispatcher and handed
to each stage that moves a run on. Each stage tells it what it did (armed, queued, started,
ended, written, let go); each question about what this instance holds is answered from it: how
many runs of a handler are busy (its concurrency limit), how many wait for a worker (room for
the next fetch), which leases are this instance's (renewed across a clock jump, or while the
store refuses ends), and whether runs fired at their time still wait to start (they go before
the ends of runs already over).
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickd.scheduler.model import Execution, Job
from tickd.scheduler.ports.backends import RunRequest
from tickd.scheduler.run.states import RunState
from tickd.scheduler.schedule.planning import Plan
from tickd.scheduler.schedule.shards import run_lock_key, shard_entry_of

# A run armed ahead is recorded this long before its time, and released to the workers at it: a
# thousand runs due at one instant then cost that instant their starts only, not their insert.
# It is also about the longest a run recorded `running` waits for a worker (Arming.room).
RECORDED_AHEAD_SECONDS = 0.1

# The states in which a run takes, or is about to take, one of its handler's slots.
BUSY = frozenset({RunState.ARMED, RunState.RECORDED, RunState.QUEUED, RunState.RUNNING})


@dataclass(frozen=True)
class DueRun:
    """A job to run: its schedule's occurrence, or one someone asked for (`request`). Its lock
    key is worked out once: the ledger and the writer look it up for every step of the run."""

    job: Job
    request: RunRequest | None = None
    # The store claimed its job as it read it (claim_due_jobs): the claimer has nothing left to
    # claim, and a run the fetch leaves gives its lease back.
    claimed: bool = False

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
        its shards (schedule/shards.py), each taken later against its handler's limit."""
        if self.request is not None and self.request.shard is not None:
            return 1
        return 1 if self.job.shards == 1 else 0

    @property
    def shard_entry(self) -> RunRequest | None:
        return shard_entry_of(self.request)

    @functools.cached_property
    def lock_key(self) -> str:
        return run_lock_key(self.job.id, self.request)

    @property
    def token(self) -> int:
        """The fencing token of its claim: its shard entry's, or its job's."""
        lease = self.shard_entry.lease if self.shard_entry is not None else self.job.lease
        assert lease is not None
        return lease.token

    @property
    def lease_until(self) -> datetime | None:
        lease = self.job.lease if self.shard_entry is None else self.shard_entry.lease
        return None if lease is None else lease.until


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


@dataclass(frozen=True, kw_only=True)
class Task:
    """A run claimed, locked and recorded `running`: what the workers take."""

    job: Job  # as claimed: carries the lease and its fencing token
    execution: Execution  # recorded as running
    plan: Plan
    lock_token: str
    claimed_at: datetime
    # Set for a run someone asked for (trigger, retry, backfill): it leaves the schedule alone;
    # or for a shard of an occurrence in progress (its entry): the last shard to end ends it.
    request: RunRequest | None = None
    # Armed ahead and fired at its time: with others due at the same instant, it starts before
    # the ends of runs already over are written (Ledger.fired_waiting).
    fired: bool = False

    @functools.cached_property
    def run(self) -> DueRun:
        """The run as the ledger holds it: one value for all its steps."""
        return DueRun(self.job, self.request)

    @property
    def shard_entry(self) -> RunRequest | None:
        return shard_entry_of(self.request)

    @property
    def lock_key(self) -> str:
        return self.run.lock_key


@dataclass(slots=True)
class _Held:
    run: DueRun
    state: RunState
    kept_until: datetime | None = None  # its lease, once renewed while its end waits
    execution_id: str | None = None  # once recorded and queued
    job_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.job_name = self.run.job.name


class Ledger:
    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}  # by lock key: what runs once at a time
        self._busy: Counter[str] = Counter()  # by handler: runs in a BUSY state
        self._busy_domains: Counter[str] = Counter()  # by domain: runs in a BUSY state
        self._on_workers = 0  # queued or running
        self._armed = 0
        self._started_since_asked: set[str] = set()  # job names (Ledger.running_jobs)
        # Runs fired at their time and not started: released by the arming stage and not queued
        # yet, or queued and not taken by a worker.
        self._fired_coming = 0
        self._fired_queued = 0
        self.fired_started = asyncio.Event()  # no fired run waits in the queue
        self.fired_started.set()
        self._fired_drained = asyncio.Event()  # the queue's fired runs all started, lately

    # -- what the stages tell it --------------------------------------------------------------

    def armed(self, run: DueRun) -> None:
        self._move(run, RunState.ARMED)

    def recorded(self, run: DueRun) -> None:
        """Recorded ahead of its time (staged), or on its way to the workers."""
        self._move(run, RunState.RECORDED)

    def queued(self, task: Task) -> None:
        self._move(task.run, RunState.QUEUED).execution_id = task.execution.id
        if task.fired:
            self._fired_coming = max(0, self._fired_coming - 1)
            self._fired_queued += 1
            self.fired_started.clear()

    def started(self, task: Task) -> None:
        held = self._move(task.run, RunState.RUNNING)
        held.execution_id = task.execution.id
        self._started_since_asked.add(held.job_name)
        self._off_the_queue(task)

    def unqueued(self, task: Task) -> None:
        """Taken off the queue unstarted (a shutdown): it is ended as abandoned next."""
        self._off_the_queue(task)

    def worker_done(self, task: Task) -> None:
        """A worker is done with it: a run whose end it handed over is ENDED; any other never
        got that far (not this instance's any more, or a bug of ours) and is let go."""
        held = self._held.get(task.lock_key)
        if held is not None and held.state in (RunState.QUEUED, RunState.RUNNING):
            self.let_go(task.run)

    def ended(self, run: DueRun) -> None:
        """Its end is worked out and handed to the writer; its lease holds until it is written."""
        self._move(run, RunState.ENDED)

    def let_go(self, run: DueRun) -> None:
        """Its end is written, or it never ran: given back, fenced off, not started."""
        held = self._held.pop(run.lock_key, None)
        if held is not None:
            self._count(held.run, held.state, -1)

    def kept(self, run: DueRun, until: datetime) -> None:
        held = self._held.get(run.lock_key)
        if held is not None:
            held.kept_until = until

    def fired_coming(self, count: int) -> None:
        """`count` runs are released at their time, to be queued once recorded."""
        self._fired_coming += count

    def none_coming(self) -> None:
        """The released runs not queued went back to wait (not recorded, say)."""
        self._fired_coming = 0

    # -- what it answers ------------------------------------------------------------------------

    def busy(self) -> Counter[str]:
        """Runs of each handler armed, recorded, queued or running."""
        return self._busy

    def busy_domains(self) -> Counter[str]:
        """Runs of each domain armed, recorded, queued or running."""
        return self._busy_domains

    def waiting_for_workers(self) -> int:
        """Runs queued for a worker or on one, and those armed or recorded ahead, which join
        the queue at their time."""
        return sum(self._busy.values())

    def armed_count(self) -> int:
        return self._armed

    def count(self, *states: RunState) -> int:
        """How many runs it holds in any of `states` (a look for tests and views: a pass over
        every run held)."""
        return sum(1 for held in self._held.values() if held.state in states)

    def executions_on_workers(self) -> list[str]:
        """The executions of the runs queued for a worker or on one: those a cancel request
        stops (a pass over every run held, made only while some are)."""
        if not self._on_workers:
            return []
        on_workers = (RunState.QUEUED, RunState.RUNNING)
        return [
            held.execution_id
            for held in self._held.values()
            if held.state in on_workers and held.execution_id is not None
        ]

    def on_workers(self) -> int:
        return self._on_workers

    def own_runs(self) -> list[DueRun]:
        """Every run whose lease is this instance's."""
        return [held.run for held in self._held.values()]

    def ending(self) -> list[tuple[DueRun, datetime | None]]:
        """The runs whose ends wait for the store, and until when each lease is known to hold."""
        return [
            (held.run, held.kept_until or held.run.lease_until)
            for held in self._held.values()
            if held.state is RunState.ENDED
        ]

    def running_jobs(self) -> list[str]:
        """The jobs whose runs the workers are on now, or started since the last call (a run
        may start, block the loop and end between two of the watchdog's wake-ups)."""
        started, self._started_since_asked = self._started_since_asked, set()
        running = {h.job_name for h in self._held.values() if h.state is RunState.RUNNING}
        return sorted(started | running)

    def fired_waiting(self) -> int:
        """Runs fired at their time and not started: coming to the queue, or in it."""
        return self._fired_coming + self._fired_queued

    def fired_in_queue(self) -> int:
        return self._fired_queued

    async def next_fired_drained(self) -> None:
        """Until the fired runs queued next have all started (those coming are queued first)."""
        self._fired_drained.clear()
        await self._fired_drained.wait()

    # -- bookkeeping ----------------------------------------------------------------------------

    def _off_the_queue(self, task: Task) -> None:
        if task.fired:
            self._fired_queued -= 1
            if not self._fired_queued:
                self.fired_started.set()
                self._fired_drained.set()

    def _move(self, run: DueRun, state: RunState) -> _Held:
        key = run.lock_key
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held(run, state)
        else:
            self._count(held.run, held.state, -1)
            held.run, held.state = run, state
        self._count(run, state, +1)
        return held

    def _count(self, run: DueRun, state: RunState, sign: int) -> None:
        if state in BUSY:
            self._busy[run.job.handler] += sign
            self._busy_domains[run.job.domain] += sign
        if state is RunState.QUEUED or state is RunState.RUNNING:
            self._on_workers += sign
        elif state is RunState.ARMED:
            self._armed += sign
