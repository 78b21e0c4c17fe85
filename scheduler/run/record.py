"""Recording claimed runs: each becomes a Task with its execution written `running` (one
insert for a batch), misfired occurrences are recorded skipped, and a sharded occurrence is
handed to its shards."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.lock import lock_key
from tickd.scheduler.model import Execution, ExecutionError, Job, Status
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.outcomes import Outcome
from tickd.scheduler.ports.backends import Lock
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import DispatchStore
from tickd.scheduler.run.end import Ender
from tickd.scheduler.run.ledger import DueRun, Ledger, Task
from tickd.scheduler.schedule.planning import Plan, plan_run
from tickd.scheduler.schedule.shards import requested_as, shard_entries


@dataclass(frozen=True, slots=True)
class Recorded:
    tasks: list[Task]  # runs to start, recorded `running`
    sharded: int = 0  # occurrences handed to their shards, which are due at once


class Recorder:
    def __init__(
        self,
        *,
        settings: Settings,
        store: DispatchStore,
        lock: Lock,
        clock: Clock,
        ledger: Ledger,
        ender: Ender,
        observer: RunObserver,
        event_source: str | None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.lock = lock
        self.clock = clock
        self.ledger = ledger
        # Ends what is recorded and never runs: an occurrence all of whose times were skipped.
        self.ender = ender
        self.observer = observer
        self.event_source = event_source  # the executions' events go to the outbox with them

    async def record(
        self, held: list[tuple[DueRun, str]], now: datetime, *, fired: bool = False
    ) -> Recorded:
        """Write the batch's executions (running ones and misfire skips) in one insert; each
        run with the token of the locks taken for it, started at its time (a run recorded
        ahead of its time starts at it)."""
        tasks: list[Task] = []
        skipped: list[tuple[Job, Execution]] = []
        only_skips: list[tuple[Job, Plan, Execution, str]] = []
        sharded: list[tuple[DueRun, Plan, str]] = []
        for run, token in held:
            job = run.job
            at = run.starts_at(now)
            plan = self._plan(run, at)
            missed = self._skipped_executions(job, plan, now)
            if plan.run_at is None:  # every due occurrence skipped: the last one advances the job
                *missed, last = missed
                only_skips.append((job, plan, last, token))
            skipped += [(job, execution) for execution in missed]
            if plan.run_at is not None and run.width == 0:
                sharded.append((run, plan, token))
            elif plan.run_at is not None:
                tasks.append(self._task(run, plan, at, now, token, fired=fired))
        recorded = [(task.job, task.execution) for task in tasks] + skipped
        await self.store.insert_executions(
            [execution for _, execution in recorded],
            event_source=self.event_source,
        )
        for job, execution in recorded:
            self.observer.recorded(job, execution)
        for job, plan, last_skip, token in only_skips:
            await self._finish_skipped(job, plan, last_skip, token)
        for run, plan, token in sharded:
            await self._hand_to_shards(run, plan, now, token)
        return Recorded(tasks, sharded=len(sharded))

    async def _hand_to_shards(self, run: DueRun, plan: Plan, now: datetime, token: str) -> None:
        """A claimed sharded occurrence becomes its shards' (scheduler/schedule/shards.py), which
        any instance takes, each under its own lock: the job's lock goes back now. A requested
        occurrence leaves the schedule alone."""
        job = run.job
        assert job.lease is not None
        assert plan.run_at is not None
        advance_from = None if run.request is not None else plan.advance_from
        entries = shard_entries(job, plan.run_at, advance_from, now)
        await self.store.start_occurrence(job.id, job.lease.token, job.lease.until, entries)
        await self.lock.release_many([lock_key(job.id)], token)
        self.ledger.let_go(run)  # the occurrence is its shards' now

    def _task(
        self,
        run: DueRun,
        plan: Plan,
        started: datetime,
        now: datetime,
        token: str,
        *,
        fired: bool = False,
    ) -> Task:
        """A run; a shard's (of an occurrence in progress, or one re-run alone) is that shard."""
        assert plan.run_at is not None
        request = run.request
        shard = (0, 1)
        if request is not None and request.shard is not None:
            shard = (request.shard, request.shards or run.job.shards)
        execution = self._execution(
            run.job,
            plan.run_at,
            Status.RUNNING,
            started,
            shard=shard,
            token=run.token,
            requested=requested_as(request),
        )
        return Task(
            job=run.job,
            execution=execution,
            plan=plan,
            lock_token=token,
            claimed_at=now,
            request=run.request,
            fired=fired,
        )

    @staticmethod
    def _plan(run: DueRun, now: datetime) -> Plan:
        """A requested run is its occurrence, never a misfire; a scheduled one follows the
        job's misfire policy."""
        if run.request is not None:
            return Plan(run_at=run.request.scheduled_at, advance_from=now)
        return plan_run(run.job, now)

    def _skipped_executions(self, job: Job, plan: Plan, now: datetime) -> list[Execution]:
        if not plan.skipped:
            return []
        self.observer.misfired(job, len(plan.skipped))
        message = f"missed by more than the grace period ({job.misfire.grace_seconds:g} s)"
        if plan.skipped_truncated:
            message += "; more occurrences were missed than are recorded"
        error = ExecutionError(type="Misfire", message=message)
        return [
            self._execution(job, at, Status.SKIPPED, now, error=error, finished=now)
            for at in plan.skipped
        ]

    async def _finish_skipped(self, job: Job, plan: Plan, execution: Execution, token: str) -> None:
        """A job all of whose due occurrences were skipped: no run, just advance it."""
        task = Task(
            job=job,
            execution=execution,
            plan=plan,
            lock_token=token,
            claimed_at=execution.started_at or self.clock.now(),
        )
        outcome = Outcome(status=Status.SKIPPED, error=execution.error)
        await self.ender.end_now(task, outcome, self.clock.now())

    def _execution(
        self,
        job: Job,
        scheduled_at: datetime,
        status: Status,
        now: datetime,
        *,
        error: ExecutionError | None = None,
        finished: datetime | None = None,
        shard: tuple[int, int] = (0, 1),
        token: int | None = None,
        requested: str | None = None,
    ) -> Execution:
        assert job.lease is not None
        return Execution(
            job_id=job.id,
            job_name=job.name,
            handler=job.handler,
            scheduled_at=scheduled_at,
            status=status,
            started_at=now,
            finished_at=finished,
            duration_ms=0.0 if finished else None,
            error=error,
            owner=self.settings.instance_id,
            token=job.lease.token if token is None else token,
            shard=shard[0],
            shards=shard[1],
            requested=requested,
        )
