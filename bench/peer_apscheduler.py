"""The peer: APScheduler 3.x on the same burst, in a process of its own.

A BackgroundScheduler with a ThreadPoolExecutor of 30 threads, no misfire grace
(`misfire_grace_time=None`: a late job still runs), on a SQLAlchemy job store over SQLite (what
APScheduler's documentation shows: its default journal, one transaction per job change) or in
memory (nothing durable). N date-triggered no-op jobs, all due at the same second T a few
seconds after the scheduler starts; on SQLite they are written into its table before it starts,
as tickd's are. Lag is each job's start minus T; drain time is T to the last start.

    python -m bench.peer_apscheduler --store sqlite --jobs 3000 [--timeout 300]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import apscheduler_job
from bench.records import percentile

THREADS = 30
JOB = "bench.apscheduler_job:ran"
LEAD_SECONDS = 3.0
INSERT_BATCH = 1000


def _scheduler(store: str, folder: str) -> Any:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler

    jobstores: dict[str, Any] = {}
    if store == "sqlite":
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

        jobstores["default"] = SQLAlchemyJobStore(url=f"sqlite:///{folder}/jobs.sqlite")
    return BackgroundScheduler(
        jobstores=jobstores,
        executors={"default": ThreadPoolExecutor(THREADS)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone=UTC,
    )


def _add_jobs(scheduler: Any, store: str, count: int, due: datetime) -> None:
    if store == "memory":
        for i in range(count):
            scheduler.add_job(JOB, "date", run_date=due, args=[i], id=str(i))
        return
    _write_jobs(scheduler, count, due)


def _write_jobs(scheduler: Any, count: int, due: datetime) -> None:
    """Straight into the job store's table, in a few transactions, before the scheduler starts
    (adding them one by one through the scheduler costs a transaction each)."""
    from apscheduler.job import Job
    from apscheduler.triggers.date import DateTrigger
    from apscheduler.util import datetime_to_utc_timestamp

    jobstore = scheduler._jobstores["default"]
    jobstore.start(scheduler, "default")  # creates the table; start() does it again, harmlessly
    trigger = DateTrigger(run_date=due, timezone=UTC)
    rows = []
    for i in range(count):
        job = Job(
            scheduler,
            id=str(i),
            func=JOB,
            trigger=trigger,
            executor="default",
            args=(i,),
            kwargs={},
            name="ran",
            misfire_grace_time=None,
            coalesce=False,
            max_instances=1,
            next_run_time=due,
        )
        state = pickle.dumps(job.__getstate__(), jobstore.pickle_protocol)
        at = datetime_to_utc_timestamp(due)
        rows.append({"id": job.id, "next_run_time": at, "job_state": state})
    with jobstore.engine.begin() as connection:
        for start in range(0, count, INSERT_BATCH):
            connection.execute(jobstore.jobs_t.insert(), rows[start : start + INSERT_BATCH])


def measure(store: str, count: int, timeout: float) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="tickd-bench-aps-")
    scheduler = _scheduler(store, folder)
    added = time.time()
    due_s = math.ceil(time.time() + LEAD_SECONDS + count * 30e-6)
    _add_jobs(scheduler, store, count, datetime.fromtimestamp(due_s, UTC))
    insert_s = time.time() - added
    scheduler.start()
    deadline = due_s + timeout
    while len(apscheduler_job.STARTS) < count and time.time() < deadline:
        time.sleep(0.1)
    starts = list(apscheduler_job.STARTS)
    scheduler.shutdown(wait=False)
    shutil.rmtree(folder, ignore_errors=True)
    return _summary(store, count, due_s, insert_s, starts, timed_out=len(starts) < count)


def _summary(
    store: str,
    count: int,
    due: float,
    insert_s: float,
    starts: list[tuple[int, float]],
    *,
    timed_out: bool,
) -> dict[str, Any]:
    lags = sorted(at - due for _, at in starts)
    executed = len({i for i, _ in starts})
    drain = max((at for _, at in starts), default=due) - due
    return {
        "stack": f"apscheduler-{store}",
        "jobs": count,
        "insert_s": round(insert_s, 2),
        "executed": executed,
        "missed": count - executed,
        "run_twice": len(starts) - executed,
        "drain_s": round(drain, 2),
        "executions_per_s": round(executed / drain) if drain > 0 else None,
        "lag_p50_ms": _ms(percentile(lags, 0.5)),
        "lag_p99_ms": _ms(percentile(lags, 0.99)),
        "lag_max_ms": _ms(lags[-1] if lags else None),
        "timed_out": timed_out,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> float | None:
    """VmHWM, not getrusage's ru_maxrss: that one keeps the peak of the process we were forked
    from (the benchmark itself) across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def run_peer(store: str, count: int, timeout: float) -> dict[str, Any]:
    """The peer in a process of its own (its 30 threads do not share our interpreter)."""
    command = [sys.executable, "-m", "bench.peer_apscheduler"]
    command += ["--store", store, "--jobs", str(count), "--timeout", str(timeout)]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            timeout=timeout + 120,
            cwd=Path(__file__).resolve().parent.parent,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"stack": f"apscheduler-{store}", "jobs": count, "timed_out": True}
    lines = done.stdout.decode().strip().splitlines()
    if done.returncode != 0 or not lines:
        error = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        return {"stack": f"apscheduler-{store}", "jobs": count, "error": error}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    print(json.dumps(measure(args.store, args.jobs, args.timeout)), flush=True)
    os._exit(0)  # the scheduler's threads may still be busy with the job store: do not wait


if __name__ == "__main__":
    main()
