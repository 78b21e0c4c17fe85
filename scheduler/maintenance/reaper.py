"""The leases a dispatcher looks after besides its claims: expired ones reaped, so that their
occurrences run again within their jobs' retries (past them, each is a dead letter), and its own
renewed when the wall clock steps forward."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.logs import log_event
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import CompletionStore, DispatchStore
from tickd.scheduler.run.ledger import DueRun, Ledger

log = logging.getLogger("tickd.engine")

# The wall clock moving this much more or less than real time between two ticks is a jump.
CLOCK_JUMP_TOLERANCE_SECONDS = 1.0


class Leases:
    def __init__(
        self,
        *,
        settings: Settings,
        store: DispatchStore,
        renewals: CompletionStore,
        clock: Clock,
        observer: RunObserver,
        event_source: str | None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._renewals = renewals  # this instance's own leases, across a clock stepped forward
        self._clock = clock
        self._observer = observer
        self._event_source = event_source
        # On the monotonic clock, as a wall clock stepped back would put the next reap off.
        self._next_reap: float | None = None  # None: at the next tick
        self._last_seen: tuple[datetime, float] | None = None  # wall and real time, last tick

    def reap_soon(self) -> None:
        """Look for expired leases at the next tick (an instance died: take its runs over)."""
        self._next_reap = None

    async def reap_if_due(self, now: datetime, *, busy: bool) -> list[str]:
        """Give back the runs whose leases expired; returns the ids of the jobs whose scheduled
        occurrences are due again. A run abandoned past its job's retries (its worker or
        instance died each time) is not given back: the store ends it as a dead letter.
        Expired leases are rare (an instance died, a run overran its lease): looked for once a
        heartbeat (or a tick, if longer), not at every tick of each instance, or at once when
        asked, as when the heartbeat ends a dead instance's leases; and not while runs fired at
        their time start (`busy`), unless a tick overdue: the store's thread is theirs then."""
        real = self._clock.monotonic()
        patience = self._settings.tick_seconds if busy else 0.0
        if self._next_reap is not None and real < self._next_reap + patience:
            return []
        every = max(self._settings.tick_seconds, self._settings.heartbeat_seconds)
        self._next_reap = real + every
        # Only the leases this instance may judge by its own clock: its own, those of the dead
        # (ended by a heartbeat) and those of owners that never beat (see the Store contract).
        reaped = await self._store.reap_expired_leases(
            now, instance=self._settings.instance_id, event_source=self._event_source
        )
        for execution in reaped:
            self._observer.reaped(execution)
            if execution.dead_letter is not None:
                log_event(
                    log,
                    "run.abandoned_for_good",
                    level=logging.WARNING,
                    job=execution.job_name,
                    execution=execution.id,
                    abandoned=execution.attempts,
                )
        # A shard is due again as a request, which goes first anyway.
        return [
            execution.job_id
            for execution in reaped
            if execution.shards == 1 and execution.dead_letter is None
        ]

    async def follow_clock_jump(self, now: datetime, ledger: Ledger) -> float:
        """A wall clock stepped forward (NTP, a restored VM) makes the leases of this instance's
        own runs look expired, though no real time passed: they are renewed before the reaper
        sees them, or it would abandon them and run their occurrences again. Returns the step
        in seconds (0.0: none); a step back is the dispatcher's to follow (clock_steps.py,
        beside this)."""
        real = self._clock.monotonic()
        jump = 0.0
        if self._last_seen is not None:
            last_now, last_real = self._last_seen
            jump = (now - last_now).total_seconds() - (real - last_real)
            if abs(jump) < CLOCK_JUMP_TOLERANCE_SECONDS:
                jump = 0.0
            else:
                log_event(log, "clock.jumped", level=logging.WARNING, seconds=round(jump, 3))
                if jump > 0:
                    await self._renew(now, ledger.own_runs())
        self._last_seen = (now, real)  # not before the renewal: a failed one is tried again
        return jump

    async def _renew(self, now: datetime, runs: Sequence[DueRun]) -> None:
        store = self._renewals
        margin = timedelta(seconds=self._settings.lease_margin_seconds)
        for run in runs:
            until = now + timedelta(seconds=run.job.timeout_seconds) + margin
            if run.shard_entry is not None:
                await store.renew_shard_lease(run.shard_entry, run.token, until, now)
            elif run.job.lease is not None:
                await store.renew_lease(run.job.id, run.job.lease.token, until)
