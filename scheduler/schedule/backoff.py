"""Retry delays: one second doubling to a thirty-second cap (the seed's numbers)."""

from __future__ import annotations


def backoff_delay(attempt: int, *, base: float = 1.0, cap: float = 30.0) -> float:
    """The wait after failed attempt number `attempt` (1 for the first)."""
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    return min(cap, base * float(1 << min(attempt - 1, 62)))
