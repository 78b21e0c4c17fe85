"""The registered handlers and their params schemas."""

from __future__ import annotations

from tickd.api.models import HandlerList, HandlerOut
from tickd.api.routing import Call, Reply, Route, Routes
from tickd.api.v1 import state


async def list_handlers(call: Call[None, None]) -> Reply:
    items = [
        HandlerOut(
            name=r.name,
            origin=r.origin,
            params_schema=dict(r.handler.params_schema) if r.handler.params_schema else None,
            secret_params=sorted(r.handler.secret_params),
            max_concurrency=r.handler.max_concurrency,
        )
        for r in state(call).registry
    ]
    return Reply(HandlerList(items=items))


HANDLER_ROUTES: Routes = [
    Route(
        "GET",
        "/v1/handlers",
        list_handlers,
        "Registered handlers and their params schemas",
        "read",
        HandlerList,
        tag="handlers",
    ),
]
