"""The Redis lock (`redis://`, or `rediss://` for TLS): one runner per job across hosts.

A key is taken with `SET key token NX PX ttl` and given back only by its token: the compare and the
delete (or the PEXPIRE) happen together inside Lua, so a holder can never free or extend a key that
has meanwhile passed to someone else. Each call is one round trip, whatever the size of the batch.

Fail closed: any Redis failure raises LockUnavailable, and the engine then starts no run. Short
socket timeouts keep a dead or hung Redis from holding up the dispatcher; they can be raised with
the URL's own query (`?socket_timeout=2&socket_connect_timeout=2`), which redis-py reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tickd.scheduler.ports.backends import LockUnavailable

# Redis answers a healthy batch in milliseconds; one that takes a second is treated as down.
SOCKET_TIMEOUT_SECONDS = 1.0
CONNECT_TIMEOUT_SECONDS = 1.0
# Giving back a batch whose fate is unknown gets less, so that a hung Redis costs under 2 s a tick.
FORGET_TIMEOUT_SECONDS = 0.5

REDIS_FAILURES = (RedisError, OSError)

RELEASE_SCRIPT = """
local released = 0
for _, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[1] then
        released = released + redis.call('DEL', key)
    end
end
return released
"""

EXTEND_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


EXTEND_MANY_SCRIPT = """
local extended = {}
for i, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[1] then
        extended[#extended + 1] = redis.call('PEXPIRE', key, ARGV[i + 1])
    else
        extended[#extended + 1] = 0
    end
end
return extended
"""


def server_address(client: Redis) -> str:
    """Where the client connects, for error messages; never its credentials."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def ttl_milliseconds(ttl_seconds: float) -> int:
    """PX takes whole milliseconds, at least one; rounding up never shortens a lock."""
    return max(1, math.ceil(ttl_seconds * 1000))


class RedisLock:
    """The lock port on a redis.asyncio client; closes the client only if it opened it.

    `prefix` is put in front of every key, so that tests or several deployments can share one
    Redis database without seeing each other's keys.
    """

    def __init__(self, client: Redis, *, prefix: str = "", owns_client: bool = False) -> None:
        self._client = client
        self._prefix = prefix
        self._owns_client = owns_client
        self._where = server_address(client)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._extend = client.register_script(EXTEND_SCRIPT)
        self._extend_many = client.register_script(EXTEND_MANY_SCRIPT)

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "") -> RedisLock:
        client = Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
            # No retries inside the client: a SET NX retried after a lost reply answers "taken"
            # for a key this token holds. The engine retries the whole tick, with backoff.
            retry=Retry(NoBackoff(), 0),
        )
        return cls(client, prefix=prefix, owns_client=True)

    @property
    def prefix(self) -> str:
        return self._prefix

    def __repr__(self) -> str:
        return f"RedisLock({self._where!r}, prefix={self._prefix!r})"

    async def acquire_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        if not ttls:
            return set()
        try:
            answers = await self._set_if_absent(ttls, token)
        except REDIS_FAILURES as exc:
            if isinstance(exc, RedisTimeoutError | TimeoutError):
                await self._forget(list(ttls), token)
            raise self._unavailable("acquire", exc) from exc
        return {key for key, taken in zip(ttls, answers, strict=True) if taken}

    async def _set_if_absent(self, ttls: Mapping[str, float], token: str) -> list[object]:
        """Every SET NX in one pipeline, not a transaction: each key is won or lost on its own."""
        pipe = self._client.pipeline(transaction=False)
        for key, ttl_seconds in ttls.items():
            pipe.set(self._prefix + key, token, nx=True, px=ttl_milliseconds(ttl_seconds))
        return await pipe.execute()

    async def _forget(self, keys: list[str], token: str) -> None:
        """After a timeout the SETs may have landed without our hearing it: give back whatever
        this token may hold, so that the jobs are not blocked until their locks expire."""
        with contextlib.suppress(*REDIS_FAILURES):
            async with asyncio.timeout(FORGET_TIMEOUT_SECONDS):
                await self._release_all(keys, token)

    async def extend(self, key: str, token: str, ttl_seconds: float) -> bool:
        with self._failing_closed("extend"):
            extended = await self._extend(
                keys=[self._prefix + key], args=[token, ttl_milliseconds(ttl_seconds)]
            )
        return bool(extended)

    async def extend_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        """One script call for the whole batch (the keys are on one server, not a cluster)."""
        if not ttls:
            return set()
        keys = list(ttls)
        with self._failing_closed("extend"):
            extended = await self._extend_many(
                keys=[self._prefix + key for key in keys],
                args=[token, *(ttl_milliseconds(ttls[key]) for key in keys)],
            )
        return {key for key, done in zip(keys, extended, strict=True) if done}

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        if not keys:
            return
        with self._failing_closed("release"):
            await self._release_all(keys, token)

    async def break_many(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with self._failing_closed("break"):
            await self._client.delete(*[self._prefix + key for key in keys])

    async def _release_all(self, keys: Sequence[str], token: str) -> None:
        """One script call for the whole batch (the keys are on one server, not a cluster)."""
        await self._release(keys=[self._prefix + key for key in keys], args=[token])

    async def ping(self) -> None:
        with self._failing_closed("ping"):
            await self._client.ping()

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    @contextlib.contextmanager
    def _failing_closed(self, operation: str) -> Iterator[None]:
        try:
            yield
        except REDIS_FAILURES as exc:
            raise self._unavailable(operation, exc) from exc

    def _unavailable(self, operation: str, exc: BaseException) -> LockUnavailable:
        return LockUnavailable(f"{operation} at {self._where}: {type(exc).__name__}: {exc}")
