"""Demo jobs for `make run`: something visibly happens within seconds of starting."""

from __future__ import annotations

from datetime import datetime

from tickd.scheduler.jobspec import JobRules, JobSpec
from tickd.scheduler.model import CronSchedule, IntervalSchedule, Job
from tickd.seed.jobs import seed_job

FLAKY_FAIL_PERCENT = 20

DEMO_JOBS = [
    JobSpec(name="demo-heartbeat", handler="noop", schedule=IntervalSchedule(every_seconds=2)),
    JobSpec(
        name="demo-every-ten-seconds",
        handler="sleep",
        params={"seconds": 0.5},
        schedule=CronSchedule(expr="*/10 * * * * *"),
    ),
    # One attempt in five fails; its retries nearly always succeed (a run fails all four
    # attempts once in 625 runs, a dead letter every few hours), as a flaky dependency's do.
    JobSpec(
        name="demo-flaky",
        handler="sleep",
        max_retries=3,
        timeout_seconds=10,
        params={"seconds": 0.1, "fail_percent": FLAKY_FAIL_PERCENT},
        schedule=CronSchedule(expr="H/15 * * * * *"),
    ),
    JobSpec(
        name="demo-spread-hourly",
        handler="noop",
        schedule=CronSchedule(expr="H H * * * *", timezone="Europe/Berlin"),
    ),
]


def demo_jobs(rules: JobRules, now: datetime) -> list[Job]:
    return [seed_job(rules, spec, now) for spec in DEMO_JOBS]
