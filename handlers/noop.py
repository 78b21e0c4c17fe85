"""`noop`: does nothing, at once. For demos, tests and measuring the engine's own cost."""

from __future__ import annotations

from tickd.scheduler.plugin.api import HandlerContext, Result, handler


@handler(params_schema={"type": "object", "additionalProperties": False})
async def noop(ctx: HandlerContext) -> Result:
    return None
