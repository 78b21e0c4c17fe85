"""Steady load: N cron jobs on `* * * * * *` (N executions a second), the real daemon, D seconds.

The jobs are written into the store before the daemon starts, first due at T, a few seconds after
it is up. Counted over the occurrences due in [T, T + D): fire lag of those that ran, and missed,
the occurrences with no run when the daemon was stopped, SETTLE_SECONDS after the window (late
beyond that is as good as missed for a job that fires every second).

    python -m bench.steady --stack embedded --rate 1000 --seconds 120
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

from bench.records import RAN, lag_summary, run_twice
from bench.stack import STACKS, Stack
from bench.trial import at, observed_fields, timed_insert, watch
from tickd.scheduler.model import CronSchedule, Job

EVERY_SECOND = "* * * * * *"
SETTLE_SECONDS = 5.0
LEAD_SECONDS = {"embedded": 5.0, "real": 8.0, "postgresql": 6.0}


def steady_jobs(count: int, first: float) -> list[Job]:
    when = at(first)
    return [
        Job(
            name=f"steady-{i:06}",
            handler="noop",
            schedule=CronSchedule(expr=EVERY_SECOND),
            next_run_at=when,
        )
        for i in range(count)
    ]


def run_steady(
    stack: Stack, rate: int, seconds: float, *, log_level: str = "INFO"
) -> dict[str, Any]:
    """`rate` jobs firing every second for `seconds` on a fresh stack (cleaned up afterwards)."""
    try:
        due = math.ceil(time.time() + LEAD_SECONDS[stack.kind] + rate * 2e-3)
        insert_s = timed_insert(stack, steady_jobs(rate, due))
        seen = watch(
            stack,
            "steady",
            due=due,
            done=lambda _finished, elapsed: elapsed >= seconds + SETTLE_SECONDS,
            timeout_seconds=seconds + SETTLE_SECONDS + 30,
            stall_seconds=30.0,
            log_level=log_level,
        )
    finally:
        stack.cleanup()
    window = [r for r in seen.records if due <= r.scheduled_at < due + seconds]
    ran = [r for r in window if r.status in RAN]
    occurrences = {(r.job_id, r.scheduled_at) for r in ran}
    expected = rate * math.ceil(seconds)
    return {
        "stack": stack.kind,
        "rate_per_s": rate,
        "seconds": seconds,
        "insert_s": round(insert_s, 2),
        "expected": expected,
        "executed": len(occurrences),
        "missed": expected - len(occurrences),
        "skipped": sum(1 for r in window if r.status == "skipped"),
        "run_twice": run_twice(window),
        **lag_summary(ran),
    } | observed_fields(seen, len(occurrences))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", choices=tuple(STACKS), default="embedded")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    stack = STACKS[args.stack]()
    print(json.dumps(run_steady(stack, args.rate, args.seconds, log_level=args.log_level)))


if __name__ == "__main__":
    main()
