"""Fan-out for the scan: every coroutine at once, each bounding itself with a semaphore (permits,
not tasks, are what is scarce: the seed's Go code does the same with a buffered channel)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def run_all(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run them concurrently and return their results in order. The first failure cancels the
    rest and is raised as itself, not inside an ExceptionGroup, so that the execution record
    names the error."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coroutine) for coroutine in coroutines]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]
