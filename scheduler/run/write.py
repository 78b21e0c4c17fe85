"""The write stage: the ends of runs, written in batches as the dispatcher starts them. The
executions, the jobs' fenced advances and the lock releases of every run that ends within a few
milliseconds of another go to the store and the lock service as one batch, so a burst costs a
few round trips per hundred runs, not one per run. Each run's advance is still fenced by its own
lease token. A worker hands its run's end over and moves on (the run's lease and lock are held
until the end is written, so nothing else runs the job meanwhile); it waits only when the store
falls behind. Once a batch is written, the writer tells the observers what became of each end
and lets the runs go from the ledger.

A store that refuses writes for a while (a full disk, a lost connection) delays ends, never
loses them: a batch is tried again, with backoff, until the store takes it. Meanwhile the ends
waiting are bounded (the workers, then the dispatcher, wait) and their runs' leases are kept
(run/end.py), so no run of theirs runs again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass

from tickd.scheduler.logs import RepeatedErrors, log_event
from tickd.scheduler.model import Job
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.ports.backends import Lock, RunEnd, StoreError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import CompletionStore
from tickd.scheduler.run.ledger import DueRun, Ledger
from tickd.scheduler.schedule.backoff import backoff_delay
from tickd.scheduler.store.kit.patience import refuses_for_now

log = logging.getLogger("tickd.runner")

# A batch the store refuses for now (scheduler/store/kit/patience.py) is tried again until it
# takes it, waiting at most this long between tries.
RETRY_CAP_SECONDS = 5.0
# Once closing (shutdown), a store that still refuses gets this many more tries in all; then
# the leases of the ends left are left to expire (the reaper gives their occurrences back:
# late, never lost), or a shutdown would wait for the store for good.
CLOSING_ATTEMPTS = 5
# Ends handed over and not yet written, in batches, before the workers wait for the store.
PENDING_BATCHES = 2
# Runs fired at their time and waiting for a worker go before the ends of runs already over
# (see Writer), but an end waits for them this long at most: fired runs that cannot start
# (every worker busy with long runs) must not keep ends from the store.
MAX_DEFER_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class Ended:
    """A run whose end is worked out (run/end.py), for the writer: the end to write, the job as
    claimed (for the observers) and the token of the run's lock."""

    run: DueRun
    end: RunEnd
    lock_token: str

    @property
    def job(self) -> Job:
        return self.run.job


@dataclass(frozen=True, slots=True)
class Written:
    """What became of a run's end: applied to its job, or fenced off (`applied` False); `error`
    when the store refused it for good."""

    applied: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Pending:
    ended: Ended
    # Set for whoever waits for what became of the end (Writer.write).
    written: asyncio.Future[Written] | None


