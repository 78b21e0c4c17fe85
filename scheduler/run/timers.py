"""Claimed runs waiting for their exact time, in memory: the dispatcher claims what falls due
within the next tick or two and fires each occurrence when its time comes, so runs start on
time without polling faster (seeds 000 and 001 do the same). The lease taken at the claim
covers the wait."""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from datetime import datetime
from typing import Generic, TypeVar

T = TypeVar("T")


class Timers(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, str, T]] = []
        self._order = itertools.count()  # equal times fire in the order they were armed
        self.by_handler: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, at: datetime, handler: str, item: T) -> None:
        heapq.heappush(self._heap, (at, next(self._order), handler, item))
        self.by_handler[handler] += 1

    def next_at(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def due(self, now: datetime, limit: int | None = None) -> list[T]:
        """Take every item whose time has come (at most `limit`), earliest first."""
        fired: list[T] = []
        while self._heap and self._heap[0][0] <= now and (limit is None or len(fired) < limit):
            fired.append(self._take())
        return fired

    def pending(self) -> list[T]:
        """Every armed item, left armed."""
        return [item for _, _, _, item in self._heap]

    def take_all(self) -> list[T]:
        return [self._take() for _ in range(len(self._heap))]

    def _take(self) -> T:
        _, _, handler, item = heapq.heappop(self._heap)
        self.by_handler[handler] -= 1
        return item
