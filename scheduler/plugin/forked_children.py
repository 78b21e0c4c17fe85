"""A handler's forked children: a handler may fork (os.fork, multiprocessing's fork start method),
and its child is then a copy of the daemon, its event loop, store connections and listening
socket included. The child runs the handler's code only: back in tickd's code, by returning or
raising from the handler or from work on a pool thread, it ends at once (the daemon's side of
the fork, its signals and its loop: tickd/daemon.py)."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NoReturn, ParamSpec, TypeVar

from tickd.scheduler.logs import log_event

P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger("tickd.runner")


class ChildEndingThreads(ThreadPoolExecutor):
    """Threads for work that may fork: a child back in the pool (which catches even SystemExit)
    ends there, instead of waiting for more work as a copy of the daemon."""

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return super().submit(_in_this_process_only, functools.partial(fn, *args, **kwargs))


def _in_this_process_only(work: Callable[[], R]) -> R:
    daemon = os.getpid()
    try:
        return work()
    finally:  # what the work raised, if it did
        end_if_forked(daemon, sys.exc_info()[1])


def end_if_forked(daemon: int, raised: BaseException | None, **fields: object) -> None:
    """In a process other than `daemon`, a child forked in the call that returned or raised
    `raised` (None: returned): it ends here, with the code the interpreter would give it."""
    if os.getpid() != daemon:
        end_forked_child(_exit_code(raised), **fields)


def end_forked_child(code: int, **fields: object) -> NoReturn:
    """A child a handler forked, back in tickd's code, ends at once, running none of the daemon's
    exit handlers or finally blocks: it is no second daemon on the first one's fds and port.
    Nothing is flushed: what the daemon had buffered at the fork is the daemon's to write."""
    log_event(log, "handler.forked_child_ended", level=logging.WARNING, code=code, **fields)
    os._exit(code)


def _exit_code(raised: BaseException | None) -> int:
    """0 for a return, sys.exit()'s code (None: 0, a message: 1), 1 for an exception."""
    if isinstance(raised, SystemExit) and isinstance(raised.code, int | None):
        return raised.code or 0
    return 0 if raised is None else 1
