"""Burst: N no-op one-shot jobs due in the same second (1 % of them critical), the real daemon.
With `--hourly`, N hourly cron jobs instead (`0 0 * * * *`, each its own name), due at the same
second: the top of the hour, where every run's end also works out its next fire time. With
`--handler-seconds S`, each run sleeps S seconds (the `sleep` handler) instead: the workers, not
the store, are then the limit, and a second daemon brings its own.

The jobs are written into the store before the daemon starts, all due at T, a few seconds after
the daemon is up. Drain time is T to the end of the last run; executions/s is the jobs run over
that; missed is the jobs with no run; run twice counts extra runs of one occurrence.

    python -m bench.burst --stack embedded|real|postgresql --jobs 3000 [--hourly] [--daemons 2]
        [--handler-seconds 1] [--timed]

With `--timed`, the daemons run as bench/timed_daemon.py and the result lists each one's store
calls by method (`store_calls`), over the same window as its store operations.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from bench.records import RAN, lag_summary, run_twice
from bench.stack import STACKS, Stack
from bench.trial import at, observed_fields, timed_insert, watch
from tickd.scheduler.model import CronSchedule, Job, OnceSchedule, Priority, Schedule

CRITICAL_EVERY = 100  # 1 %
# Jobs of `make bench`'s burst of one-second runs: 30 s of one daemon's 30 workers.
LONG_RUNS_JOBS = 900
HOURLY = "0 0 * * * *"
# Seconds between the daemon's start and the jobs' due time; the daemon needs about 1-2 s.
LEAD_SECONDS = {"embedded": 5.0, "real": 8.0, "postgresql": 6.0}
# Seconds more with several daemons: each takes its share of the partitions once the others have
# seen it, at their next heartbeat (3 s) and a tick; a burst due before that goes to one of them.
SETTLE_SECONDS = 4.0
# Seconds per job to write them (measured: SQLite about 30 us, FerretDB about 1 ms), doubled.
INSERT_SECONDS_PER_JOB = {"embedded": 60e-6, "real": 2e-3, "postgresql": 2e-4}


def burst_jobs(
    count: int, due: float, prefix: str, *, hourly: bool = False, handler_seconds: float = 0.0
) -> list[Job]:
    when = at(due)
    schedule: Schedule = CronSchedule(expr=HOURLY) if hourly else OnceSchedule(at=when)
    sleeping = {"handler": "sleep", "params": {"seconds": handler_seconds}}
    return [
        Job(
            name=f"{prefix}-{'c' if i % CRITICAL_EVERY == 0 else 'n'}-{i:06}",
            **(sleeping if handler_seconds else {"handler": "noop"}),
            schedule=schedule,
            next_run_at=when,
            priority=Priority.CRITICAL if i % CRITICAL_EVERY == 0 else Priority.NORMAL,
        )
        for i in range(count)
    ]


def run_burst(
    stack: Stack,
    count: int,
    *,
    timeout_seconds: float,
    log_level: str = "INFO",
    profile: Path | None = None,
    hourly: bool = False,
    daemons: int = 1,
    handler_seconds: float = 0.0,
    timed: bool = False,
) -> dict[str, Any]:
    """One burst on a fresh stack (cleaned up afterwards); of hourly cron jobs if `hourly`; with
    `daemons` instances of the daemon on the one store."""
    try:
        lead = LEAD_SECONDS[stack.kind] + count * INSERT_SECONDS_PER_JOB[stack.kind]
        lead += SETTLE_SECONDS if daemons > 1 else 0.0
        due = math.ceil(time.time() + lead)
        jobs = burst_jobs(count, due, "burst", hourly=hourly, handler_seconds=handler_seconds)
        insert_s = timed_insert(stack, jobs)
        seen = watch(
            stack,
            "burst",
            due=due,
            done=lambda finished, _elapsed: finished >= count,
            timeout_seconds=timeout_seconds,
            stall_seconds=min(60.0, timeout_seconds),
            log_level=log_level,
            profile=profile,
            daemons=daemons,
            timed=timed,
        )
    finally:
        stack.cleanup()
    result = burst_summary(stack.kind, count, due, insert_s, seen.records)
    if seen.timed_out:
        # Not drained: the rate is that of the runs seen before the watch gave up.
        result["drain_s"] = None
    return result | observed_fields(seen, executed_jobs(seen.records))


def executed_jobs(records: list[Any]) -> int:
    return len({r.job_id for r in records if r.status in RAN})


def burst_summary(
    kind: str, count: int, due: float, insert_s: float, records: list[Any]
) -> dict[str, Any]:
    ran = [r for r in records if r.status in RAN]
    executed = executed_jobs(records)
    last_end = max((r.finished_at for r in ran if r.finished_at is not None), default=None)
    drain = None if last_end is None else last_end - due
    critical = [r for r in ran if r.job_name.startswith("burst-c-")]
    return {
        "stack": kind,
        "jobs": count,
        "critical_jobs": math.ceil(count / CRITICAL_EVERY),
        "insert_s": round(insert_s, 2),
        "executed": executed,
        "missed": count - executed,
        "run_twice": run_twice(records),
        "failed": sum(1 for r in ran if r.status != "success"),
        "drain_s": None if drain is None else round(drain, 2),
        "executions_per_s": round(executed / drain) if drain and drain > 0 else None,
        **lag_summary(ran),
        **{f"critical_{k}": v for k, v in lag_summary(critical).items() if k != "runs"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", choices=tuple(STACKS), default="embedded")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--hourly", action="store_true", help="hourly cron jobs, not one-shot")
    parser.add_argument("--daemons", type=int, default=1, help="instances on the one store")
    parser.add_argument("--handler-seconds", type=float, default=0.0, help="each run sleeps")
    parser.add_argument("--timed", action="store_true", help="count each daemon's store calls")
    args = parser.parse_args()
    stack = STACKS[args.stack]()
    result = run_burst(
        stack,
        args.jobs,
        timeout_seconds=args.timeout,
        log_level=args.log_level,
        profile=args.profile,
        hourly=args.hourly,
        daemons=args.daemons,
        handler_seconds=args.handler_seconds,
        timed=args.timed,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
