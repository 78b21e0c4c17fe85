"""The in-process lock (`memory://`): enough for one daemon; Redis takes over across hosts."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence


class MemoryLock:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._held: dict[str, tuple[str, float]] = {}  # key -> (token, expires at)
        self._monotonic = monotonic

    def _holder(self, key: str) -> str | None:
        held = self._held.get(key)
        if held is None or held[1] <= self._monotonic():
            return None
        return held[0]

    async def acquire_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        now = self._monotonic()
        acquired = set()
        for key, ttl_seconds in ttls.items():
            if self._holder(key) is None:
                self._held[key] = (token, now + ttl_seconds)
                acquired.add(key)
        return acquired

    async def extend(self, key: str, token: str, ttl_seconds: float) -> bool:
        if self._holder(key) != token:
            return False
        self._held[key] = (token, self._monotonic() + ttl_seconds)
        return True

    async def extend_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        return {key for key, ttl in ttls.items() if await self.extend(key, token, ttl)}

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        for key in keys:
            if self._holder(key) == token:
                del self._held[key]

    async def break_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._held.pop(key, None)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._held.clear()
