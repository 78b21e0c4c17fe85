"""The soak: the real daemon on the real stack (FerretDB, Redis, Kafka) under steady load for a
long time, sampled as it goes, to see whether anything creeps: memory, fire lag, the outbox.

`--rate` x `--period` no-op jobs, each every `--period` seconds, their seconds spread evenly so
that `--rate` fall due in each second (that many executions a second), for `--minutes`. Every
`--sample-seconds`: the daemon's RSS (/proc), executions a second and fire lag (mean and p95,
from the deltas of its metrics over the interval), the outbox backlog and the due backlog. Each
series is called flat when, after the warm-up, the median of its last third is within a margin
of the median of its first third (RSS +10 % or +10 MB, lag +0.5 s, backlogs within 2 s of
work); its slope per 10 minutes is printed beside it.

    python -m bench.soak --minutes 30 --rate 50        # `make soak` (SOAK_ARGS passes options)
    python -m bench.soak --store sqlite --rate 200     # the store embedded, Redis and Kafka real

The default rate is 50 a second, not the target's 200: on this 2-core machine FerretDB 1.24 keeps
a few hundred store commands a second, and a 3,000-job burst drains at about 50 a second
(docs/performance.md), so 200 is out of reach of any engine on it. The soak asks for what the
daemon keeps with a margin, so that a creep shows as a trend rather than as a store at its limit.
Writes var/soak/results.json (every
sample and the verdicts) and var/soak/results.md; prints the table. Exits 1 when a series is not
flat or the daemon died. Needs the services (`make services`); starts and stops nothing else.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.daemon import Daemon, metric_sum
from bench.stack import (
    KAFKA_URL,
    REDIS_URL,
    Stack,
    embedded_stack,
    real_stack,
    real_stack_reachable,
)
from bench.trial import at, timed_insert
from tickd.scheduler.model import CronSchedule, Job

# A job's period: each run's whole cycle on the real stack (fetch, claim, record, run, the end
# written) takes longer than a second on FerretDB, so a job due every second would fall behind
# by itself however few there were; production jobs are rarely every second anyway.
PERIOD_SECONDS = 10
LEAD_SECONDS = 10.0
READY_WITHIN = 60.0
OUT = Path("var/soak")
LAG = "tickd_fire_lag_seconds"
# What "flat" allows between the first and the last third (after the warm-up).
RSS_GROWTH = 0.10
RSS_SLACK_MB = 10.0
LAG_SLACK_S = 0.5
BACKLOG_SLACK_SECONDS = 2.0  # of work at the soak's rate


@dataclass(frozen=True)
class Sample:
    minute: float
    rss_mb: float
    executions_per_s: float
    lag_mean_s: float
    lag_p95_s: float
    outbox_backlog: float
    due_backlog: float


@dataclass(frozen=True)
class Verdict:
    series: str
    first_third: float
    last_third: float
    slope_per_10_min: float
    allowed: float
    flat: bool


def soak_jobs(rate: int, period: int, first: int) -> list[Job]:
    """`rate` jobs on each second of the period (`s/period` in the seconds field), the first
    fire of each at its own second from `first` on."""
    jobs = []
    for i in range(rate * period):
        offset = i % period
        first_fire = first + (offset - first) % period
        jobs.append(
            Job(
                name=f"soak-{i:05}",
                handler="noop",
                schedule=CronSchedule(expr=f"{offset}/{period} * * * * *"),
                next_run_at=at(first_fire),
            )
        )
    return jobs


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def lag_buckets(text: str) -> dict[float, float]:
    """Cumulative count of the fire-lag histogram per upper bound, all labels summed."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{LAG}_bucket{{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            upper = math.inf if bound == "+Inf" else float(bound)
            buckets[upper] = buckets.get(upper, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


def p95_between(before: dict[float, float], after: dict[float, float]) -> float:
    """The upper bound of the bucket holding the 95th percentile of the interval's lags."""
    deltas = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return 0.0
    return next(bound for bound, count in deltas if count >= 0.95 * total)


@dataclass
class Reading:
    at: float
    text: str

    def value(self, name: str) -> float:
        return metric_sum(self.text, name) or 0.0


def sample_between(start: float, before: Reading, after: Reading, pid: int) -> Sample:
    seconds = after.at - before.at
    ran = after.value("tickd_executions_total") - before.value("tickd_executions_total")
    lags = after.value(f"{LAG}_count") - before.value(f"{LAG}_count")
    lag_sum = after.value(f"{LAG}_sum") - before.value(f"{LAG}_sum")
    return Sample(
        minute=round((after.at - start) / 60, 2),
        rss_mb=round(rss_mb(pid), 1),
        executions_per_s=round(ran / seconds, 1),
        lag_mean_s=round(lag_sum / lags, 3) if lags else 0.0,
        lag_p95_s=p95_between(lag_buckets(before.text), lag_buckets(after.text)),
        outbox_backlog=after.value("tickd_outbox_backlog"),
        due_backlog=after.value("tickd_due_backlog"),
    )


def slope_per_10_min(samples: list[Sample], series: str) -> float:
    xs = [s.minute for s in samples]
    ys = [float(getattr(s, series)) for s in samples]
    if len(xs) < 2 or len(set(xs)) < 2:
        return 0.0
    return round(statistics.linear_regression(xs, ys).slope * 10, 3)


def verdicts(samples: list[Sample], rate: int) -> list[Verdict]:
    """After the warm-up (the first tenth, at least a minute), the last third against the first:
    each series' median, and the fire lag's worst sample too (a stall that grows every minute,
    say a periodic read over a growing collection, hides from a median)."""
    warm = max(1.0, samples[-1].minute / 10) if samples else 0.0
    settled = [s for s in samples if s.minute >= warm] or samples
    third = max(1, len(settled) // 3)
    head, tail = settled[:third], settled[-third:]
    median, worst = statistics.median, max
    checks: list[tuple[str, str, Callable[[Iterable[float]], float], Callable[[float], float]]] = [
        ("rss_mb", "rss_mb", median, lambda first: max(first * RSS_GROWTH, RSS_SLACK_MB)),
        ("lag_mean_s", "lag_mean_s", median, lambda first: LAG_SLACK_S),
        ("lag_mean_s worst", "lag_mean_s", worst, lambda first: max(first, LAG_SLACK_S)),
        ("lag_p95_s", "lag_p95_s", median, lambda first: LAG_SLACK_S),
        ("outbox_backlog", "outbox_backlog", median, lambda first: rate * BACKLOG_SLACK_SECONDS),
        ("due_backlog", "due_backlog", median, lambda first: rate * BACKLOG_SLACK_SECONDS),
    ]
    found = []
    for name, series, aggregate, allowance in checks:
        first = aggregate(float(getattr(s, series)) for s in head)
        last = aggregate(float(getattr(s, series)) for s in tail)
        allowed = allowance(first)
        found.append(
            Verdict(
                series=name,
                first_third=round(first, 3),
                last_third=round(last, 3),
                slope_per_10_min=slope_per_10_min(settled, series),
                allowed=round(allowed, 3),
                flat=last - first <= allowed,
            )
        )
    return found


def judged_again(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved run's result with today's verdicts (`--judge`): its samples judged again."""
    samples = [Sample(**sample) for sample in saved["samples"]]
    found = verdicts(samples, saved["rate"]) if samples else []
    flat = not saved["died"] and bool(found) and all(v.flat for v in found)
    return saved | {"flat": flat, "verdicts": [asdict(v) for v in found]}


def soak_stack(store: str) -> Stack:
    """The real stack; with `store` "sqlite", its store embedded and the rest real (Redis in a
    database of its own, its own topic), so that a soak beside one on FerretDB shares nothing
    with it (not the relay's turn, which is a Redis key)."""
    bus = KAFKA_URL.rsplit("/", 1)[0]
    if store == "sqlite":
        embedded = embedded_stack()
        return replace(
            embedded,
            kind="real-sqlite",
            lock_url=REDIS_URL.rsplit("/", 1)[0] + "/1",
            events_url=f"{bus}/tickd.soak-sqlite",
        )
    return replace(real_stack(), events_url=f"{bus}/tickd.soak")


def soak(
    rate: int, period: int, minutes: float, sample_seconds: float, store: str = "ferretdb"
) -> dict[str, Any]:
    stack = soak_stack(store)
    samples: list[Sample] = []
    died = False
    try:
        first = math.ceil(time.time() + LEAD_SECONDS + rate * period * 5e-3)
        timed_insert(stack, soak_jobs(rate, period, first))
        with Daemon(stack, "soak") as daemon:
            if not daemon.wait_ready(READY_WITHIN):
                raise SystemExit(f"the daemon was not ready: {daemon.log_tail()}")
            time.sleep(max(0.0, first - time.time()))
            start = time.time()
            before = Reading(time.time(), daemon.metrics() or "")
            while time.time() - start < minutes * 60:
                time.sleep(sample_seconds)
                text = daemon.metrics()
                if text is None:
                    died = True
                    print(f"the daemon stopped answering: {daemon.log_tail()}", file=sys.stderr)
                    break
                after = Reading(time.time(), text)
                samples.append(sample_between(start, before, after, daemon.pid))
                before = after
                print(json.dumps(asdict(samples[-1])), flush=True)
    finally:
        stack.cleanup()
    found = verdicts(samples, rate) if samples else []
    return {
        "store": store,
        "rate": rate,
        "period_s": period,
        "minutes": minutes,
        "sample_seconds": sample_seconds,
        "died": died,
        "flat": not died and bool(found) and all(v.flat for v in found),
        "verdicts": [asdict(v) for v in found],
        "samples": [asdict(s) for s in samples],
    }


def markdown(result: dict[str, Any]) -> str:
    samples = result["samples"]
    kept = statistics.median(s["executions_per_s"] for s in samples) if samples else 0
    verdict = "flat" if result["flat"] else "NOT flat"
    if result["died"]:
        verdict += ", the daemon died"
    lines = [
        f"Soak: {result['rate']} executions/s asked for "
        f"({result['rate'] * result['period_s']} jobs every {result['period_s']} s) "
        f"for {result['minutes']:g} min on the real stack"
        f"{' with the store on SQLite' if result.get('store') == 'sqlite' else ''}, "
        f"{kept:g}/s kept (median of the samples); {verdict}",
        "",
        "| series | first third | last third | slope per 10 min | allowed rise | flat |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {v['series']} | {v['first_third']} | {v['last_third']} | {v['slope_per_10_min']} | "
        f"{v['allowed']} | {'yes' if v['flat'] else 'NO'} |"
        for v in result["verdicts"]
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=50, help="executions a second")
    parser.add_argument(
        "--period",
        type=int,
        default=PERIOD_SECONDS,
        choices=[p for p in range(1, 61) if 60 % p == 0],
        help="seconds between two runs of one job (a divisor of 60)",
    )
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument(
        "--store",
        choices=["ferretdb", "sqlite"],
        default="ferretdb",
        help="sqlite: the store embedded, Redis and Kafka real (what the rest keeps past "
        "FerretDB's limit)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--judge",
        type=Path,
        help="judge the samples of a saved results.json again instead of running a soak",
    )
    args = parser.parse_args()
    if args.judge is not None:
        result = judged_again(json.loads(args.judge.read_text()))
    else:
        missing = real_stack_reachable()
        if missing:
            raise SystemExit(f"the real stack is needed (make services): {missing}")
        result = soak(args.rate, args.period, args.minutes, args.sample_seconds, args.store)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (args.out / "results.md").write_text(table)
    print(table)
    sys.exit(0 if result["flat"] else 1)


if __name__ == "__main__":
    main()
