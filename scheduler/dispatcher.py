"""The dispatcher: it builds the run path's stages once, each handed what it uses (the store's
roles, the run path's lock, the clock, the ledger, the next stage), and ticks. A tick fires the
armed runs whose time came (run/arm.py), reaps expired leases once a heartbeat (maintenance/),
fetches what there is room for (run/fetch.py), claims it (run/claim.py), arms what is due later,
records and queues what is due now (run/record.py, run/pool.py: it blocks when full, and the
dispatcher falls behind the clock instead of piling up work). The workers hand each run on
(run/execute.py -> run/end.py -> run/write.py); the ledger (run/ledger.py) holds every run from its
claim until its end is written. A full batch means more is due: the next tick starts at once;
otherwise it sleeps until the next armed run, the tick, a freed worker or ends written."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.events import event_source
from tickd.scheduler.lock.lease import run_path_lock
from tickd.scheduler.logs import log_event
from tickd.scheduler.maintenance.backlog import BacklogGauges
from tickd.scheduler.maintenance.clock_steps import ClockSteps
from tickd.scheduler.maintenance.heartbeat import instance_heartbeat
from tickd.scheduler.maintenance.reaper import Leases
from tickd.scheduler.maintenance.relay import Relay
from tickd.scheduler.maintenance.watchdog import LoopWatchdog
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import ExecutionError, Status, new_id
from tickd.scheduler.observers import Observers, RunObserver
from tickd.scheduler.observers.logs import LogObserver
from tickd.scheduler.observers.metrics import MetricsObserver
from tickd.scheduler.plugin.contexts import HandlerContexts
from tickd.scheduler.plugin.outcomes import Outcome
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import LockUnavailable, Ports, StoreError
from tickd.scheduler.run.arm import Arming
from tickd.scheduler.run.claim import Claimer
from tickd.scheduler.run.end import Ender
from tickd.scheduler.run.execute import Executor
from tickd.scheduler.run.fetch import Fetcher
from tickd.scheduler.run.ledger import DueRun, Ledger, Task
from tickd.scheduler.run.pool import WorkerPool
from tickd.scheduler.run.record import Recorder
from tickd.scheduler.run.write import Writer
from tickd.scheduler.schedule.backoff import backoff_delay

log = logging.getLogger("tickd.engine")


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
        # A run's life becomes metrics and logs; its events go through the outbox and the relay.
        self.observer = Observers([MetricsObserver(self.metrics), LogObserver(), *observers])
        # The runs this instance holds, from claim to written end; the in-flight gauge reads it.
        self.ledger = Ledger()
        self.metrics.runs_in_flight.read_from(self.ledger.busy_domains)
        source = event_source(settings, ports)
        store, clock, lock = ports.store, ports.clock, run_path_lock(ports.store, ports.lock)
        # The run path, built from its last stage to its first: each takes the next.
        self.writer = Writer(
            store=store,
            lock=lock,
            clock=clock,
            ledger=self.ledger,
            observer=self.observer,
            batch_size=settings.batch_size,
            linger_seconds=settings.finish_linger_seconds,
            event_source=source,
        )
        self.ender = Ender(
            settings=settings,
            store=store,
            requests=store,
            clock=clock,
            ledger=self.ledger,
            writer=self.writer,
            observer=self.observer,
            rng=self.rng,
        )
        self.executor = Executor(
            settings=settings,
            store=store,
            cancels=store,
            lock=lock,
            clock=clock,
            registry=registry,
            contexts=HandlerContexts(
                settings=settings, clock=clock, mailer=ports.mailer, resources=resources or {}
            ),
            ender=self.ender,
            observer=self.observer,
        )
        self.pool = WorkerPool(
            executor=self.executor,
            ledger=self.ledger,
            workers=settings.workers,
            queue_size=settings.effective_queue_size,
            metrics=self.metrics,
            clock=clock,
        )
        self.recorder = Recorder(
            settings=settings,
            store=store,
            lock=lock,
            clock=clock,
            ledger=self.ledger,
            ender=self.ender,
            observer=self.observer,
            event_source=source,
        )
        # Claimed runs waiting for their time, and those recorded ahead of it.
        self.arming = Arming(
            settings=settings,
            clock=clock,
            ledger=self.ledger,
            recorder=self.recorder,
            pool=self.pool,
            metrics=self.metrics,
        )
        self.claimer = Claimer(
            settings=settings,
            store=store,
            requests=store,
            lock=lock,
            clock=clock,
            metrics=self.metrics,
            event_source=source,
        )
        self.heartbeat = instance_heartbeat(settings, ports, lock, self.metrics, self.ledger)
        self.fetcher = Fetcher(
            settings=settings,
            store=store,
            domains=store,
            ledger=self.ledger,
            registry=registry,
            clock=clock,
            partitions=self.heartbeat.partitions,
        )
        self.relay = Relay(store, ports.events, clock=clock, metrics=self.metrics, lock=ports.lock)
        # Started beside the dispatcher by the daemon (tickd/app.py).
        self.watchdog = LoopWatchdog(
            threshold_seconds=settings.loop_stall_threshold_seconds,
            metrics=self.metrics,
            running_jobs=self.ledger.running_jobs,
        )
        self.leases = Leases(
            settings=settings,
            store=store,
            renewals=store,
            clock=clock,
            observer=self.observer,
            event_source=source,
        )
        self.clock_steps = ClockSteps(store=store, claimer=self.claimer, metrics=self.metrics)
        self.wake = asyncio.Event()  # set to make the dispatcher look again at once
        self.healthy = True
        self.last_error: str | None = None
        self._started = False
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
        if self.heartbeat.lapsed.is_set():  # an instance died: reap its runs, take them over
            self.heartbeat.lapsed.clear()
            self.leases.reap_soon()
        jump = await self.leases.follow_clock_jump(now, self.ledger)
        if jump < 0:  # every next run computed before lies that far ahead: computed again
            await self.clock_steps.stepped_back(now, -jump, self.arming.take_armed())
        fired = await self.arming.fire(now)  # before the reaper's store call: on time to the ms
        self._handed_to_shards = fired.sharded
        if fired.released:
            await self.arming.let_fired_start()
        await self.executor.stop_cancelled(self.ledger.executions_on_workers())
        await self.ender.keep_leases(now)  # before the reaper takes them for expired
        self.fetcher.give_back(await self.leases.reap_if_due(now, busy=fired.released > 0))
        self.ender.raise_if_ends_refused()  # a run claimed now would join the wait
        token = new_id()
        async with self.heartbeat.partitions.claiming:  # none freed before these claims land
            fetched = await self.fetcher.fetch(now, armed_due=self.arming.armed_due())
            if fetched is None:  # no room
                return Tick(fetched=0, claimed=0, full=True, fired=fired.released)
            await self.claimer.let_go(fetched.left)
            won = await self.claimer.claim(fetched.runs, now, token) if fetched.runs else []
        claimed = await self._dispatch(won, token, now) if won else 0
        full = fetched.full or self._handed_to_shards > 0  # their shards are due at once
        # A full fetch of which nothing could be taken (every run held elsewhere, or over its
        # handler's limit) is no reason to look again at once: that would spin on the store.
        return Tick(
            fetched=fetched.read, claimed=claimed, full=full and claimed > 0, fired=fired.released
        )

    async def _dispatch(self, won: list[DueRun], token: str, now: datetime) -> int:
        """Every run locked and claimed (fenced), scheduled or requested (the two never overlap;
        a requested one leaves the schedule as it is), armed or recorded and submitted."""
        for run in won:
            if run.starts_at(now) > now:
                self.arming.arm(run, token, now)
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

    async def _record(self, held: list[tuple[DueRun, str]], now: datetime) -> list[Task]:
        recorded = await self.recorder.record(held, now)
        self._handed_to_shards += recorded.sharded
        return recorded.tasks

    async def _submit(self, tasks: list[Task]) -> None:
        self.metrics.batch_size.observe(len(tasks))
        for task in tasks:
            await self.pool.submit(task)

    # -- running ----------------------------------------------------------------------------------

    async def drain(self, *, max_ticks: int = 10_000) -> None:
        """Run until nothing is due and nothing is running, then return (tests, one-shot runs).
        Runs armed for a later time stay armed: move the clock on and drain again."""
        self.start()
        for _ in range(max_ticks):
            await self.settled()  # what runs now may free a handler's limit for the next tick
            tick = await self.tick()
            if tick.claimed == 0 and tick.fired == 0:
                await self.settled()
                return
        raise RuntimeError(f"still busy after {max_ticks} ticks")

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set, then shut down gracefully."""
        self.start()
        # Beating until the last run has ended (through the shutdown's grace period), or
        # another instance would take this one for dead and run its runs again.
        stop_beating = asyncio.Event()
        pause = min(self.settings.tick_seconds, self.settings.heartbeat_seconds)
        beating = asyncio.create_task(self.heartbeat.run(stop_beating, pause_seconds=pause))
        try:
            await self._dispatch_until(stop)
            await self.shutdown()
        finally:
            stop_beating.set()
            await beating

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
                elif self._room() < self.pool.worthwhile_batch:
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
        for event in (self.wake, self.pool.slot_freed, self.pool.room_freed, self.writer.written):
            event.clear()

    def _idle_wakeups(self) -> tuple[asyncio.Event, ...]:
        """What makes an idle dispatcher look again before its timer: a wake-up call, a freed
        worker (room for what is due), and ends written. A worker hands its run's end over and
        is free before the end is written, while the job is still leased; only once the end is
        written can the job's next occurrence be claimed, so that must wake the dispatcher too,
        or a job due every second is claimed a tick late, again and again, and falls behind."""
        if self.arming.armed_due():  # they fire as room worth a batch frees, not slot by slot
            return self.wake, self.pool.room_freed, self.writer.written
        return self.wake, self.pool.slot_freed, self.writer.written

    async def settled(self) -> None:
        """Until every run queued has run and its end is written."""
        await self.pool.join()
        await self.writer.settled()

    def _room(self) -> int:
        return self.fetcher.room(armed_due=self.arming.armed_due())

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
        timer = self.arming.until_next(now, worthwhile=self.pool.worthwhile_batch)
        tick = self.settings.tick_seconds
        return max(0.0, tick if timer is None else min(tick, timer))

    def backlog_gauges(self) -> BacklogGauges:
        every, held = self.settings.backlog_refresh_seconds, self.heartbeat.partitions
        store, clock = self.ports.store, self.ports.clock
        return BacklogGauges(store, clock, self.metrics, every_seconds=every, partitions=held)

    async def _sleep(self, seconds: float, stop: asyncio.Event, *wakeups: asyncio.Event) -> None:
        """Until `seconds` pass, `stop`, another instance's lapse (its runs are to be taken
        over), or one of `wakeups` is set (the caller clears them)."""
        lapsed = self.heartbeat.lapsed
        waiters = [asyncio.ensure_future(e.wait()) for e in (stop, lapsed, *wakeups)]
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    async def _give_back_armed(self) -> None:
        """Runs claimed ahead that never started: their leases and locks go back, and nothing
        is recorded, since nothing happened (a store that is down lets the leases expire)."""
        await self.claimer.give_back(self.arming.take_armed(), "shutdown")

    async def shutdown(self) -> None:
        """Stop taking work; let running executions finish within the grace period; cancel and
        record the rest as abandoned, giving their occurrences back so they run after a restart."""
        self.writer.closing()  # a store refusing the ends must not hold the stop up
        await self._give_back_armed()
        for task in [*self.arming.take_staged(), *self.pool.take_queued()]:
            abandoned = Outcome(
                status=Status.ABANDONED,
                error=ExecutionError(type="Shutdown", message="not started"),
            )
            await self.ender.end_now(task, abandoned, self.ports.clock.now())
        await self.pool.stop(self.settings.shutdown_grace_seconds)
        await self.writer.close()
        await self.executor.close()
        self.observer.stopped()
