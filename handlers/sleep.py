"""`sleep`: waits `seconds` (default 1), then succeeds; optionally fails instead.

`fail` fails every attempt; `fail_percent` fails that share of attempts, picked from the run's
idempotency key and attempt number: the same attempt of the same run always ends the same way,
and a retry may succeed, as a flaky dependency's do.

For demos, tests and benchmarks of long runs, timeouts and retries."""

from __future__ import annotations

import asyncio
import hashlib

from tickd.scheduler.plugin.api import HandlerContext, Result, handler

PARAMS = {
    "type": "object",
    "properties": {
        "seconds": {"type": "number", "minimum": 0, "default": 1},
        "fail": {"type": "boolean", "default": False},
        "fail_percent": {"type": "number", "minimum": 0, "maximum": 100, "default": 0},
    },
    "additionalProperties": False,
}


@handler(params_schema=PARAMS)
async def sleep(ctx: HandlerContext) -> Result:
    seconds = float(ctx.params.get("seconds", 1))
    await asyncio.sleep(seconds)
    if ctx.params.get("fail"):
        raise RuntimeError(f"failed on purpose after {seconds:g} s")
    percent = float(ctx.params.get("fail_percent", 0))
    if attempt_fails(ctx.idempotency_key, ctx.attempt, percent):
        raise RuntimeError(f"attempt {ctx.attempt} failed on purpose, as {percent:g} % do")
    return {"slept_seconds": seconds}


def attempt_fails(idempotency_key: str, attempt: int, percent: float) -> bool:
    """Whether this attempt is one of the `percent` % that fail: a hash of the run and the
    attempt, spread evenly over 0 to 100."""
    digest = hashlib.sha256(f"{idempotency_key}#{attempt}".encode()).digest()
    return int.from_bytes(digest[:8]) / 2**64 * 100 < percent
