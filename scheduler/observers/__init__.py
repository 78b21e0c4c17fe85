"""The life of a run, announced once: observers turn it into metrics, events and log lines.

The engine and the runner say what happened (a run was recorded, started, retried, finished,
fenced off, reaped...) to one RunObserver; what the world learns of it is the business of the
observers behind it, each a file of this folder: metrics.py (Prometheus), events.py (CloudEvents
to the publisher), logs.py (one structured line per event). Tests add a recording observer and
assert on what it heard. As Dramatiq's middleware or APScheduler's event hooks, the default of
every hook is to do nothing, so an observer implements only what it cares about.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from tickd.scheduler.model import Execution, Job

log = logging.getLogger("tickd.observers")


class RunObserver:
    """Hooks on a run's life. Each is called once per event, on the event loop; none may block
    or raise (Observers catches and logs what an observer raises, so a run never fails on it)."""

    def recorded(self, job: Job, execution: Execution) -> None:
        """An execution written by the dispatcher: `running` (claimed, about to be queued) or
        `skipped` (an occurrence missed beyond its grace period)."""

    def misfired(self, job: Job, count: int) -> None:
        """`count` occurrences of the job were missed by more than its grace period."""

    def started(self, job: Job, execution: Execution, lag_seconds: float) -> None:
        """The handler is about to run, `lag_seconds` after it could: after its occurrence was
        due or, for a requested run (`execution.requested`), after its request allowed."""

    def retrying(
        self, job: Job, execution: Execution, attempt: int, delay_seconds: float, error: str | None
    ) -> None:
        """Attempt `attempt` failed; the next starts in `delay_seconds`."""

    def unknown_handler(self, job: Job) -> None:
        """No handler of the job's name is registered: the run is skipped."""

    def stuck(self, job: Job) -> None:
        """The handler ignored its cancellation at the deadline; its worker moved on."""

    def not_started(self, job: Job, error: str) -> None:
        """A queued run could not renew its lease or lock (the store or lock service failed):
        it does not run; the lease expires and the occurrence runs again."""

    def fenced(self, job: Job, execution: Execution, *, before_start: bool) -> None:
        """The run's lease was taken over (it waited or ran past it): it did not start, or its
        end was not applied to the job."""

    def finished(self, job: Job, execution: Execution) -> None:
        """The execution is final (success, failed, timeout, abandoned or skipped)."""

    def not_recorded(self, job: Job, execution: Execution, error: str) -> None:
        """The store refused the run's end for good: the lease will expire and the occurrence
        run again."""

    def paused(self, job: Job, reason: str) -> None:
        """The circuit breaker paused the job."""

    def reaped(self, execution: Execution) -> None:
        """An expired lease was cleared and its execution marked `abandoned`."""

    def stopped(self) -> None:
        """The engine has shut down: no run ends after this."""


class Observers(RunObserver):
    """Several observers as one, in order; one that raises is logged and the others still hear."""

    def __init__(self, observers: Sequence[RunObserver]) -> None:
        self.observers = list(observers)
        # By hook, the bound hooks of the observers that implement it: most hear only a few
        # of the hooks called for every run (recorded, started, finished), and a call of the
        # default that does nothing still cost a look-up and a call, a run.
        self._hooks: dict[str, list[Callable[..., None]]] = {}

    def _tell(self, hook: str, *args: Any, **kwargs: Any) -> None:
        hooks = self._hooks.get(hook)
        if hooks is None:
            hooks = self._hooks[hook] = [
                getattr(observer, hook)
                for observer in self.observers
                if getattr(type(observer), hook, None) is not getattr(RunObserver, hook)
            ]
        for call in hooks:
            try:
                call(*args, **kwargs)
            except Exception:
                log.exception("observer.failed", extra={"hook": hook})

    def recorded(self, job: Job, execution: Execution) -> None:
        self._tell("recorded", job, execution)

    def misfired(self, job: Job, count: int) -> None:
        self._tell("misfired", job, count)

    def started(self, job: Job, execution: Execution, lag_seconds: float) -> None:
        self._tell("started", job, execution, lag_seconds)

    def retrying(
        self, job: Job, execution: Execution, attempt: int, delay_seconds: float, error: str | None
    ) -> None:
        self._tell("retrying", job, execution, attempt, delay_seconds, error)

    def unknown_handler(self, job: Job) -> None:
        self._tell("unknown_handler", job)

    def stuck(self, job: Job) -> None:
        self._tell("stuck", job)

    def not_started(self, job: Job, error: str) -> None:
        self._tell("not_started", job, error)

    def fenced(self, job: Job, execution: Execution, *, before_start: bool) -> None:
        self._tell("fenced", job, execution, before_start=before_start)

    def finished(self, job: Job, execution: Execution) -> None:
        self._tell("finished", job, execution)

    def not_recorded(self, job: Job, execution: Execution, error: str) -> None:
        self._tell("not_recorded", job, execution, error)

    def paused(self, job: Job, reason: str) -> None:
        self._tell("paused", job, reason)

    def reaped(self, execution: Execution) -> None:
        self._tell("reaped", execution)

    def stopped(self) -> None:
        self._tell("stopped")
