"""The complete stage: a run's end, written. The execution as it ended, the job's fenced
advance, the dead letter or re-drive it makes, the lock's release and the events go to the
store in batches (scheduler/run/write.py), and the observers are told what became of it."""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from datetime import datetime, timedelta

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.dead_letters import end_of
from tickd.scheduler.events import event_source
from tickd.scheduler.logs import RepeatedErrors, log_event
from tickd.scheduler.model import Execution, ExecutionSummary, Job, Status
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.ports.backends import Advance, Ports, RunEnd, RunRequest, StoreError
from tickd.scheduler.run.due import DueRun
from tickd.scheduler.run.fired_runs import FiredRuns
from tickd.scheduler.run.task import Outcome, Task
from tickd.scheduler.run.write import Writer, Written
from tickd.scheduler.schedule.planning import Plan, advance_after, keep_schedule
from tickd.scheduler.schedule.shards import all_ended, outcome

log = logging.getLogger("tickd.runner")


class Ender:
    def __init__(
        self,
        *,
        settings: Settings,
        ports: Ports,
        observer: RunObserver,
        rng: random.Random,
        fired: FiredRuns | None = None,
    ) -> None:
        self.settings = settings
        self.ports = ports
        self.observer = observer
        self.rng = rng
        # Runs end in batches: one store write and one lock release for many.
        self.finisher = Writer(
            ports.store,
            ports.lock,
            batch_size=settings.batch_size,
            linger_seconds=settings.finish_linger_seconds,
            event_source=event_source(settings, ports),
            fired=fired,
            sleep=ports.clock.sleep,
            errors=RepeatedErrors(log, monotonic=ports.clock.monotonic),
        )
        # Runs over whose ends wait for the store (by id: a task hashes by its fields).
        self._ending: dict[int, Task] = {}
        # Until when each of their leases is known to hold, once renewed here.
        self._kept_until: dict[int, datetime] = {}

    async def close(self) -> None:
        await self.finisher.close()

    def ending(self) -> list[Task]:
        """The runs that are over but whose ends the store has not written yet: their leases
        must hold until it has (across a forward clock jump, the engine renews them), or this
        instance's own reaper abandons them and their occurrences run again."""
        return list(self._ending.values())

    def _ended(self, task: Task) -> None:
        self._ending.pop(id(task), None)
        self._kept_until.pop(id(task), None)

    def raise_if_ends_refused(self) -> None:
        """While the store refuses the ends being tried again, no new run is claimed (its end
        would only join the wait): the dispatcher backs off, and its readiness names the cause."""
        refused = self.finisher.refused
        if refused is not None:
            raise StoreError(f"the store refuses the ends of runs over: {refused}")

    async def keep_leases(self, now: datetime) -> None:
        """The leases of runs whose ends wait for the store, renewed before they run out (less
        than half the lease margin left), so that no reaper abandons them and runs their
        occurrences again. Called by the dispatcher before it reaps: a renewal the store
        refuses raises, and that tick reaps nothing."""
        margin = timedelta(seconds=self.settings.lease_margin_seconds)
        for key, task in list(self._ending.items()):
            run = DueRun(task.job, task.request)
            until = self._kept_until.get(key) or _lease_until(run)
            if until is None or until - now > margin / 2:
                continue
            renewed = now + timedelta(seconds=task.job.timeout_seconds) + margin
            if run.shard_entry is not None:
                await self.ports.store.renew_shard_lease(run.shard_entry, run.token, renewed, now)
            else:
                await self.ports.store.renew_lease(task.job.id, run.token, renewed)
            if key in self._ending:  # not written meanwhile
                self._kept_until[key] = renewed

    async def finish(
        self, task: Task, outcome: Outcome, started: datetime, *, started_real: float | None = None
    ) -> None:
        """End the run and wait until its end is written (shutdown, skips, shards)."""
        execution, advance, end = self._end_of(task, outcome, started, started_real)
        self._ending[id(task)] = task
        try:
            ending = await self.finisher.finish(end, task.lock_token)
        finally:
            self._ended(task)
        self.tell_ended(task, execution, advance, ending)
        entry = task.shard_entry
        if entry is not None and ending.applied and execution.status is not Status.ABANDONED:
            await self._end_occurrence_if_last(task.job, entry)
        if entry is None and task.request is not None and execution.status is Status.ABANDONED:
            await self._give_request_back(task.request)

    async def hand_over(
        self, task: Task, outcome: Outcome, started: datetime, *, started_real: float
    ) -> None:
        """A worker's run: its end goes with the next batch, and the worker to its next run;
        what became of the end is told once it is written. (Never abandoned here: a run the
        worker completed always has an outcome of its own.) A shard waits for its end: the
        last shard of an occurrence ends the occurrence once its own end is written."""
        if task.shard_entry is not None:
            await self.finish(task, outcome, started, started_real=started_real)
            return
        # Ended now: waiting for the store below is not the run's time. The rest of its end
        # (the record, the next fire time) is worked out with its batch, after the runs
        # waiting to start (scheduler/run/fired_runs.py).
        finished = self.ports.clock.now()
        end = _LateEnd(self, task, outcome, started, finished, self._seconds(started_real))
        self._ending[id(task)] = task
        try:
            if not self.finisher.has_room():
                await self.finisher.room()
        finally:  # cancelled while the store is behind (shutdown): the end is still written
            self.finisher.hand_over_then(end.work_out, task.lock_token, end.tell)

    async def settled(self) -> None:
        """Wait until the end of every run handed over is written."""
        await self.finisher.settled()

    def _seconds(self, started_real: float) -> float:
        return self.ports.clock.monotonic() - started_real

    def _end_of(
        self, task: Task, outcome: Outcome, started: datetime, started_real: float | None
    ) -> tuple[Execution, Advance | None, RunEnd]:
        finished = self.ports.clock.now()
        if started_real is None:
            seconds = (finished - started).total_seconds()
        else:
            seconds = self._seconds(started_real)
        return self.end_at(task, outcome, started, finished, seconds)

    def end_at(
        self, task: Task, outcome: Outcome, started: datetime, finished: datetime, seconds: float
    ) -> tuple[Execution, Advance | None, RunEnd]:
        """The run's record once over, its job's advance and the end to write."""
        execution = task.execution.ended(
            status=outcome.status,
            started_at=started,
            finished_at=finished,
            duration_ms=round(seconds * 1000, 3),
            attempts=outcome.attempts,
            error=outcome.error,
            result=outcome.result,
            attempt_log=outcome.attempt_log,
        )
        entry = task.shard_entry
        # A shard's end leaves the job to its occurrence's last shard (schedule/shards.py).
        advance = self._advance(task, execution) if entry is None else None
        # Dead letters and automatic re-drives: scheduler/dead_letters.py. A shard of a
        # scheduled occurrence re-runs nothing; one of a requested occurrence does.
        asked = task.request if entry is None or entry.advance_from is None else None
        end = end_of(task.job, asked, execution, advance)
        if entry is not None:
            end = replace(end, shard=entry)
        elif task.request is not None and execution.status is not Status.ABANDONED:
            end = replace(end, request_id=task.request.id)  # it ran: off the queue
        return end.execution, advance, end

    def tell_ended(
        self, task: Task, execution: Execution, advance: Advance | None, ending: Written
    ) -> None:
        if ending.error is not None:
            self.observer.not_recorded(task.job, execution, ending.error)
        elif not ending.applied:
            self.observer.fenced(task.job, execution, before_start=False)
        self.observer.finished(task.job, execution)
        if ending.applied and advance is not None and advance.paused_reason:
            self.observer.paused(task.job, advance.paused_reason)

    async def _end_occurrence_if_last(self, job: Job, entry: RunRequest) -> None:
        """Read after this shard's end was written, so that of two last shards ending at once,
        at least one sees every shard ended; both may end the occurrence, fenced: it ends once.
        Should this fail, the occurrence's lease expires and the occurrence runs again."""
        assert entry.occurrence is not None
        try:
            entries = await self.ports.store.occurrence_shards(job.id, entry.occurrence)
            if not all_ended(entries):
                return
            advance = self._occurrence_advance(job, entry, outcome(entries))
            ended = await self.ports.store.end_occurrence(job.id, entry.occurrence, advance)
        except StoreError as exc:
            log_event(log, "occurrence.not_ended", level=logging.ERROR, error=str(exc))
            return
        if ended and advance.paused_reason:
            self.observer.paused(job, advance.paused_reason)

    def _occurrence_advance(
        self, job: Job, entry: RunRequest, summary: ExecutionSummary
    ) -> Advance:
        """As for one run of the job as it was claimed (its revision and next fire time then,
        which its entries keep: `job` was read when this shard was). Entries queued by an older
        tickd keep no time: fenced by the revision alone."""
        claimed = replace(job, revision=entry.revision)
        if entry.advance_from is None:
            return keep_schedule(claimed, summary)
        if entry.claimed_next_run_at is not None:
            claimed = replace(claimed, next_run_at=entry.claimed_next_run_at)
        plan = Plan(run_at=entry.scheduled_at, advance_from=entry.advance_from)
        advance = advance_after(
            claimed,
            plan,
            summary,
            breaker_threshold=self.settings.circuit_breaker_failures,
            rng=self.rng,
        )
        if entry.claimed_next_run_at is None:
            return replace(advance, claimed_next_run_at=None)
        return advance

    async def _give_request_back(self, request: RunRequest) -> None:
        """A requested run that never got to run (a shutdown) is asked for again, as a
        scheduled one's occurrence is given back. Its request stays queued while it runs
        (Store.claim_run_requests), so this queues it again only if an older tickd took it off
        at its claim: the same id, so giving it back twice queues it once."""
        try:
            await self.ports.store.insert_run_requests([request])
        except StoreError as exc:
            log_event(log, "run.request_not_given_back", level=logging.ERROR, error=str(exc))

    def _advance(self, task: Task, execution: Execution) -> Advance | None:
        if execution.status is Status.ABANDONED:
            return None
        summary = execution.summary()
        if task.request is not None:
            return keep_schedule(task.job, summary)
        return advance_after(
            task.job,
            task.plan,
            summary,
            breaker_threshold=self.settings.circuit_breaker_failures,
            rng=self.rng,
        )


def _lease_until(run: DueRun) -> datetime | None:
    entry = run.shard_entry
    lease = run.job.lease if entry is None else entry.lease
    return None if lease is None else lease.until


class _LateEnd:
    """A run's end, timed when its handler returned, worked out when its batch is written."""

    def __init__(
        self,
        completer: Ender,
        task: Task,
        outcome: Outcome,
        started: datetime,
        finished: datetime,
        seconds: float,
    ) -> None:
        self._completer, self._task, self._outcome = completer, task, outcome
        self._started, self._finished, self._seconds = started, finished, seconds
        self._execution: Execution | None = None
        self._advance: Advance | None = None

    def work_out(self) -> RunEnd:
        try:
            self._execution, self._advance, end = self._completer.end_at(
                self._task, self._outcome, self._started, self._finished, self._seconds
            )
        except BaseException:  # never written (see Writer.hand_over_then)
            self._completer._ended(self._task)
            raise
        return end

    def tell(self, ending: Written) -> None:
        assert self._execution is not None  # told only of an end worked out
        self._completer._ended(self._task)
        self._completer.tell_ended(self._task, self._execution, self._advance, ending)