class Writer:
    def __init__(
        self,
        *,
        store: CompletionStore,
        lock: Lock,
        clock: Clock,
        ledger: Ledger,
        observer: RunObserver,
        batch_size: int,
        linger_seconds: float,
        event_source: str | None = None,
    ) -> None:
        self._store = store
        self._lock = lock
        self._clock = clock  # its sleep: tests move time instead of waiting for it
        self._observer = observer
        self._errors = RepeatedErrors(log, monotonic=clock.monotonic)
        # Why the store refuses the batch being tried again, while it does (None otherwise).
        self.refused: str | None = None
        self._closing_tries: int | None = None  # counted from close()
        self._event_source = event_source  # the executions' events go to the outbox with them
        self._batch_size = batch_size
        # How long a batch waits for more runs to end before it goes (0: the runs that end in
        # the same turn of the event loop).
        self._linger = linger_seconds
        self._pending: list[_Pending] = []
        # At most this many ends wait for the store; then handing over waits.
        self._max_pending = PENDING_BATCHES * batch_size
        self._room = asyncio.Event()
        self._room.set()
        self._flushing: asyncio.Task[None] | None = None
        # Set once a batch is written and its locks released: its jobs may be claimed again
        # (the dispatcher waits on it; whoever waits clears it).
        self.written = asyncio.Event()
        # The runs fired at their time start before a batch of ends is written (for at most
        # MAX_DEFER_SECONDS). Jobs due at one instant fire together; their ends, on the same
        # loop, would otherwise share it with their starts, and the last of a thousand would
        # start twice as late. A job's lease is held until its end is written, so nothing else
        # runs it meanwhile.
        self._ledger = ledger

    async def write(self, ended: Ended) -> Written:
        """Write the run's end with the next batch, release its lock, and say what became of it
        (shutdown, skips, shards: whoever must know before going on)."""
        await self.room()
        written: asyncio.Future[Written] = asyncio.get_running_loop().create_future()
        self._queue(_Pending(ended, written))
        return await asyncio.shield(written)  # written even if the caller is cancelled

    def write_later(self, ended: Ended) -> None:
        """Queue the run's end for the next batch: a worker hands its run's end over and takes
        the next run at once. What became of it goes to the observers once it is written."""
        self._queue(_Pending(ended, None))

    def _queue(self, pending: _Pending) -> None:
        self._pending.append(pending)
        # While fired runs wait to start, ends are deferred, not held back: the workers must
        # get to those runs. The bound applies again once they have started.
        if len(self._pending) >= self._max_pending and not self._ledger.fired_waiting():
            self._room.clear()
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush(), name="writer")

    def has_room(self) -> bool:
        return self._room.is_set()

    async def room(self) -> None:
        """Wait while the store is behind with the ends already handed over (backpressure: the
        workers wait, then the queue fills, then the dispatcher waits)."""
        await self._room.wait()

    async def settled(self) -> None:
        """Wait until every end handed over is written."""
        while self._flushing is not None:
            await asyncio.shield(self._flushing)

    def closing(self) -> None:
        """A shutdown has begun: a store that keeps refusing gets CLOSING_ATTEMPTS more tries
        in all, for the ends pending and those still to come."""
        if self._closing_tries is None:
            self._closing_tries = 0

    async def close(self) -> None:
        """Write what is pending (shutdown), within CLOSING_ATTEMPTS tries of a refusing store."""
        self.closing()
        await self.settled()

    async def _flush(self) -> None:
        try:
            while self._pending:
                if len(self._pending) < self._batch_size:
                    await asyncio.sleep(self._linger)  # let the runs ending now join the batch
                await self._after_starts()
                batch = self._pending[: self._batch_size]
                del self._pending[: self._batch_size]
                if len(self._pending) < self._max_pending:
                    self._room.set()
                else:
                    self._room.clear()
                await self._write_batch(batch)
        finally:
            self._flushing = None

    async def _after_starts(self) -> None:
        if not self._ledger.fired_waiting():
            return
        # Workers waiting to hand an end over (the store was behind) must get to the fired
        # runs, or nothing starts and nothing is written until the deferral runs out.
        self._room.set()
        deadline = asyncio.get_running_loop().time() + MAX_DEFER_SECONDS
        while self._ledger.fired_waiting():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ledger.next_fired_drained(), left)

    async def _write_batch(self, batch: list[_Pending]) -> None:
        try:
            written = await self._write([pending.ended.end for pending in batch])
        except Exception as exc:  # a bug, or an error no store translated: no run may hang on it
            log.exception("writer.batch_failed")
            written = [Written(applied=False, error=f"{type(exc).__name__}: {exc}") for _ in batch]
        await self._release_locks([pending.ended for pending in batch])
        self.written.set()
        for pending, outcome in zip(batch, written, strict=True):
            self._ledger.let_go(pending.ended.run)
            self._tell(pending.ended, outcome)
            if pending.written is not None and not pending.written.done():
                pending.written.set_result(outcome)

    def _tell(self, ended: Ended, written: Written) -> None:
        """The observers hear what became of the run: not recorded, fenced off, finished; and
        paused, when its end paused its job."""
        job, execution, advance = ended.job, ended.end.execution, ended.end.advance
        try:
            if written.error is not None:
                self._observer.not_recorded(job, execution, written.error)
            elif not written.applied:
                self._observer.fenced(job, execution, before_start=False)
            self._observer.finished(job, execution)
            if written.applied and advance is not None and advance.paused_reason:
                self._observer.paused(job, advance.paused_reason)
        except Exception:  # a bug of an observer's: the batch's other runs are still told
            log.exception("writer.observer_failed")

    async def _write(self, ends: list[RunEnd]) -> list[Written]:
        """The batch written once the store takes it; given up only for an error no retry
        cures, or on shutdown."""
        attempt = 0
        while True:
            attempt += 1
            try:
                applied = await self._store.write_ends(ends, event_source=self._event_source)
            except StoreError as exc:
                if not self._worth_another_try(exc):
                    self.refused = None
                    return [Written(applied=False, error=str(exc)) for _ in ends]
                await self._wait_for_store(exc, attempt, len(ends))
                continue
            self._taken(attempt, len(ends))
            return [Written(applied=flag) for flag in applied]

    def _worth_another_try(self, exc: StoreError) -> bool:
        if not refuses_for_now(exc):
            return False
        if self._closing_tries is None:
            return True
        self._closing_tries += 1
        return self._closing_tries < CLOSING_ATTEMPTS

    async def _wait_for_store(self, exc: StoreError, attempt: int, ends: int) -> None:
        delay = backoff_delay(attempt, base=0.2, cap=RETRY_CAP_SECONDS)
        self.refused = f"{type(exc).__name__}: {exc}"
        self._errors.error(
            "writer.store_refused", exc, level=logging.WARNING, ends=ends, retry_in_seconds=delay
        )
        await self._clock.sleep(delay)

    def _taken(self, attempt: int, ends: int) -> None:
        if self.refused is not None:
            log_event(log, "writer.store_took_ends", ends=ends, after_attempts=attempt)
        self.refused = None

    async def _release_locks(self, batch: list[Ended]) -> None:
        """One call per lock token (a dispatcher batch shares one); the locks expire anyway,
        so a failure here never fails a finished run."""
        keys_by_token: defaultdict[str, list[str]] = defaultdict(list)
        for ended in batch:
            keys_by_token[ended.lock_token].append(ended.run.lock_key)
        for token, keys in keys_by_token.items():
            try:
                await self._lock.release_many(keys, token)
            except Exception as exc:
                log_event(log, "lock.release_failed", level=logging.WARNING, error=str(exc))
