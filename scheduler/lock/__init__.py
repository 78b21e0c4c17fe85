"""The lock port: one runner per job across instances. Backends: `memory://`, `redis://...`."""

from __future__ import annotations

from urllib.parse import urlsplit

from tickd.scheduler.ports.backends import Lock


def open_lock(url: str) -> Lock:
    """The lock backend for a URL; `redis://` and `rediss://` (TLS) take redis-py's URL form."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from tickd.scheduler.lock.memory import MemoryLock

        return MemoryLock()
    if scheme in ("redis", "rediss"):
        from tickd.scheduler.lock.redis import RedisLock

        return RedisLock.from_url(url)
    raise ValueError(
        f"lock_url: unsupported scheme {scheme!r} (expected memory://, redis:// or rediss://)"
    )


def lock_key(job_id: str) -> str:
    return f"job:{job_id}"


def shard_lock_key(job_id: str, shard: int) -> str:
    """The shards of an occurrence in progress run at once, each under a lock of its own."""
    return f"{lock_key(job_id)}:shard-{shard}"
