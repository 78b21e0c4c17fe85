"""The results as Markdown tables (printed, and written beside the JSON), and the targets
beside what was measured."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.burst import LONG_RUNS_JOBS

Row = dict[str, Any]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and abs(value) >= 100:
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(rows: Sequence[Row], columns: Sequence[tuple[str, str]]) -> str:
    head = "| " + " | ".join(title for title, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_cell(row.get(key)) for _, key in columns) + " |" for row in rows]
    return "\n".join([head, rule, *body])


BURST_COLUMNS = [
    ("run", "label"),
    ("jobs", "jobs"),
    ("executions/s", "executions_per_s"),
    ("drain s", "drain_s"),
    ("lag p50 ms", "lag_p50_ms"),
    ("lag p99 ms", "lag_p99_ms"),
    ("lag max ms", "lag_max_ms"),
    ("critical p50 ms", "critical_lag_p50_ms"),
    ("critical p99 ms", "critical_lag_p99_ms"),
    ("critical max ms", "critical_lag_max_ms"),
    ("missed", "missed"),
    ("run twice", "run_twice"),
    ("store ops/exec", "store_ops_per_execution"),
    ("idle store ops/s", "idle_store_ops_per_s"),
    ("lock contention", "lock_contention"),
    ("peak RSS MB", "peak_rss_mb"),
    ("timed out", "timed_out"),
]
FLOOR_COLUMNS = [
    ("store", "label"),
    ("jobs", "jobs"),
    ("batch", "batch"),
    ("ran", "executed"),
    ("seconds", "seconds"),
    ("executions/s", "executions_per_s"),
    ("round trips/exec", "store_ops_per_execution"),
    ("statements/exec", "statements_per_execution"),
    ("s in due / claim / record / finish", "split"),
]
STEADY_COLUMNS = [
    ("run", "label"),
    ("executions/s", "rate_per_s"),
    ("seconds", "seconds"),
    ("expected", "expected"),
    ("ran", "executed"),
    ("lag p50 ms", "lag_p50_ms"),
    ("lag p99 ms", "lag_p99_ms"),
    ("lag max ms", "lag_max_ms"),
    ("missed", "missed"),
    ("skipped", "skipped"),
    ("run twice", "run_twice"),
    ("peak RSS MB", "peak_rss_mb"),
]


def _labelled(rows: Sequence[Row], label: Callable[[Row], str]) -> list[Row]:
    return [{**row, "label": label(row)} for row in rows]


STEPS = ("due", "claim", "record", "finish")


def _split(row: Row) -> Row:
    spent = row.get("seconds_by_call") or {}
    if "due_and_claim" in spent:  # one statement reads and claims (PostgreSQL)
        read = f"{_cell(spent['due_and_claim'])} (both)"
        return {**row, "split": " / ".join([read, *(_cell(spent.get(s)) for s in STEPS[2:])])}
    return {**row, "split": " / ".join(_cell(spent.get(step)) for step in STEPS)}


def render(results: Row) -> str:
    bursts = _labelled(
        results.get("burst", []),
        lambda r: f"{r.get('label') or r['stack']}" + (f" #{r['repeat']}" if "repeat" in r else ""),
    )
    floors = [_split(r) for r in _labelled(results.get("floor", []), _floor_label)]
    steady = _labelled(results.get("steady", []), lambda r: f"tickd {r['stack']}")
    parts = [
        "### Burst (N no-op one-shot jobs due in the same second, 1 % critical; "
        "the hourly row: cron jobs)",
        table(bursts, BURST_COLUMNS),
        "### Bare store floor (the batched store calls of a run, no engine)",
        table(floors, FLOOR_COLUMNS),
        "### Steady (cron jobs on `* * * * * *`)",
        table(steady, STEADY_COLUMNS),
        "### Fair share's cost: one burst over 1 domain and over many (each run, in order)",
        domains_tables(results.get("domains", [])),
        "### Targets",
        table(targets(results), [("target", "target"), ("measured", "measured"), ("met", "met")]),
    ]
    return "\n\n".join(parts) + "\n"


DOMAIN_FIGURES = [
    ("runs/s", "executions_per_s"),
    ("store ops a run", "store_ops_per_execution"),
    ("due reads a fetch", "due_reads_per_fetch"),
    ("fetch p50 ms", "fetch_p50_ms"),
    ("fetch p90 ms", "fetch_p90_ms"),
    ("fetch us a run", "fetch_us_per_run"),
    ("claim us a run", "claim_us_per_run"),
    ("last domain's first start ms", "first_start_max_ms"),
    ("missed", "missed"),
    ("run twice", "run_twice"),
]


def domains_tables(rows: Sequence[Row]) -> str:
    """Per stack, each figure with one domain and with many side by side, and many over one
    (of the medians); then the weighted runs' shares."""
    parts = []
    for stack in dict.fromkeys(r.get("stack") for r in rows if "error" not in r):
        even = [r for r in rows if r.get("stack") == stack and not r.get("weights")]
        counts = sorted({r["domains"] for r in even})
        if len(counts) < 2:
            continue
        one, many = counts[0], counts[-1]
        by = {n: [r for r in even if r["domains"] == n] for n in (one, many)}
        figures = [
            {
                "figure": title,
                "one": ", ".join(_cell(r.get(key)) for r in by[one]),
                "many": ", ".join(_cell(r.get(key)) for r in by[many]),
                "ratio": _median_ratio(by[many], by[one], key),
            }
            for title, key in DOMAIN_FIGURES
        ]
        jobs = _cell(even[0].get("jobs"))
        columns = [
            (f"{stack}, burst of {jobs}", "figure"),
            (f"{one} domain" + ("s" if one > 1 else ""), "one"),
            (f"{many} domains", "many"),
            (f"{many} / {one}", "ratio"),
        ]
        parts.append(table(figures, columns))
    weighted = [
        {**r, "weights": ":".join(map(str, r["weights"])), "shares": _shares(r)}
        for r in rows
        if r.get("weights") and "error" not in r
    ]
    if weighted:
        columns = [
            ("stack", "stack"),
            ("jobs", "jobs"),
            ("weights", "weights"),
            ("share while both had work", "shares"),
            ("runs/s", "executions_per_s"),
            ("store ops a run", "store_ops_per_execution"),
            ("fetch us a run", "fetch_us_per_run"),
        ]
        parts.append(table(weighted, columns))
    failed = [r for r in rows if "error" in r]
    parts += [f"- {r['stack']}, {r['domains']} domains: {r['error']}" for r in failed]
    return "\n\n".join(parts) if parts else "(not run)"


