"""The dispatcher and its worker pool.

A tick: reap expired leases -> fetch due jobs, most urgent first, no more than the pool can take
-> lock them (one batch) -> claim them (one compare-and-set batch) -> record their executions as
running (one batch) -> submit them to the workers through a bounded queue, which blocks when full
(backpressure: the dispatcher falls behind the clock instead of piling up work). A full batch
means more is due, so the next tick starts at once; otherwise the dispatcher sleeps until the
next job falls due or the tick interval passes, whichever is sooner, unless a worker frees up or
runs' ends are written (their jobs can be claimed again) first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickd.scheduler.backlog import BacklogGauges
from tickd.scheduler.backoff import backoff_delay
from tickd.scheduler.claiming import Claimer
from tickd.scheduler.config import Settings
from tickd.scheduler.due import RECORDED_AHEAD_SECONDS, DueRun, one_per_job
from tickd.scheduler.events import event_source
from tickd.scheduler.handler_limits import HandlerLimits
from tickd.scheduler.heartbeat import Heartbeat
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import ExecutionError, Status, new_id
from tickd.scheduler.observers import Observers, RunObserver
from tickd.scheduler.observers.logs import LogObserver
from tickd.scheduler.observers.metrics import MetricsObserver
from tickd.scheduler.pool import WorkerPool
from tickd.scheduler.ports import LockUnavailable, Ports, StoreError
from tickd.scheduler.recording import Recorder
from tickd.scheduler.registry import HandlerRegistry
from tickd.scheduler.relay import Relay
from tickd.scheduler.runner import Outcome, Runner, Task
from tickd.scheduler.timers import Timers
from tickd.scheduler.watchdog import LoopWatchdog

log = logging.getLogger("tickd.engine")

# The wall clock moving this much more or less than real time between two ticks is a jump.
CLOCK_JUMP_TOLERANCE_SECONDS = 1.0


# Runs fired at one instant are recorded this many batches to an insert (the first batch
# alone, so that it starts at once): few hand-overs to the store's thread, none too long.
FIRED_BATCHES_AN_INSERT = 10


@dataclass(frozen=True, kw_only=True)
class Tick:
    fetched: int  # due jobs read
    claimed: int  # of those, locked and claimed by this instance: queued, armed or skipped
    full: bool  # the fetch hit its limit: more may be due, so look again at once
    fired: int = 0  # armed runs whose time came, now queued


class Engine:
    def __init__(
        self,
        *,
        settings: Settings,
        ports: Ports,
        registry: HandlerRegistry,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        resources: Mapping[str, object] | None = None,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self.settings = settings
        self.ports = ports
        self.registry = registry
        self.metrics = metrics or Metrics()
        self.rng = rng or random.Random()
        # A run's life becomes metrics and logs here, and whatever else is listening. Its events
        # are written by the store with each execution (the outbox) and published by the relay.
        self.observer = Observers(
            [
                MetricsObserver(self.metrics),
                LogObserver(),
                *observers,
            ]
        )
        self.runner = Runner(
            settings=settings,
            ports=ports,
            registry=registry,
            observer=self.observer,
            rng=self.rng,
            resources=resources or {},
        )
        self.relay = Relay(
            ports.store, ports.events, clock=ports.clock, metrics=self.metrics, lock=ports.lock
        )
        # Each handler's concurrency limit, as the handler declares it or the settings override.
        self.limits = HandlerLimits(settings, registry)
        self.claimer = Claimer(settings=settings, ports=ports, metrics=self.metrics)
        self.recorder = Recorder(
            settings=settings, ports=ports, observer=self.observer, runner=self.runner
        )
        # The end of a run handed over is written later: its job can be claimed from then on.
        self._ends_written = self.runner.finisher.written
        self.pool = WorkerPool(
            self.runner,
            workers=settings.workers,
            queue_size=settings.effective_queue_size,
            metrics=self.metrics,
        )
        self._unsubmitted = 0  # runs fired, not yet queued for a worker
        self.runner.finisher.defer_to(self._starts_waiting)  # runs start before others' ends
        # Started beside the dispatcher by the daemon (tickd/app.py).
        self.watchdog = LoopWatchdog(
            threshold_seconds=settings.loop_stall_threshold_seconds,
            metrics=self.metrics,
            running_jobs=self.pool.running_jobs,
        )
        # Claimed runs waiting for their time: (the run, its lock token).
        self.timers: Timers[tuple[DueRun, str]] = Timers()
        # Runs recorded ahead of their time, released to the workers at it.
        self.staged: Timers[Task] = Timers()
        self._backlogged = False  # the last fetch was full: more was due than it took
        # More was due now than the pool had room for: fetch only what is due until caught up.
        self._behind = False
        # On the monotonic clock, as a wall clock stepped back would put the next reap off.
        self._next_reap: float | None = None  # None: at the next tick
        # Jobs whose runs this instance gave back after a crash (reaped): fetched before anything
        # else due, for they have waited longest.
        self._given_back: set[str] = set()
        self.heartbeat = Heartbeat(
            ports.store,
            ports.clock,
            settings.instance_id,
            lock=ports.lock,
            every_seconds=settings.heartbeat_seconds,
            lapse_seconds=settings.heartbeat_timeout_seconds,
        )
        self.wake = asyncio.Event()  # set to make the dispatcher look again at once
        self.healthy = True
        self.last_error: str | None = None
        self._started = False
        self._last_seen: tuple[datetime, float] | None = None  # wall and real time, last tick
        self._handed_to_shards = 0  # occurrences started this tick: their shards are due now

    def start(self) -> None:
        if not self._started:
            self.pool.start()
            self._started = True

    # -- one tick -------------------------------------------------------------------------------

    async def tick(self) -> Tick:
        """One dispatcher pass: fire the armed runs whose time came, then claim what falls due
        before the lookahead horizon. The due query is its only read of the jobs."""
        now = self.ports.clock.now()
        await self._follow_clock_jump(now)
        self._handed_to_shards = 0
        fired = await self._fire(now)  # before the reaper's store call: on time to the ms
        if fired:
            await self._let_fired_start()
        await self._reap(now, busy=fired > 0)
        start_room = self._free_slots()
        limit = self._fetch_limit()
        if limit == 0:
            return Tick(fetched=0, claimed=0, full=True, fired=fired)
        looking_ahead = not self._behind
        fetched = await self._due(now, limit, looking_ahead=looking_ahead)
        full = len(fetched) == limit
        if not looking_ahead:
            self._behind = False  # caught up once a fetch of what is due has room to spare
        runs = self._within_start_room(one_per_job(fetched), now, start_room, full=full)
        claimed = await self._dispatch(runs, now) if runs else 0
        self._backlogged = full
        full = full or self._handed_to_shards > 0  # their shards are due at once
        # A full fetch of which nothing could be taken (every run held elsewhere, or over its
        # handler's limit) is no reason to look again at once: that would spin on the store.
        return Tick(fetched=len(fetched), claimed=claimed, full=full and claimed > 0, fired=fired)

    def _starved_before(self, now: datetime) -> datetime | None:
        """Only under a backlog (the last fetch was full) can a job starve: then the jobs due
        for longer than the bound go first. Otherwise everything due is taken anyway."""
        if not self._backlogged:
            return None
        return now - timedelta(seconds=self.settings.starvation_bound_seconds)

    def _free_slots(self) -> int:
        """Room in the pool, less what is armed or staged: they join the queue at their time."""
        return max(0, self.pool.free_slots() - len(self.timers) - len(self.staged))

    def _fetch_room(self) -> int:
        """What fetches may take: room in the pool for runs due now, and while nothing due
        now waits for that room, room among the timers for runs falling due later. Runs armed
        ahead need no worker until they fire, so a second's worth of jobs due at the same
        instant is claimed before that instant, not in batches of the pool's room after it
        (1,000 jobs every second: the last started hundreds of milliseconds late)."""
        arm_room = 0
        if not self._behind and not self._fired_runs_wait():
            arm_room = max(0, self.settings.lookahead_limit - len(self.timers))
        return self._free_slots() + arm_room

    def _fired_runs_wait(self) -> bool:
        """Armed runs are due to be recorded and wait for room in the pool: they go first,
        before claims ahead, which on a slow store take the dispatcher seconds (the workers
        would idle)."""
        next_at = self.timers.next_at()
        return next_at is not None and next_at <= self.ports.clock.now()

    def _fetch_limit(self) -> int:
        return min(self.settings.batch_size, self._fetch_room())

    def _within_start_room(
        self, runs: list[DueRun], now: datetime, room: int, *, full: bool
    ) -> list[DueRun]:
        """The runs due now that the pool has room for, and every run falling due later (the
        fetch's limit bounds those). Runs due now beyond the room are left unclaimed: the
        dispatcher is behind, and fetches only what is due until it has caught up. It is behind
        too when a full fetch's runs due now took all the room: more are likely due."""
        kept: list[DueRun] = []
        due_now = 0
        for run in runs:
            if run.starts_at(now) > now:
                kept.append(run)
            elif due_now < room:
                kept.append(run)
                due_now += 1
            else:
                self._behind = True
        if full and due_now and due_now == room:
            self._behind = True
        return kept

    async def _due(self, now: datetime, limit: int, *, looking_ahead: bool) -> list[DueRun]:
        """Run requests (trigger, retry, backfill) first: someone asked for them explicitly.
        Then the jobs falling due before the lookahead horizon (or due now, when behind), most
        urgent first."""
        store = self.ports.store
        saturated = self.limits.saturated(self._busy())
        requested = await store.due_run_requests(
            now, limit, exclude_handlers=saturated, instance=self.settings.instance_id
        )
        runs = [DueRun(job, request) for request, job in requested]
        if len(runs) < limit:
            ahead = self.settings.lookahead_seconds if looking_ahead else 0.0
            horizon = now + timedelta(seconds=ahead)
            room = limit - len(runs)
            first = sorted(self._given_back)[:room]
            jobs = await store.due_jobs(
                horizon,
                room,
                exclude_handlers=saturated,
                starved_before=self._starved_before(now),
                first=first,
            )
            # Those due are fetched (the fetch has room for every one asked); the others are not
            # due any more (run elsewhere, paused, deleted): either way, done with.
            self._given_back.difference_update(first)
            runs += [DueRun(job) for job in jobs]
        return runs

    async def _follow_clock_jump(self, now: datetime) -> None:
        """A wall clock stepped forward (NTP, a restored VM) makes the leases of this instance's
        own runs look expired, though no real time passed: they are renewed before the reaper
        sees them, or it would abandon them and run their occurrences again. A step back needs
        nothing: runs wait for their wall time, as every job does."""
        real = self.ports.clock.monotonic()
        if self._last_seen is not None:
            last_now, last_real = self._last_seen
            jump = (now - last_now).total_seconds() - (real - last_real)
            if abs(jump) >= CLOCK_JUMP_TOLERANCE_SECONDS:
                log_event(log, "clock.jumped", level=logging.WARNING, seconds=round(jump, 3))
                if jump > 0:
                    await self._renew_own_leases(now)
        self._last_seen = (now, real)  # not before the renewal: a failed one is tried again

    async def _renew_own_leases(self, now: datetime) -> None:
        tasks = [*self.pool.in_flight(), *self.staged.pending(), *self.runner.ending()]
        runs = [DueRun(task.job, task.request) for task in tasks]
        runs += [run for run, _ in self.timers.pending()]
        margin = timedelta(seconds=self.settings.lease_margin_seconds)
        for run in runs:
            until = now + timedelta(seconds=run.job.timeout_seconds) + margin
            if run.shard_entry is not None:
                await self.ports.store.renew_shard_lease(run.shard_entry, run.token, until, now)
            elif run.job.lease is not None:
                await self.ports.store.renew_lease(run.job.id, run.job.lease.token, until)

    async def _reap(self, now: datetime, *, busy: bool = False) -> None:
        """Expired leases are rare (an instance died, a run overran its lease): looked for once
        a tick interval, not in every batch of a busy dispatcher, or at once when asked; and
        not while runs fired at their time start (`busy`), unless a tick overdue: the store's
        thread is theirs then."""
        real = self.ports.clock.monotonic()
        patience = self.settings.tick_seconds if busy else 0.0
        if self._next_reap is not None and real < self._next_reap + patience:
            return
        self._next_reap = real + self.settings.tick_seconds
        source = event_source(self.settings, self.ports)
        # Only the leases this instance may judge by its own clock: its own, those of the dead
        # (ended by a heartbeat) and those of owners that never beat (see the Store contract).
        reaped = await self.ports.store.reap_expired_leases(
            now, instance=self.settings.instance_id, event_source=source
        )
        for execution in reaped:
            self.observer.reaped(execution)
            if execution.shards == 1:  # a shard is due again as a request, which goes first
                self._given_back.add(execution.job_id)

    async def _dispatch(self, runs: list[DueRun], now: datetime) -> int:
        """The one path of every run, scheduled or requested: handler limits, then lock, claim
        (fenced), release what was lost, record, submit. A requested run goes through the same
        lock and claim as a scheduled one, so the two never overlap; it leaves the schedule as
        it is."""
        token = new_id()
        allowed = self.limits.within(runs, self._busy())
        won = await self.claimer.claim(allowed, now, token)
        later = [run for run in won if run.starts_at(now) > now]
        for run in later:
            self.timers.arm(run.records_at(now), run.job.handler, (run, token))
        due_now = [run for run in won if run.starts_at(now) <= now]
        try:
            recorded = await self._record([(run, token) for run in due_now], now)
        except StoreError:
            # Not recorded (a full disk, say), so not started: given back at once, they run as
            # soon as the store takes writes again, not when their leases would have expired.
            await self.claimer.give_back([(run, token) for run in due_now], "record_failed")
            raise
        await self._submit(recorded)
        return len(won)

    async def _fire(self, now: datetime) -> int:
        """Record the armed runs whose time to be recorded has come (DueRun.records_at), and
        release to the workers the runs whose time has come; returns how many were released.
        Recorded ahead, runs due at one instant wait at it for their starts only."""
        fired = self.timers.due(now, limit=self._fire_room())
        try:
            released = await self._record_in_parts(fired, now) if fired else 0
            # Recording took time: what fell due meanwhile goes too.
            due = self.staged.due(self.ports.clock.now())
            self._unsubmitted += len(due)
            await self._enqueue(due)
            return released + len(due)
        finally:
            self._unsubmitted = 0  # the fired runs are queued, staged, or armed again

    async def _record_in_parts(self, fired: list[tuple[DueRun, str]], now: datetime) -> int:
        """Stage the runs, releasing those already due (fired late, for want of room) as each
        part is recorded: the first batch alone, then ten batches to an insert, so that five
        thousand do not all wait for one large insert. Each part's released runs start before
        the next part's records are made (on the loop's thread, on SQLite). Returns how many
        were released."""
        # Those due now wait for their starts from now on, and ends wait for them.
        self._unsubmitted += sum(1 for run, _ in fired if run.starts_at(now) <= now)
        released = 0
        size = self.settings.batch_size
        starts = [0, *range(size, len(fired), FIRED_BATCHES_AN_INSERT * size)]
        ends = [*starts[1:], len(fired)]
        for begin, end in zip(starts, ends, strict=True):
            tasks = await self._record_fired(fired[begin:end], now, fired[begin:])
            self.metrics.batch_size.observe(len(tasks))
            for task in tasks:
                self.staged.arm(task.execution.started_at or now, task.job.handler, task)
            due = self.staged.due(now)
            released += len(due)
            await self._enqueue(due)
            if due and end < len(fired):
                await self._let_fired_start()
        return released

    async def _let_fired_start(self) -> None:
        """The runs released at their time start before this tick's store calls (the reaper's,
        the claims ahead), each a transaction on the loop that they would wait behind; for
        RECORDED_AHEAD_SECONDS at most, so that handlers holding every worker do not hold up
        the claims."""
        if self.pool.fired_waiting():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.pool.fired_started.wait(), RECORDED_AHEAD_SECONDS)

    def _fire_room(self) -> int:
        """How many armed runs may be recorded: what the pool has room for, and what its
        workers will have started within RECORDED_AHEAD_SECONDS at the pace they keep, less
        what is staged already. A fired run is recorded `running`; one that waited seconds
        for a worker would say so for seconds, and a crash would find it in flight. The others
        stay armed, due, and fire as room frees."""
        room = self.pool.free_slots() + self.pool.starts_within(RECORDED_AHEAD_SECONDS)
        return max(0, room - len(self.staged))

    async def _record_fired(
        self, held: list[tuple[DueRun, str]], now: datetime, unrecorded: list[tuple[DueRun, str]]
    ) -> list[Task]:
        """Not recorded, so not started: the runs from this batch on are armed again, to
        fire once the store answers."""
        if not held:
            return []
        try:
            return await self._record(held, now, fired=True)
        except StoreError:
            for run, token in unrecorded:
                self.timers.arm(run.records_at(now), run.job.handler, (run, token))
            raise

    async def _record(
        self, held: list[tuple[DueRun, str]], now: datetime, *, fired: bool = False
    ) -> list[Task]:
        recorded = await self.recorder.record(held, now, fired=fired)
        self._handed_to_shards += recorded.sharded
        return recorded.tasks

    async def _submit(self, tasks: list[Task]) -> None:
        self.metrics.batch_size.observe(len(tasks))
        await self._enqueue(tasks)

    async def _enqueue(self, tasks: list[Task]) -> None:
        for task in tasks:
            if task.fired:
                self.pool.submit_fired(task)
            else:
                await self.pool.submit(task)
            self._unsubmitted = max(0, self._unsubmitted - 1)

    def _starts_waiting(self) -> int:
        """Runs fired at their time that no worker has started: not yet queued, or queued.
        (Not the runs of a backlog: their ends are written at the store's pace, in batches.)"""
        return self._unsubmitted + self.pool.fired_waiting()

    def _busy(self) -> Counter[str]:
        """Runs of each handler queued, running, staged or armed."""
        return self.pool.inflight + self.staged.by_handler + self.timers.by_handler

    # -- running ----------------------------------------------------------------------------------

    async def drain(self, *, max_ticks: int = 10_000) -> None:
        """Run until nothing is due and nothing is running, then return (tests, one-shot runs).
        Runs armed for a later time stay armed: move the clock on and drain again."""
        self.start()
        for _ in range(max_ticks):
            await self.pool.join()  # what runs now may free a handler's limit for the next tick
            tick = await self.tick()
            if tick.claimed == 0 and tick.fired == 0:
                await self.pool.join()
                return
        raise RuntimeError(f"still busy after {max_ticks} ticks")

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set, then shut down gracefully."""
        self.start()
        beating = asyncio.create_task(self._beat_until_cancelled())
        try:
            await self._dispatch_until(stop)
            await self.shutdown()
        finally:
            # Beating until the last run has ended (through the shutdown's grace period), or
            # another instance would take this one for dead and run its runs again.
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    async def _beat_until_cancelled(self) -> None:
        """The heartbeat, a task of its own: a dispatcher that waits (for room in a full pool,
        for a slow store) must not look dead to the other instances while its runs go on."""
        failing = False
        while True:
            try:
                if await self.heartbeat.beat_if_due():
                    self._next_reap = None  # an instance died: reap its runs, take them over
                    self.wake.set()
                failing = False
            except (StoreError, LockUnavailable, OSError) as exc:
                if not failing:  # once an outage: the dispatcher reports the store's state
                    log_event(log, "heartbeat.failed", level=logging.WARNING, error=str(exc))
                failing = True
            except Exception:  # a bug of ours must not stop the beats for good
                log.exception("heartbeat.unexpected_error")
            await asyncio.sleep(min(self.settings.tick_seconds, self.settings.heartbeat_seconds))

    async def _dispatch_until(self, stop: asyncio.Event) -> None:
        failures = 0
        gauges = self.backlog_gauges()
        while not stop.is_set():
            try:
                # Forgotten before the tick looks, not before the sleep: a run that ends, or an
                # end written, while the tick is under way must still wake the sleep after it.
                self._forget_wakeups()
                tick = await self.tick()
                failures = self._recovered(failures)
                await gauges.refresh_if_due(busy=tick.fired > 0)
                if not tick.full:
                    await self._sleep(self._until_next_timer(), stop, *self._idle_wakeups())
                elif self._fetch_room() < self.pool.worthwhile_batch:
                    # More is due than the pool (or the timers) has room for: a batch of the few
                    # slots just freed would cost the same round trips as a full one; wait.
                    await self._sleep(
                        self._until_next_timer(), stop, self.wake, self.pool.room_freed
                    )
            except (StoreError, LockUnavailable, OSError) as exc:
                failures += 1
                await self._back_off(self._backing_off(exc, failures), stop)
            except Exception as exc:  # a bug of ours: say so loudly, but keep dispatching
                log.exception("dispatcher.unexpected_error")
                failures += 1
                await self._back_off(self._backing_off(exc, failures), stop)

    def _forget_wakeups(self) -> None:
        for event in (self.wake, self.pool.slot_freed, self.pool.room_freed, self._ends_written):
            event.clear()

    def _idle_wakeups(self) -> tuple[asyncio.Event, ...]:
        """What makes an idle dispatcher look again before its timer: a wake-up call, a freed
        worker (room for what is due), and ends written. A worker hands its run's end over and
        is free before the end is written, while the job is still leased; only once the end is
        written can the job's next occurrence be claimed, so that must wake the dispatcher too,
        or a job due every second is claimed a tick late, again and again, and falls behind."""
        if self._fired_runs_wait():  # they fire as room worth a batch frees, not slot by slot
            return self.wake, self.pool.room_freed, self._ends_written
        return self.wake, self.pool.slot_freed, self._ends_written

    async def _back_off(self, seconds: float, stop: asyncio.Event) -> None:
        """After a failed tick: only what happens from now on cuts the backoff short."""
        self._forget_wakeups()
        await self._sleep(seconds, stop, self.wake, self.pool.slot_freed)

    def _recovered(self, failures: int) -> int:
        if failures:
            log_event(log, "dispatcher.recovered", after_failures=failures)
        self.healthy, self.last_error = True, None
        return 0

    def _backing_off(self, exc: Exception, failures: int) -> float:
        # Never longer than half the heartbeat's timeout: a store back is noticed in seconds.
        cap = min(30.0, self.settings.heartbeat_timeout_seconds / 2)
        delay = backoff_delay(failures, base=self.settings.tick_seconds, cap=cap)
        self.healthy, self.last_error = False, f"{type(exc).__name__}: {exc}"
        self.metrics.store_errors.labels("tick").inc()
        log_event(
            log,
            "dispatcher.backing_off",
            level=logging.ERROR,
            error=self.last_error,
            retry_in_seconds=delay,
        )
        return delay

    def _until_next_timer(self) -> float:
        """Until the next staged run's time, the next armed run's recording, or a tick:
        whatever falls due before the lookahead horizon is armed already, so no query is
        needed to know when to wake."""
        now = self.ports.clock.now()
        waits = [self.settings.tick_seconds]
        staged_at = self.staged.next_at()
        if staged_at is not None:
            waits.append((staged_at - now).total_seconds())
        armed_at = self.timers.next_at()
        if armed_at is not None:
            wait = (armed_at - now).total_seconds()
            # Due, and waiting for room worth a batch: room freed wakes it.
            if wait > 0 or self._fire_room() >= self.pool.worthwhile_batch:
                waits.append(wait)
        return max(0.0, min(waits))

    def backlog_gauges(self) -> BacklogGauges:
        return BacklogGauges(
            self.ports.store,
            self.ports.clock,
            self.metrics,
            every_seconds=self.settings.backlog_refresh_seconds,
        )

    async def _sleep(self, seconds: float, stop: asyncio.Event, *wakeups: asyncio.Event) -> None:
        """Until `seconds` pass, `stop`, or one of `wakeups` is set (the caller clears them)."""
        waiters = [asyncio.ensure_future(e.wait()) for e in (stop, *wakeups)]
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    async def _give_back_armed(self) -> None:
        """Runs claimed ahead that never started: their leases and locks go back, and nothing
        is recorded, since nothing happened (a store that is down lets the leases expire)."""
        await self.claimer.give_back(self.timers.take_all(), "shutdown")

    async def shutdown(self) -> None:
        """Stop taking work; let running executions finish within the grace period; cancel and
        record the rest as abandoned, giving their occurrences back so they run after a restart."""
        await self._give_back_armed()
        for task in [*self.staged.take_all(), *self.pool.take_queued()]:
            abandoned = Outcome(
                status=Status.ABANDONED,
                error=ExecutionError(type="Shutdown", message="not started"),
            )
            await self.runner.finish(task, abandoned, self.ports.clock.now())
        await self.pool.stop(self.settings.shutdown_grace_seconds)
        await self.runner.close()
