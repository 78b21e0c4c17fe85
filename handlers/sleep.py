"""`sleep`: waits `seconds` (default 1), then succeeds; optionally fails instead.

For demos, tests and benchmarks of long runs, timeouts and retries."""

from __future__ import annotations

import asyncio

from tickd.scheduler.handler_api import HandlerContext, Result, handler

PARAMS = {
    "type": "object",
    "properties": {
        "seconds": {"type": "number", "minimum": 0, "default": 1},
        "fail": {"type": "boolean", "default": False},
    },
    "additionalProperties": False,
}


@handler(params_schema=PARAMS)
async def sleep(ctx: HandlerContext) -> Result:
    seconds = float(ctx.params.get("seconds", 1))
    await asyncio.sleep(seconds)
    if ctx.params.get("fail"):
        raise RuntimeError(f"failed on purpose after {seconds:g} s")
    return {"slept_seconds": seconds}