def _median_ratio(many: Sequence[Row], one: Sequence[Row], key: str) -> str:
    a = [r[key] for r in many if isinstance(r.get(key), int | float)]
    b = [r[key] for r in one if isinstance(r.get(key), int | float)]
    if not a or not b or not statistics.median(b):
        return "-"
    return f"{statistics.median(a) / statistics.median(b):.2f} x"


def _shares(row: Row) -> str:
    share = row.get("share") or {}
    weights: list[int] = row["weights"]
    got = " / ".join(f"{share[d]:.3f}" for d in sorted(share))
    wanted = " / ".join(f"{w / sum(weights):.3f}" for w in weights)
    return f"{got} (weights: {wanted})"


FLOOR_LABELS = {
    "embedded": "SQLite (WAL)",
    "real": "FerretDB 1.24 (PostgreSQL)",
    "postgresql": "PostgreSQL 15",
}


def _floor_label(row: Row) -> str:
    return FLOOR_LABELS[row["stack"]]


# -- the targets ----------------------------------------------------------------------------------


def _runs(results: Row, label: str, jobs: int) -> list[Row]:
    return [r for r in results.get("burst", []) if r.get("label") == label and r["jobs"] == jobs]


def _worst(rows: Sequence[Row], key: str, *, high_is_bad: bool) -> Any:
    values: list[float] = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return None
    return max(values) if high_is_bad else min(values)


def _verdict(value: Any, ok: Callable[[Any], bool]) -> str:
    return "not measured" if value is None else ("yes" if ok(value) else "NO")


def targets(results: Row) -> list[Row]:
    rows: list[Row] = []
    embedded = _runs(results, "tickd embedded", 30_000)
    peer = _runs(results, "APScheduler SQLite", 30_000)
    rate = _worst(embedded, "executions_per_s", high_is_bad=False)
    rows.append(_target("embedded burst 30,000: >= 10,000 executions/s", rate, lambda v: v >= 1e4))
    peer_rate = _worst(peer, "executions_per_s", high_is_bad=True)
    ratio = round(rate / peer_rate, 1) if rate and peer_rate else None
    rows.append(_target(">= 10 x APScheduler on SQLite, same burst", ratio, lambda v: v >= 10, "x"))
    for key, what in (("missed", "zero missed"), ("run_twice", "zero run twice")):
        worst = _worst(embedded, key, high_is_bad=True)
        rows.append(_target(f"embedded burst 30,000: {what}", worst, lambda v: v == 0))
    critical = _worst(embedded, "critical_lag_p99_ms", high_is_bad=True)
    rows.append(_target("critical p99 lag < 100 ms", critical, lambda v: v < 100, " ms"))
    for rate_per_s, limit in ((1000, 50), (2000, 200)):
        run = [
            r
            for r in results.get("steady", [])
            if r["stack"] == "embedded" and r["rate_per_s"] == rate_per_s
        ]
        p99 = _worst(run, "lag_p99_ms", high_is_bad=True)
        rows.append(
            _target(
                f"steady {rate_per_s}/s embedded: p99 < {limit} ms",
                p99,
                _below(limit),
                " ms",
            )
        )
    rows += _real_targets(results)
    rows += _postgresql_targets(results)
    ops = _worst(embedded, "store_ops_per_execution", high_is_bad=True)
    rows.append(
        _target(
            "< 0.1 store operations per execution (burst)",
            ops,
            lambda v: v < 0.1,
            missing="not measured: tickd_store_operations_total was not read",
        )
    )
    return rows


