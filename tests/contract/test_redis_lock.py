"""What the Redis lock promises beyond the lock contract: batches in one round trip, keys under
their prefix with a time to live, and failing closed, fast, when Redis is down or hung."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from tests.fixtures.locks import clear_prefix
from tests.fixtures.services import REDIS_URL
from tickd.scheduler.lock import open_lock
from tickd.scheduler.lock.redis import RedisLock, ttl_milliseconds
from tickd.scheduler.ports.backends import LockUnavailable

BATCH = {f"job:{n}": 30.0 for n in range(100)}
# A dead Redis must not hold up a dispatcher tick for longer than this.
FAIL_FAST_SECONDS = 2.0


async def round_trips(
    monkeypatch: pytest.MonkeyPatch, call: Callable[[], Awaitable[object]]
) -> int:
    """How many times this process sent Redis its commands while `call` ran: a round trip
    each (a pipeline's commands go at once). Counted in the client: the server's statistics
    move with every other client's commands, other tests' running beside this one."""
    sent = 0
    send = AbstractConnection.send_packed_command

    async def counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        nonlocal sent
        sent += 1
        await send(self, command, check_health)

    with monkeypatch.context() as patch:
        patch.setattr(AbstractConnection, "send_packed_command", counted)
        await call()
    return sent


async def test_a_batch_of_100_keys_is_one_round_trip(
    redis_lock: RedisLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await redis_lock.ping()  # connect (and its handshake) outside the count

    acquiring = await round_trips(monkeypatch, lambda: redis_lock.acquire_many(BATCH, "t1"))

    await redis_lock.release_many(["job:0"], "t1")  # loads the script once
    releasing = await round_trips(monkeypatch, lambda: redis_lock.release_many(list(BATCH), "t1"))
    assert acquiring <= 2, f"acquiring 100 keys took {acquiring} round trips"
    assert releasing <= 2, f"releasing 100 keys took {releasing} round trips"
    assert await redis_lock.acquire_many(BATCH, "t2") == set(BATCH), "all 100 were released"


async def test_keys_live_under_the_prefix_with_the_token_and_a_ttl(
    redis_lock: RedisLock, redis_admin: Redis
) -> None:
    await redis_lock.acquire_many({"job:a": 30}, "t1")

    stored = redis_lock.prefix + "job:a"
    assert await redis_admin.get(stored) == b"t1"
    assert 29_000 < await redis_admin.pttl(stored) <= 30_000
    assert await redis_lock.extend("job:a", "t1", 120)
    assert 119_000 < await redis_admin.pttl(stored) <= 120_000


def test_a_time_to_live_is_rounded_up_to_whole_milliseconds() -> None:
    assert ttl_milliseconds(0.05) == 50
    assert ttl_milliseconds(0.0001) == 1
    assert ttl_milliseconds(0) == 1
    assert ttl_milliseconds(1.0005) == 1001


async def test_a_client_handed_in_stays_open(redis_admin: Redis) -> None:
    prefix = f"tickd-test:{uuid.uuid4().hex}:"
    lock = RedisLock(redis_admin, prefix=prefix)
    try:
        assert await lock.acquire_many({"job:a": 30}, "t1") == {"job:a"}
    finally:
        await lock.close()
    assert await redis_admin.ping(), "closing the lock closed a client it did not open"
    await clear_prefix(redis_admin, prefix)


async def test_open_lock_picks_redis_for_redis_and_rediss_urls(redis_admin: Redis) -> None:
    for url in (REDIS_URL, "rediss://:secret@127.0.0.1:6380/0"):
        lock = open_lock(url)
        try:
            assert isinstance(lock, RedisLock)
            assert "secret" not in repr(lock)
        finally:
            await lock.close()


# Keeps the server busy (nothing else is served meanwhile) for ARGV[1] microseconds.
STALL_SCRIPT = """
local now = redis.call('TIME')
local deadline = now[1] * 1000000 + now[2] + tonumber(ARGV[1])
repeat now = redis.call('TIME') until now[1] * 1000000 + now[2] >= deadline
return 1
"""


async def stall_server(admin: Redis, *, seconds: float) -> None:
    await admin.eval(STALL_SCRIPT, 0, str(int(seconds * 1_000_000)))


async def test_a_batch_whose_answer_timed_out_is_given_back(
    redis_lock: RedisLock, redis_admin: Redis
) -> None:
    """The SETs land while the reply is late; the lock must not keep them for their whole TTL."""
    await redis_lock.ping()
    stall = asyncio.create_task(stall_server(redis_admin, seconds=1.3))
    await asyncio.sleep(0.1)  # the stall has begun

    with pytest.raises(LockUnavailable, match="Timeout"):
        await redis_lock.acquire_many({"job:a": 600, "job:b": 600}, "t1")
    await stall

    assert await redis_lock.acquire_many({"job:a": 30, "job:b": 30}, "t2") == {"job:a", "job:b"}


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (connecting is refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def hung_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers, like a Redis stuck in a
    fork or behind a dead proxy."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        yield server.getsockname()[1]


LOCK_CALLS: dict[str, Callable[[RedisLock], Awaitable[object]]] = {
    "acquire_many": lambda lock: lock.acquire_many(BATCH, "t1"),
    "extend": lambda lock: lock.extend("job:a", "t1", 30),
    "release_many": lambda lock: lock.release_many(["job:a"], "t1"),
    "ping": lambda lock: lock.ping(),
}


@pytest.mark.parametrize("call", LOCK_CALLS)
async def test_an_unreachable_redis_raises_lock_unavailable_at_once(
    closed_port: int, call: str
) -> None:
    await assert_fails_closed(f"redis://127.0.0.1:{closed_port}/0", LOCK_CALLS[call])


async def test_a_hung_redis_raises_lock_unavailable_within_the_timeouts(hung_port: int) -> None:
    await assert_fails_closed(f"redis://127.0.0.1:{hung_port}/0", LOCK_CALLS["acquire_many"])


async def assert_fails_closed(url: str, call: Callable[[RedisLock], Awaitable[object]]) -> None:
    lock = RedisLock.from_url(url)
    started = time.monotonic()
    try:
        with pytest.raises(LockUnavailable, match=r"127\.0\.0\.1"):
            await call(lock)
    finally:
        await lock.close()
    assert time.monotonic() - started < FAIL_FAST_SECONDS
