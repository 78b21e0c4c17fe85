"""The fair share bench's own arithmetic (bench/domains.py, bench/report.py) and the daemon's
code it times (bench/timed_daemon.py): no daemon is started."""

from __future__ import annotations

from collections import Counter

from bench.burst import CRITICAL_EVERY
from bench.domains import domain_of_job, fetch_summary, first_starts, share_while_all_busy
from bench.records import Record
from bench.report import domains_tables
from bench.timed_daemon import FetchLog, timing
from tickd.scheduler.run.claim import Claimer
from tickd.scheduler.run.fetch import Fetcher


def record(job_id: str, start: float) -> Record:
    return Record(job_id, job_id, 0.0, start, start + 0.001, "success")


def test_the_domains_take_turns_and_so_do_their_critical_jobs() -> None:
    jobs = range(100 * CRITICAL_EVERY)
    assert Counter(domain_of_job(i, 100) for i in jobs) == dict.fromkeys(range(100), 100)
    critical = {domain_of_job(i, 100) for i in jobs if i % CRITICAL_EVERY == 0}
    assert critical == set(range(100))
    in_one = {domain_of_job(i, 100, head_in_one=True) for i in jobs if i % CRITICAL_EVERY == 0}
    assert in_one == {0}


def test_shares_are_counted_until_the_first_domain_started_its_last_run() -> None:
    domain_of = {f"a{n}": "a" for n in range(4)} | {f"b{n}": "b" for n in range(4)}
    # b's last run starts at 3; a has one run by then, and its other three later.
    starts = [("a0", 0.5), ("b0", 0.0), ("b1", 1.0), ("b2", 2.0), ("b3", 3.0)]
    starts += [("a1", 4.0), ("a2", 5.0), ("a3", 6.0)]
    shares = share_while_all_busy([record(j, t) for j, t in starts], domain_of)
    assert shares == {"a": 0.2, "b": 0.8}


def test_first_starts_say_when_the_last_domain_began() -> None:
    domain_of = {"a": "x", "b": "y", "c": "y"}
    starts = first_starts([record("a", 10.5), record("b", 12.0), record("c", 10.1)], domain_of, 10)
    assert starts == {"first_start_p50_ms": 100.0, "first_start_max_ms": 500.0}


def test_a_fetch_summary_spreads_time_over_the_runs_read() -> None:
    # began, fetch s, claim s, jobs read, runs kept, due reads
    fetches = [[0.0, 0.010, 0.002, 100, 100, 100], [1.0, 0.030, 0.004, 100, 90, 80]]
    summary = fetch_summary(fetches)
    assert summary["fetches"] == 2
    assert summary["due_reads_per_fetch"] == 90.0
    assert summary["fetch_us_per_run"] == 200.0
    assert summary["claim_us_per_run"] == 30.0
    assert summary["fetch_max_ms"] == 30.0


def test_the_report_puts_one_domain_and_many_side_by_side() -> None:
    rows = [
        {"stack": "embedded", "jobs": 10000, "domains": 1, "executions_per_s": 1000},
        {"stack": "embedded", "jobs": 10000, "domains": 100, "executions_per_s": 500},
        {
            "stack": "embedded",
            "jobs": 10000,
            "domains": 2,
            "weights": [1, 3],
            "share": {"d000": 0.25, "d001": 0.75},
        },
    ]
    text = domains_tables(rows)
    assert "| runs/s | 1,000 | 500 | 0.50 x |" in text
    assert "0.250 / 0.750 (weights: 0.250 / 0.750)" in text


def test_the_timed_daemon_wraps_the_dispatchers_fetch_and_claim() -> None:
    methods: list[tuple[type, str]] = [(Fetcher, "fetch"), (Fetcher, "_due_jobs")]
    methods += [(Fetcher, "_claimed_in_lanes"), (Claimer, "claim")]
    wrapped = [getattr(cls, name) for cls, name in methods]
    try:
        timing(FetchLog())
        now = [getattr(cls, name) for cls, name in methods]
        assert all(new is not old for new, old in zip(now, wrapped, strict=True))
    finally:
        for (cls, name), old in zip(methods, wrapped, strict=True):
            setattr(cls, name, old)