def _below(limit: float) -> Callable[[Any], bool]:
    return lambda value: bool(value < limit)


def _real_targets(results: Row) -> list[Row]:
    real = _runs(results, "tickd real", 3000)
    floors = [r for r in results.get("floor", []) if r["stack"] == "real" and r["jobs"] == 3000]
    rate = _worst(real, "executions_per_s", high_is_bad=False)
    floor = floors[0]["executions_per_s"] if floors else None
    rows = [_target("real burst 3,000: >= 500 executions/s", rate, lambda v: v >= 500)]
    ratio = round(floor / rate, 2) if rate and floor else None
    within = "real burst: within 1.5 x the store floor (floor rate / engine rate)"
    rows.append(_target(within, ratio, lambda v: v <= 1.5, " x"))
    steady = [r for r in results.get("steady", []) if r["stack"] == "real"]
    p99 = _worst(steady, "lag_p99_ms", high_is_bad=True)
    at = f" (run at {steady[0]['rate_per_s']}/s)" if steady else ""
    rows.append(_target(f"real steady: p99 < 100 ms{at}", p99, lambda v: v < 100, " ms"))
    return rows + _two_daemons_targets(
        "real burst 3,000", real, _runs(results, "tickd real, 2 daemons", 3000)
    )


def _postgresql_targets(results: Row) -> list[Row]:
    one = _runs(results, "tickd postgresql", 30_000)
    two = _runs(results, "tickd postgresql, 2 daemons", 30_000)
    floors = [
        r for r in results.get("floor", []) if r["stack"] == "postgresql" and r["jobs"] == 30_000
    ]
    rate = _worst(one, "executions_per_s", high_is_bad=False)
    floor = floors[0]["executions_per_s"] if floors else None
    share = round(100 * rate / floor) if rate and floor else None
    rows = [_target("postgresql burst 30,000: >= 40 % of the floor", share, _at_least(40), " %")]
    for key, what in (("missed", "zero missed"), ("run_twice", "zero run twice")):
        worst = _worst(one + two, key, high_is_bad=True)
        rows.append(_target(f"postgresql burst 30,000: {what}", worst, lambda v: v == 0))
    ops = _worst(one, "store_ops_per_execution", high_is_bad=True)
    rows.append(_target("postgresql: <= 0.05 store operations a run", ops, lambda v: v <= 0.05))
    rows += _two_daemons_targets("postgresql burst 30,000", one, two)
    one_long = _runs(results, "tickd postgresql, 1 s runs", LONG_RUNS_JOBS)
    two_long = _runs(results, "tickd postgresql, 1 s runs, 2 daemons", LONG_RUNS_JOBS)
    speedup = _ratio(two_long, one_long, "executions_per_s")
    what = "postgresql, 1 s runs: 2 daemons >= 1.8 x one"
    rows.append(_target(what, speedup, lambda v: v >= 1.8, " x"))
    return rows


def _two_daemons_targets(stack: str, one: list[Row], two: list[Row]) -> list[Row]:
    """Two daemons on one store against one: as fast, the same store work a run, no contention."""
    rate = _ratio(two, one, "executions_per_s")
    ops = _ratio(two, one, "store_ops_per_execution", worst_high=True)
    contention = _worst(two, "lock_contention", high_is_bad=True)
    return [
        _target(f"{stack}, 2 daemons: rate >= one daemon's", rate, lambda v: v >= 1, " x"),
        _target(
            f"{stack}, 2 daemons: store ops a run within 10 % of one's", ops, _at_most(1.1), " x"
        ),
        _target(f"{stack}, 2 daemons: 0 lock contention", contention, lambda v: v == 0),
    ]


def _ratio(two: list[Row], one: list[Row], key: str, *, worst_high: bool = False) -> float | None:
    """The worse of `two`'s runs over the worse of `one`'s."""
    a = _worst(two, key, high_is_bad=worst_high)
    b = _worst(one, key, high_is_bad=worst_high)
    return round(a / b, 2) if a and b else None


def _at_least(limit: float) -> Callable[[Any], bool]:
    return lambda value: bool(value >= limit)


def _at_most(limit: float) -> Callable[[Any], bool]:
    return lambda value: bool(value <= limit)


def _target(
    what: str, value: Any, ok: Callable[[Any], bool], unit: str = "", missing: str = "not measured"
) -> Row:
    if value is None:
        return {"target": what, "measured": missing, "met": "-"}
    return {"target": what, "measured": f"{_cell(value)}{unit}", "met": _verdict(value, ok)}
