"""The lock of a run path whose store's claim is atomic (`claim_is_the_lock`): the claim alone
decides which instance runs a job, and its lease, fenced by its token, keeps the run to that
instance until it ends or expires. Every key is granted and nothing is held, so a run costs the
lock service no round trip, and an outage of it stops no run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tickd.scheduler.ports.backends import Lock
from tickd.scheduler.ports.store_engine import DispatchStore


def run_path_lock(store: DispatchStore, lock: Lock) -> Lock:
    """The lock a run takes from its claim to its written end (and the heartbeat breaks for a
    dead instance): none where the store's claim is the lock, else the lock service's. The
    relay's turn always comes from the lock service."""
    return LeaseLock() if store.claim_is_the_lock else lock


class LeaseLock:
    async def acquire_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        return set(ttls)

    async def extend(self, key: str, token: str, ttl_seconds: float) -> bool:
        return True

    async def extend_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        return set(ttls)

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        return None

    async def break_many(self, keys: Sequence[str]) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None
