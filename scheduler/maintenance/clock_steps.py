"""The wall clock stepped back (NTP correcting a clock that ran fast, a VM restored from an older
snapshot): every next run computed before the step lies as far ahead as the step is long, and
each job would keep silent that long. The dispatcher sees the step (wall time against real time,
scheduler/maintenance/reaper.py) and hands it here: the runs armed for their wall time are
given back, and each job's next run is computed again from the new wall time
(scheduler/schedule/planning.py), with an entry in its history. A job running meanwhile is
left to its end, which computes its next run. Counted (`tickd_clock_steps_back_total`) and
logged as an error, so that ops can page.
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from datetime import datetime

from tickd.scheduler.dead_letters import ENGINE_ACTOR
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Job, new_id
from tickd.scheduler.ports.backends import JobChange, JobQuery
from tickd.scheduler.ports.store_api import JobStore
from tickd.scheduler.run.claim import Claimer
from tickd.scheduler.run.ledger import DueRun
from tickd.scheduler.schedule.planning import after_step_back

log = logging.getLogger("tickd.engine")

PAGE = 500
RESCHEDULE = "reschedule"


def iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


class ClockSteps:
    def __init__(self, *, store: JobStore, claimer: Claimer, metrics: Metrics) -> None:
        self._store = store
        self._claimer = claimer
        self._metrics = metrics
        self._rng = random.Random()

    async def stepped_back(
        self, now: datetime, seconds: float, armed: list[tuple[DueRun, str]]
    ) -> int:
        """Give back the `armed` runs and move each job's next run back to the wall clock, now
        `seconds` behind where it was. Returns how many jobs were moved."""
        self._metrics.clock_steps_back.inc()
        if armed:
            await self._claimer.give_back(armed, "clock_stepped_back")
        moved = 0
        after_name: str | None = None
        while True:
            jobs = await self._store.list_jobs(
                JobQuery(enabled=True, next_run_from=now, after_name=after_name, limit=PAGE)
            )
            for job in jobs:
                moved += await self._reschedule(job, now, seconds)
            if len(jobs) < PAGE:
                break
            after_name = jobs[-1].name
        self._metrics.rescheduled_after_clock_step.inc(moved)
        log_event(
            log,
            "clock.stepped_back",
            level=logging.ERROR,
            seconds=round(seconds, 3),
            rescheduled_jobs=moved,
            hint="the host's clock ran ahead of real time: check its time sync",
        )
        return moved

    async def _reschedule(self, job: Job, now: datetime, seconds: float) -> int:
        if job.lease is not None:  # running: its end computes its next run from the new time
            return 0
        moved = after_step_back(job, now, seconds, self._rng)
        if moved is None:
            return 0
        change = JobChange(
            id=new_id(),
            job_id=job.id,
            job_name=job.name,
            at=now,
            actor=ENGINE_ACTOR,
            action=RESCHEDULE,
            changes={
                "next_run_at": {"from": iso(job.next_run_at), "to": moved.isoformat()},
                "clock_stepped_back_seconds": round(seconds, 3),
            },
        )
        stored = await self._store.replace_job(
            replace(job, next_run_at=moved), job.revision, change, read=job
        )
        return 0 if stored is None else 1
