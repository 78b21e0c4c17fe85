"""One claimed run on a worker, through the stages after the dispatcher's: still its own
(a run that waited renews its lease and lock), executed (scheduler/run/execute.py), completed
(scheduler/run/end.py).

Lock, claim and record happen before, in batches, in the dispatcher (scheduler/dispatcher.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from datetime import datetime, timedelta

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.model import Status
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.plugin.outcomes import execution_error
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import LockUnavailable, Ports, StoreError
from tickd.scheduler.run.end import Ender
from tickd.scheduler.run.execute import Executor
from tickd.scheduler.run.fired_runs import FiredRuns
from tickd.scheduler.run.task import Outcome, Task
from tickd.scheduler.run.write import Writer

__all__ = ["Outcome", "Runner", "Task"]

FRESH_FOR = timedelta(seconds=1)


class Runner:
    def __init__(
        self,
        *,
        settings: Settings,
        ports: Ports,
        registry: HandlerRegistry,
        observer: RunObserver,
        rng: random.Random,
        resources: Mapping[str, object],
        fired: FiredRuns | None = None,
    ) -> None:
        self.settings = settings
        self.ports = ports
        # Told of every step of a run: metrics, events and logs are its business.
        self.observer = observer
        self.executor = Executor(
            settings=settings,
            ports=ports,
            registry=registry,
            observer=observer,
            resources=resources,
        )
        self.completer = Ender(
            settings=settings, ports=ports, observer=observer, rng=rng, fired=fired
        )

    @property
    def finisher(self) -> Writer:
        return self.completer.finisher

    async def run(self, task: Task) -> None:
        started = self.ports.clock.now()
        # Most tasks start within FRESH_FOR of their claim, its lease and lock still covering
        # their whole timeout: no coroutine made to find that out.
        if started - task.claimed_at >= FRESH_FOR:
            if not await self._still_ours(task, started):
                return
            started = self.ports.clock.now()
        real = self.ports.clock.monotonic()  # the duration is real time, whatever the wall says
        try:
            outcome = await self.executor.execute(task, started)
        except asyncio.CancelledError:
            # Shutdown past its grace period: record the run as abandoned and give the
            # occurrence back (no advance), so it runs again after the restart.
            abandoned = Outcome(
                status=Status.ABANDONED, error=execution_error("Shutdown", "cancelled")
            )
            await asyncio.shield(self.completer.finish(task, abandoned, started, started_real=real))
            raise
        await self.completer.hand_over(task, outcome, started, started_real=real)

    async def close(self) -> None:
        await self.completer.close()
        await self.executor.close()

    async def finish(self, task: Task, outcome: Outcome, started: datetime) -> None:
        """End a run that did not reach its handler (a skip, a shutdown), and wait until its end
        is written."""
        await self.completer.finish(task, outcome, started)

    def ending(self) -> list[Task]:
        return self.completer.ending()

    async def settled(self) -> None:
        await self.completer.settled()

    # -- before the handler ---------------------------------------------------------------------

    async def _still_ours(self, task: Task, now: datetime) -> bool:
        """A task that waited in the queue renews its lease and lock, so that its whole timeout
        is covered; if another instance took the job over meanwhile, it does not run."""
        timeout = task.job.timeout_seconds
        until = now + timedelta(seconds=timeout + self.settings.lease_margin_seconds)
        try:
            renewed = await self._renew(task, until, now)
            if renewed:
                ttl = timeout + self.settings.lock_margin_seconds
                await self.ports.lock.extend(task.lock_key, task.lock_token, ttl)
                return True
        except (StoreError, LockUnavailable) as exc:
            # Not started, so nothing is lost: the lease expires, the reaper marks the execution
            # abandoned and the occurrence runs again.
            self.observer.not_started(task.job, str(exc))
            return False
        self.observer.fenced(task.job, task.execution, before_start=True)
        return False

    async def _renew(self, task: Task, until: datetime, now: datetime) -> bool:
        token = task.execution.token
        assert token is not None
        entry = task.shard_entry
        if entry is not None:
            return await self.ports.store.renew_shard_lease(entry, token, until, now)
        return await self.ports.store.renew_lease(task.job.id, token, until)
