"""`timed_sleep`: the `sleep` handler that notes when each run really starts and ends, for system
tests that measure what was in flight at once. The store's times of an execution are those of
its records, written in batches around the run; these are the handler's own.

Each daemon process appends to a file of its own in the job's `record` folder (named by its
pid, so that lines of different processes never interleave and a killed daemon's runs are
known by its pid): `start <time.time()> <run>` and `end <time.time()> <run>`, `<run>` being
`<job id>/<attempt>`. A run whose process was killed has a start and no end.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from tickd.scheduler.plugin.api import HandlerContext, Result, handler

PARAMS = {
    "type": "object",
    "properties": {"seconds": {"type": "number", "minimum": 0}, "record": {"type": "string"}},
    "required": ["seconds", "record"],
    "additionalProperties": False,
}


@handler(params_schema=PARAMS)
async def timed_sleep(ctx: HandlerContext) -> Result:
    record = Path(ctx.params["record"]) / f"{os.getpid()}.log"
    run = f"{ctx.job_id}/{ctx.attempt}"
    note(record, "start", run)
    await asyncio.sleep(float(ctx.params["seconds"]))
    note(record, "end", run)
    return {"slept_seconds": ctx.params["seconds"]}


def note(record: Path, what: str, run: str) -> None:
    # One unbuffered write per line, so that a SIGKILL leaves whole lines only.
    with record.open("a", buffering=1) as out:
        out.write(f"{what} {time.time():.6f} {run}\n")
