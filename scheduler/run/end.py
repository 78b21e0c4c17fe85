"""The end stage: a run's end, worked out as soon as its handler gives an outcome: the execution
as it ended, the job's fenced advance, the dead letter or re-drive it makes (dead_letters.py).
The end goes to the writer (run/write.py), which writes it with others in a batch. While ends
wait for a store that refuses them, this stage keeps their runs' leases."""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from datetime import datetime, timedelta

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.dead_letters import end_of
from tickd.scheduler.logs import log_event
from tickd.scheduler.model import Execution, ExecutionSummary, Job, Status
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.outcomes import Outcome
from tickd.scheduler.ports.backends import Advance, RunRequest, StoreError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_api import RunRequestStore
from tickd.scheduler.ports.store_engine import CompletionStore
from tickd.scheduler.run.ledger import Ledger, Task
from tickd.scheduler.run.write import Ended, Writer, Written
from tickd.scheduler.schedule.planning import Plan, advance_after, keep_schedule
from tickd.scheduler.schedule.shards import all_ended, outcome

log = logging.getLogger("tickd.runner")


class Ender:
    def __init__(
        self,
        *,
        settings: Settings,
        store: CompletionStore,
        requests: RunRequestStore,
        clock: Clock,
        ledger: Ledger,
        writer: Writer,
        observer: RunObserver,
        rng: random.Random,
    ) -> None:
        self.settings = settings
        self.store = store
        self.requests = requests  # a shutdown gives a requested run's request back
        self.clock = clock
        self.ledger = ledger
        self.writer = writer
        self.observer = observer
        self.rng = rng

    def raise_if_ends_refused(self) -> None:
        """While the store refuses the ends being tried again, no new run is claimed (its end
        would only join the wait): the dispatcher backs off, and its readiness names the cause."""
        refused = self.writer.refused
        if refused is not None:
            raise StoreError(f"the store refuses the ends of runs over: {refused}")

    async def keep_leases(self, now: datetime) -> None:
        """The leases of runs whose ends wait for the store, renewed before they run out (less
        than half the lease margin left), so that no reaper abandons them and runs their
        occurrences again. Called by the dispatcher before it reaps: a renewal the store
        refuses raises, and that tick reaps nothing."""
        margin = timedelta(seconds=self.settings.lease_margin_seconds)
        for run, until in self.ledger.ending():
            if until is None or until - now > margin / 2:
                continue
            renewed = now + timedelta(seconds=run.job.timeout_seconds) + margin
            if run.shard_entry is not None:
                await self.store.renew_shard_lease(run.shard_entry, run.token, renewed, now)
            else:
                await self.store.renew_lease(run.job.id, run.token, renewed)
            self.ledger.kept(run, renewed)  # unless written meanwhile

    async def hand_over(
        self, task: Task, outcome: Outcome, started: datetime, finished: datetime, seconds: float
    ) -> None:
        """A worker's run: its end goes to the writer, and the worker to its next run. (Never
        abandoned here: a run the worker completed always has an outcome of its own.) A shard
        waits for its end: the last shard of an occurrence ends the occurrence once its own
        end is written."""
        if task.shard_entry is not None:
            await self.end_now(task, outcome, started, seconds=seconds)
            return
        ended = self._ended(task, outcome, started, finished, seconds)
        # From here its lease is kept while the store refuses ends (keep_leases), the wait for
        # room in the writer included.
        self.ledger.ended(task.run)
        try:
            if not self.writer.has_room():
                await self.writer.room()
        finally:  # cancelled while the store is behind (shutdown): the end is still written
            self.writer.write_later(ended)

    async def end_now(
        self, task: Task, outcome: Outcome, started: datetime, *, seconds: float | None = None
    ) -> None:
        """End the run and wait until its end is written (shutdown, skips, shards)."""
        finished = self.clock.now()
        if seconds is None:
            seconds = (finished - started).total_seconds()
        ended = self._ended(task, outcome, started, finished, seconds)
        self.ledger.ended(task.run)
        written = await self.writer.write(ended)
        await self._after_written(task, ended.end.execution, written)

    async def _after_written(self, task: Task, execution: Execution, written: Written) -> None:
        entry = task.shard_entry
        if entry is not None and written.applied and execution.status is not Status.ABANDONED:
            await self._end_occurrence_if_last(task.job, entry)
        if entry is None and task.request is not None and execution.status is Status.ABANDONED:
            await self._give_request_back(task.request)

    def _ended(
        self, task: Task, outcome: Outcome, started: datetime, finished: datetime, seconds: float
    ) -> Ended:
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
            log=outcome.log,
        )
        entry = task.shard_entry
        # A shard's end leaves the job to its occurrence's last shard (schedule/shards.py).
        advance = self._advance(task, execution) if entry is None else None
        # Dead letters and automatic re-drives: dead_letters.py. A shard of a scheduled
        # occurrence re-runs nothing; one of a requested occurrence does.
        asked = task.request if entry is None or entry.advance_from is None else None
        end = end_of(task.job, asked, execution, advance)
        if entry is not None:
            end = replace(end, shard=entry)
        elif task.request is not None and execution.status is not Status.ABANDONED:
            end = replace(end, request_id=task.request.id)  # it ran: off the queue
        return Ended(task.run, end, task.lock_token)

    async def _end_occurrence_if_last(self, job: Job, entry: RunRequest) -> None:
        """Read after this shard's end was written, so that of two last shards ending at once,
        at least one sees every shard ended; both may end the occurrence, fenced: it ends once.
        Should this fail, the occurrence's lease expires and the occurrence runs again."""
        assert entry.occurrence is not None
        try:
            entries = await self.store.occurrence_shards(job.id, entry.occurrence)
            if not all_ended(entries):
                return
            advance = self._occurrence_advance(job, entry, outcome(entries))
            ended = await self.store.end_occurrence(job.id, entry.occurrence, advance)
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
            await self.requests.insert_run_requests([request])
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
