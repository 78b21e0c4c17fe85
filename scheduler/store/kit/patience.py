"""Opening a store patiently: a database down at startup delays the daemon, never kills it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

from tickd.scheduler.logs import log_event
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.schedule.backoff import backoff_delay
from tickd.scheduler.secrets.masking import scrub_text

log = logging.getLogger("tickd.storage")


class StartupAborted(Exception):
    """Told to stop while still waiting for the store at startup."""


class Openable(Protocol):
    async def open(self) -> None: ...


Backend = TypeVar("Backend", bound=Openable)


async def open_patiently(make: Callable[[], Backend], stop: asyncio.Event | None) -> Backend:
    """A store that is down at startup delays the daemon, it does not kill it: retry with
    backoff (orchestrators start the database and tickd in any order, and FerretDB drops a
    connection now and then while two instances create the same collections). Bad settings,
    which no retry cures, still stop startup at once."""
    for attempt in itertools.count(1):
        backend = make()
        try:
            await backend.open()
            return backend
        except StoreError as exc:
            if not exc.transient and attempt > 1:
                raise
            delay = backoff_delay(attempt, base=1.0, cap=30.0)
            log_event(
                log,
                "store.unavailable",
                level=logging.ERROR,
                error=scrub_text(str(exc)),
                retry_in_seconds=delay,
            )
            if stop is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                if stop.is_set():
                    raise StartupAborted from exc
            else:
                await asyncio.sleep(delay)
    raise AssertionError("unreachable")


# How the backends say their disk is full: SQLite; MongoDB; the operating system's ENOSPC;
# PostgreSQL under FerretDB ("could not extend file").
DISK_FULL_SIGNS = (
    "database or disk is full",
    "out of disk space",
    "no space left on device",
    "could not extend file",
)
# MongoDB's error code for it (OutOfDiskSpace), whatever its message.
MONGODB_OUT_OF_DISK_SPACE = 14031


def is_disk_full(exc: BaseException) -> bool:
    """Whether the store refused for want of space, as any backend words it (in the error or
    its causes)."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; a cycle in it must not hang the check
        if seen is None:
            return False
        if getattr(seen, "code", None) == MONGODB_OUT_OF_DISK_SPACE:
            return True
        if any(sign in str(seen).lower() for sign in DISK_FULL_SIGNS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def refuses_for_now(exc: StoreError) -> bool:
    """Whether the store refused for a reason that passes with time, not because of what was
    asked: a full disk, a lost connection, a busy database. What it refused is asked again
    later (a run's end) or answered 503 with Retry-After (an API call), never dropped."""
    return exc.transient or is_disk_full(exc)
