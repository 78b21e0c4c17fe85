"""The lock contract, run against every lock backend (see LOCK_BACKENDS)."""

from __future__ import annotations

import asyncio

from tickd.scheduler.ports.backends import Lock

# Real backends expire keys on their own clock; waits for that are short and bounded.
EXPIRY_WAIT_SECONDS = 5.0


async def test_a_key_is_held_by_one_token_at_a_time(lock: Lock) -> None:
    assert await lock.acquire_many({"job:a": 30, "job:b": 30}, "t1") == {"job:a", "job:b"}
    assert await lock.acquire_many({"job:a": 30, "job:c": 30}, "t2") == {"job:c"}


async def test_release_only_frees_keys_held_by_the_token(lock: Lock) -> None:
    await lock.acquire_many({"job:a": 30}, "owner")
    await lock.release_many(["job:a"], "intruder")
    assert await lock.acquire_many({"job:a": 30}, "intruder") == set()
    await lock.release_many(["job:a"], "owner")
    assert await lock.acquire_many({"job:a": 30}, "next") == {"job:a"}


async def test_breaking_frees_keys_whoever_holds_them(lock: Lock) -> None:
    """For the keys of an instance known dead: no token of its is needed, and no other key
    is touched."""
    await lock.acquire_many({"job:a": 3600, "job:b": 3600, "job:c": 3600}, "dead")
    await lock.break_many(["job:a", "job:b", "job:never-held"])
    assert await lock.acquire_many({"job:a": 30, "job:b": 30, "job:c": 30}, "next") == {
        "job:a",
        "job:b",
    }
    await lock.break_many([])


async def test_extend_needs_the_token(lock: Lock) -> None:
    await lock.acquire_many({"job:a": 30}, "owner")
    assert await lock.extend("job:a", "owner", 60)
    assert not await lock.extend("job:a", "intruder", 60)
    assert not await lock.extend("job:never-held", "owner", 60)


async def test_a_key_expires_after_its_time_to_live(lock: Lock) -> None:
    assert await lock.acquire_many({"job:a": 0.05}, "crashed") == {"job:a"}
    async with asyncio.timeout(EXPIRY_WAIT_SECONDS):
        while not await lock.acquire_many({"job:a": 30}, "survivor"):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    assert not await lock.extend("job:a", "crashed", 30)


async def test_ping_answers(lock: Lock) -> None:
    await lock.ping()


async def test_extend_many_extends_only_the_keys_the_token_holds_each_to_its_own_time(
    lock: Lock,
) -> None:
    await lock.acquire_many({"job:a": 0.05, "job:b": 0.05}, "owner")
    await lock.acquire_many({"job:c": 30}, "other")
    extended = await lock.extend_many(
        {"job:a": 60, "job:b": 0.05, "job:c": 60, "job:never-held": 60}, "owner"
    )
    assert extended == {"job:a", "job:b"}
    async with asyncio.timeout(EXPIRY_WAIT_SECONDS):
        while not await lock.acquire_many({"job:b": 30}, "next"):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    assert await lock.acquire_many({"job:a": 30, "job:c": 30}, "next") == set()
    assert await lock.extend_many({}, "owner") == set()
