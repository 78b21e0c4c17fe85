"""The no-op job APScheduler runs in the peer benchmark: it notes when it started.

A module of its own, so that APScheduler's textual reference (`bench.apscheduler_job:ran`) and
the benchmark that reads the notes see the same list (`python -m bench.peer_apscheduler` runs
that module as __main__, a second copy of it)."""

from __future__ import annotations

import time

# (job index, epoch seconds at start); list.append is atomic, so 30 threads may append at once.
STARTS: list[tuple[int, float]] = []


def ran(index: int) -> None:
    STARTS.append((index, time.time()))
