"""Tasks a handler leaves behind: asyncio tasks it started during its run and did not see to the
end. They belong to the run, so they end with it: cancelled and logged, instead of living on
in the daemon unseen (holding connections, memory, or a worker's share of the loop) for ever.

The loop's task factory files every task under the run whose context created it (a context
variable each run sets; the tasks a task creates inherit it, so grandchildren are found too).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from tickd.scheduler.logs import log_event

log = logging.getLogger("tickd.runner")
T = TypeVar("T")

_SPAWNED: contextvars.ContextVar[set[asyncio.Task[Any]] | None] = contextvars.ContextVar(
    "tickd_spawned_tasks", default=None
)
# Cancelled leftovers, referenced until they end (one that ignores cancellation may take a while).
_ENDING: set[asyncio.Task[Any]] = set()


class TasksEndingWithTheRun:
    """Around a handler's coroutine, inside its own task: what it started and left running is
    cancelled and logged when it returns, raises or is cancelled. A class, not a
    @contextmanager generator: entered once a run, that costs a generator and its frames."""

    __slots__ = ("_job_name", "_spawned", "_token")

    def __init__(self, job_name: str) -> None:
        self._job_name = job_name
        self._spawned: set[asyncio.Task[Any]] = set()
        self._token: contextvars.Token[set[asyncio.Task[Any]] | None] | None = None

    def __enter__(self) -> None:
        _track_spawned_tasks(asyncio.get_running_loop())
        self._token = _SPAWNED.set(self._spawned)

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None
        _SPAWNED.reset(self._token)
        if self._spawned:  # most runs start no task of their own
            _end_leftovers(self._job_name, self._spawned)


def _end_leftovers(job_name: str, spawned: set[asyncio.Task[Any]]) -> None:
    left = [task for task in spawned if not task.done()]
    if not left:
        return
    for task in left:
        task.cancel()
        _ENDING.add(task)
        task.add_done_callback(_forget)
    log_event(
        log,
        "run.tasks_left_behind",
        level=logging.WARNING,
        job=job_name,
        tasks=len(left),
        names=sorted(task.get_name() for task in left)[:10],
        action="cancelled",
    )


def _forget(task: asyncio.Task[Any]) -> None:
    _ENDING.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: it was the run's, and the run is over


class _FilingFactory:
    """Wraps the loop's task factory (or none): each new task is filed under the run whose
    context created it. Outside a run it costs one context-variable read."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        if self.inner is None:
            task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        else:
            task = self.inner(loop, coro, **kwargs)
        spawned = _SPAWNED.get()
        if spawned is not None:
            spawned.add(task)
            task.add_done_callback(spawned.discard)  # finished ones are no leftovers
        return task


def run_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A run's own task, made outside any run: no run's leftover, so the filing factory would
    only pass it through (a Python call a run); made by the loop's factory if it is another."""
    factory: object = loop.get_task_factory()
    if factory is None or (isinstance(factory, _FilingFactory) and factory.inner is None):
        return asyncio.Task(coro, loop=loop)
    return loop.create_task(coro)


def _track_spawned_tasks(loop: asyncio.AbstractEventLoop) -> None:
    current = loop.get_task_factory()
    if not isinstance(current, _FilingFactory):
        loop.set_task_factory(cast(Any, _FilingFactory(current)))
