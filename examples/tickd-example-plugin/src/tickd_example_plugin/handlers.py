"""`example_greeting`: greets someone by name. The smallest useful handler: a params schema,
the context's logger, and a small dict as the result of the execution."""

from __future__ import annotations

from typing import Any

from tickd import HandlerContext, Result, handler

PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "greeting": {"type": "string", "default": "Hello", "maxLength": 100},
    },
    "required": ["name"],
    "additionalProperties": False,
}


@handler(params_schema=PARAMS, max_concurrency=5)
async def greet(ctx: HandlerContext) -> Result:
    message = compose(ctx.params["name"], ctx.params.get("greeting", "Hello"))
    ctx.logger.info("greeting %s (attempt %d)", ctx.params["name"], ctx.attempt)
    return {"message": message, "scheduled_at": ctx.scheduled_at.isoformat()}


def compose(name: str, greeting: str = "Hello") -> str:
    """The work itself, apart from tickd: the easiest part to test."""
    return f"{greeting}, {name}!"
