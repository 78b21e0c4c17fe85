"""Demo jobs for `make run`: something visibly happens within seconds of starting."""

from __future__ import annotations

from datetime import datetime

from scheduler.model import Job
from seed.jobs import seed_job


def demo_jobs(now: datetime) -> list[Job]:
    return [
        seed_job(
            name="demo-heartbeat",
            handler="noop",
            now=now,
            schedule={"kind": "interval", "every_seconds": 2},
        ),
        seed_job(
            name="demo-every-ten-seconds",
            handler="sleep",
            now=now,
            params={"seconds": 0.5},
            schedule={"kind": "cron", "expr": "*/10 * * * * *"},
        ),
        seed_job(
            name="demo-flaky",
            handler="sleep",
            now=now,
            max_retries=2,
            timeout_seconds=10,
            params={"seconds": 0.1, "fail": True},
            schedule={"kind": "cron", "expr": "H/15 * * * * *"},
        ),
        seed_job(
            name="demo-spread-hourly",
            handler="noop",
            now=now,
            schedule={"kind": "cron", "expr": "H H * * * *", "timezone": "Europe/Berlin"},
        ),
    ]
