"""Fair share's cost: a burst (bench/burst.py's jobs) spread evenly over D domains of equal weight,
or over domains of the weights given. Once more is due than a fetch takes, the fetch reads each
busy domain's head apart (scheduler/admission/fair_share.py), so a claim costs more the more
domains are busy. The daemon runs as bench/timed_daemon.py, which times each fetch and claim.

Beside the burst's figures: the fetches that read jobs, their due reads (one per domain read),
the time of a fetch and of the claim that follows it (p50, p90, max) and their sum over the runs;
with weights, each domain's share of the runs that started while every domain had runs left.

    python -m bench.domains --stack embedded|postgresql --jobs 10000 --domains 100
    python -m bench.domains --jobs 10000 --weights 1,3
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import time
from collections.abc import Sequence
from typing import Any

from bench.burst import (
    CRITICAL_EVERY,
    INSERT_SECONDS_PER_JOB,
    LEAD_SECONDS,
    burst_jobs,
    burst_summary,
)
from bench.records import Record, percentile
from bench.stack import STACKS, Stack
from bench.trial import FIRST_READ_SECONDS, observed_fields, timed_insert, watch
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.store import open_store

# Seconds more than a burst's lead: the first fetches of the burst, from its lookahead on, are
# what is measured, so the daemon must be up before them even on a busy machine (a start takes
# 1-2 s, 4-5 s in a slow spell).
EXTRA_LEAD_SECONDS = 5.0
# A fetch line of bench/timed_daemon.py: began, fetch s, claim s, jobs read, runs kept, due reads.
BEGAN, FETCH_S, CLAIM_S, READ, KEPT, DUE_READS = range(6)


def domain_names(count: int) -> list[str]:
    return [f"d{n:03}" for n in range(count)]


def domain_of_job(i: int, domains: int, *, head_in_one: bool = False) -> int:
    """Job i's domain: the domains take turns, and so do their critical jobs (every
    CRITICAL_EVERY-th), so the burst's head, its critical jobs, is in every domain. With
    `head_in_one`, every critical job is in the first domain."""
    return i % domains if head_in_one else (i + i // CRITICAL_EVERY) % domains


def run_domains(
    stack: Stack,
    count: int,
    *,
    domains: int = 1,
    weights: Sequence[int] = (),
    head_in_one: bool = False,
    timeout_seconds: float,
    log_level: str = "INFO",
) -> dict[str, Any]:
    """One burst of `count` jobs over `domains` domains (over len(`weights`) domains of those
    weights, if given), as domain_of_job spreads them, on a fresh stack (cleaned up
    afterwards)."""
    names = domain_names(len(weights) or domains)
    try:
        lead = LEAD_SECONDS[stack.kind] + EXTRA_LEAD_SECONDS
        lead += count * INSERT_SECONDS_PER_JOB[stack.kind]
        due = math.ceil(time.time() + lead)
        jobs = [
            dataclasses.replace(
                job, domain=names[domain_of_job(i, len(names), head_in_one=head_in_one)]
            )
            for i, job in enumerate(burst_jobs(count, due, "burst"))
        ]
        insert_s = timed_insert(stack, jobs)
        asyncio.run(_put_weights(stack, dict(zip(names, weights, strict=False))))
        seen = watch(
            stack,
            "burst",
            due=due,
            done=lambda finished, _elapsed: finished >= count,
            timeout_seconds=timeout_seconds,
            stall_seconds=min(60.0, timeout_seconds),
            log_level=log_level,
            timed=True,
        )
    finally:
        stack.cleanup()
    result = burst_summary(stack.kind, count, due, insert_s, seen.records)
    if seen.timed_out:
        result["drain_s"] = None
    executed = result["executed"]
    fetches = [f for f in seen.fetches if f[BEGAN] >= due - FIRST_READ_SECONDS]
    domain_of = {job.id: job.domain for job in jobs}
    shares = share_while_all_busy(seen.records, domain_of) if weights else None
    return (
        {"domains": len(names), "weights": list(weights) or None, "head_in_one": head_in_one}
        | result
        | fetch_summary(fetches)
        | first_starts(seen.records, domain_of, due)
        | {"share": shares}
        | observed_fields(seen, executed)
    )


async def _put_weights(stack: Stack, weights: dict[str, int]) -> None:
    if not weights:
        return
    store = open_store(stack.store_url)
    await store.open()
    try:
        for name, weight in weights.items():
            await store.put_domain(DomainSettings(name=name, weight=weight))
    finally:
        await store.close()


def fetch_summary(fetches: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The fetches that read jobs: how many, their due reads, their time and their claims'."""
    if not fetches:
        return {"fetches": 0}
    read = sum(f[READ] for f in fetches)
    fetch_s = sorted(f[FETCH_S] for f in fetches)
    claim_s = sorted(f[CLAIM_S] for f in fetches)
    return {
        "fetches": len(fetches),
        "jobs_per_fetch": round(read / len(fetches), 1),
        "due_reads_per_fetch": round(sum(f[DUE_READS] for f in fetches) / len(fetches), 1),
        **_ms("fetch", fetch_s),
        **_ms("claim", claim_s),
        "fetch_us_per_run": round(1e6 * sum(fetch_s) / read, 1) if read else None,
        "claim_us_per_run": round(1e6 * sum(claim_s) / read, 1) if read else None,
    }


def _ms(what: str, seconds: Sequence[float]) -> dict[str, float | None]:
    def ms(value: float | None) -> float | None:
        return None if value is None else round(1000 * value, 2)

    return {
        f"{what}_p50_ms": ms(percentile(seconds, 0.5)),
        f"{what}_p90_ms": ms(percentile(seconds, 0.9)),
        f"{what}_max_ms": ms(seconds[-1] if seconds else None),
    }


def first_starts(
    records: Sequence[Record], domain_of: dict[str, str], due: float
) -> dict[str, float | None]:
    """How long after the burst fell due each domain's first run started: the median and the
    last of the domains. Fair share starts every busy domain within the first fetches."""
    first: dict[str, float] = {}
    for record in records:
        if record.handler_start is not None:
            domain = domain_of[record.job_id]
            first[domain] = min(first.get(domain, math.inf), record.handler_start)
    lags = sorted(start - due for start in first.values())
    p50 = percentile(lags, 0.5)
    return {
        "first_start_p50_ms": None if p50 is None else round(1000 * p50, 1),
        "first_start_max_ms": round(1000 * lags[-1], 1) if lags else None,
    }


def share_while_all_busy(records: Sequence[Record], domain_of: dict[str, str]) -> dict[str, float]:
    """Each domain's share of the runs started until the first domain started its last one:
    while every domain still had runs to start."""
    starts: dict[str, list[float]] = {}
    for record in records:
        if record.handler_start is not None:
            starts.setdefault(domain_of[record.job_id], []).append(record.handler_start)
    if not starts:
        return {}
    until = min(max(times) for times in starts.values())
    counted = {domain: sum(1 for t in times if t <= until) for domain, times in starts.items()}
    total = sum(counted.values())
    return {domain: round(counted[domain] / total, 3) for domain in sorted(counted)}


def _weights(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", choices=tuple(STACKS), default="embedded")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--domains", type=int, default=1)
    parser.add_argument("--weights", type=_weights, default=[], help="e.g. 1,3: one domain each")
    parser.add_argument(
        "--head-in-one-domain", action="store_true", help="every critical job in the first one"
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    result = run_domains(
        STACKS[args.stack](),
        args.jobs,
        domains=args.domains,
        weights=args.weights,
        head_in_one=args.head_in_one_domain,
        timeout_seconds=args.timeout,
        log_level=args.log_level,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
