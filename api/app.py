"""The HTTP application: /v1, the operations endpoints and the OpenAPI document, one route table;
the dashboard's static files at /ui.

`create_app` takes what the API runs on; the composition root (tickd/app.py) ties the application's
startup and shutdown to the dispatcher's with aiohttp cleanup contexts.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from aiohttp import web

from tickd.api.bounces import BOUNCE_ROUTES
from tickd.api.dead_letters import DEAD_LETTER_ROUTES
from tickd.api.domains import DOMAIN_ROUTES
from tickd.api.edge import BODY_TIMEOUT, body_deadline_middleware, edge_middleware
from tickd.api.executions import EXECUTION_ROUTES
from tickd.api.handlers_routes import HANDLER_ROUTES
from tickd.api.jobs_routes import HISTORY_ROUTE, JOB_ROUTES
from tickd.api.openapi import openapi_document
from tickd.api.ops import DOCUMENT, OPS_ROUTES, PROBES, Probe
from tickd.api.problems import problems_middleware
from tickd.api.routing import TOKENS, Routes, add_routes
from tickd.api.running import RUNNING_ROUTES
from tickd.api.runs import RETRY_ROUTE, RUN_ROUTES
from tickd.api.schedules import JOB_PREVIEW_ROUTE, SCHEDULE_PREVIEW_ROUTE
from tickd.api.stats import STATS_ROUTES
from tickd.api.ui import add_ui_routes
from tickd.api.unsubscribe import add_unsubscribe_routes
from tickd.api.v1 import STATE, ApiState

MAX_BODY_BYTES = 1024 * 1024
# A request's body must arrive within this many seconds of its head (api/edge.py): 1 MiB in 30 s
# is 35 KB/s, which any client that means to send it manages.
BODY_TIMEOUT_SECONDS = 30.0
# Jobs, runs, executions, schedules, handlers: a job's operations together, in the order
# /openapi.json lists them.
V1_ROUTES: Routes = [
    *JOB_ROUTES,
    *RUN_ROUTES,
    JOB_PREVIEW_ROUTE,
    HISTORY_ROUTE,
    *EXECUTION_ROUTES,
    RETRY_ROUTE,
    *RUNNING_ROUTES,
    SCHEDULE_PREVIEW_ROUTE,
    *HANDLER_ROUTES,
]
ALL_ROUTES = (
    V1_ROUTES + BOUNCE_ROUTES + OPS_ROUTES + STATS_ROUTES + DEAD_LETTER_ROUTES + DOMAIN_ROUTES
)


def create_app(api_state: ApiState, probes: dict[str, Probe]) -> web.Application:
    # Problems outermost: the edge's refusals are problem details too. The body's deadline
    # innermost, where it sees the handler fail on the connection it closed.
    middlewares = [problems_middleware, edge_middleware, body_deadline_middleware]
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app[BODY_TIMEOUT] = BODY_TIMEOUT_SECONDS
    app[STATE] = api_state
    app[TOKENS] = api_state.settings.api_tokens
    app[PROBES] = probes
    app[DOCUMENT] = openapi_document(ALL_ROUTES, version=_version())
    add_routes(app, ALL_ROUTES)
    add_ui_routes(app)  # the dashboard: static files, its data from /v1 with the same tokens
    app.router.add_get("/", to_the_dashboard)  # a browser pointed at the address alone
    add_unsubscribe_routes(app)  # outside /v1, no bearer token: see api/unsubscribe.py
    return app


async def to_the_dashboard(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui")


def _version() -> str:
    try:
        return version("tickd")
    except PackageNotFoundError:
        return "0"
