"""tickd, a job-scheduling daemon. What a handler plug-in imports is here:

    from tickd import HandlerContext, Result, handler

    @handler(params_schema={"type": "object", "properties": {"url": {"type": "string"}}})
    async def ping(ctx: HandlerContext) -> Result:
        ...

Its tests import `tickd.testing` (run a handler once as the daemon does, or build its context).
Everything else under `tickd` is internal: `tickd.scheduler` (the core), `tickd.handlers` (the
built-in handlers), `tickd.api` (the REST API and the dashboard), `tickd.seed` (system and demo
jobs), and the composition root (`tickd.app`, `tickd.cli`, `tickd.daemon`), which wires them.
"""

from tickd.scheduler.plugin import api as handler_api
from tickd.scheduler.plugin.api import *  # noqa: F403 - tickd exports the handler API, all of it

__all__ = handler_api.__all__
