"""`make bench`: every performance figure and target in one run, side by side, on this machine.

1. the bare floor of each store (SQLite, FerretDB, PostgreSQL): the batched store calls without
   the engine;
2. bursts: N no-op one-shot jobs due in the same second, the real daemon (`python -m tickd run`)
   on the embedded stack, on the real one (FerretDB + Redis + Kafka) and on PostgreSQL (+
   Redis, for the relay's turn only, + Kafka), each twice; on PostgreSQL with one daemon and
   with two;
3. the peer: APScheduler 3.x on the same bursts, on SQLite (SQLAlchemy) and in memory;
4. steady load: cron jobs on `* * * * * *` at 1,000 and 2,000 a second (embedded), at half
   the FerretDB floor (real stack) and at 1,000 a second on PostgreSQL;
5. fair share's cost: one burst over 1 domain and over 100, alternating, embedded and on
   PostgreSQL, each fetch and claim timed; and (embedded) over 2 domains of weights 1 and 3;
6. a profile of the largest embedded burst under py-spy (a run of its own, not counted above).

Prints Markdown tables and writes var/bench/results.json (after every step, so an interrupted
run keeps what it measured) and var/bench/results.md. Measures; asserts nothing. Every wait is
bounded: a run that does not finish in time is stopped and reported as it was.

    python -m bench.run [--sizes 3000,10000,30000] [--real-sizes 3000] [--steady-seconds 120]
                        [--postgresql-sizes 3000,30000] [--no-real] [--no-postgresql]
                        [--no-embedded] [--no-profile] [--repeats 2]
                        [--no-domains | --domains-only] [--domains-repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.burst import LONG_RUNS_JOBS, run_burst
from bench.domains import run_domains
from bench.floor import run_floor
from bench.peer_apscheduler import run_peer
from bench.profile import top_costs
from bench.report import render
from bench.stack import (
    Stack,
    embedded_stack,
    postgresql_reachable,
    postgresql_stack,
    real_stack,
    real_stack_reachable,
)
from bench.steady import run_steady

ROOT = Path(__file__).resolve().parent.parent
# The floor's job count for the real stack's steady rate: as many jobs as the target's 200/s.
STEADY_FLOOR_JOBS = 200


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, cwd=ROOT, check=False
        )
        .stdout.decode()
        .strip()
    )
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "nproc": os.cpu_count(),
        "memory_gb": round(memory_kb / 1024 / 1024, 1),
        "cpu": cpu,
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.results: dict[str, Any] = {
            "machine": machine(),
            "command": " ".join([Path(sys.executable).name, "-m", "bench.run", *sys.argv[1:]]),
            "floor": [],
            "burst": [],
            "steady": [],
            "domains": [],
        }

    def save(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.results, indent=2) + "\n")
        self.out.with_suffix(".md").write_text(render(self.results))

    def step(
        self,
        section: str,
        what: str,
        measure: Callable[..., dict[str, Any]],
        *args: Any,
        labels: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """One measurement, kept (and saved at once) whatever becomes of it."""
        print(f"[bench] {what} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            row = {**(labels or {}), **measure(*args, **kwargs)}
        except Exception as exc:  # one failed measurement must not lose the others
            row = {**(labels or {}), "error": f"{type(exc).__name__}: {exc}"}
        row["wall_s"] = round(time.monotonic() - started, 1)
        print(f"[bench]   {json.dumps(row)}", file=sys.stderr, flush=True)
        self.results[section].append(row)
        self.save()

    def run(self) -> None:
        a = self.args
        missing = None if a.no_real else real_stack_reachable()
        real = not a.no_real and missing is None
        if missing:
            self.results["real_stack_skipped"] = f"{missing} (scripts/services.sh start)"
        missing = None if a.no_postgresql else postgresql_reachable()
        postgresql = not a.no_postgresql and missing is None
        if missing:
            self.results["postgresql_skipped"] = f"{missing} (scripts/services.sh start)"
        if a.domains_only:
            self.domains(postgresql)
            self.finish()
            return
        self.floors(real)
        self.bursts(real)
        if postgresql:
            self.postgresql()
        if not a.no_embedded:
            self.peers()
        self.steady(real)
        if not a.no_domains:
            self.domains(postgresql)
        if not a.no_profile and not a.no_embedded:
            self.profile()
        self.finish()

    def finish(self) -> None:
        self.results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        self.save()
        print(render(self.results))
        print(f"[bench] written: {self.out} and {self.out.with_suffix('.md')}", file=sys.stderr)

    def floors(self, real: bool) -> None:
        for jobs in [] if self.args.no_embedded else self.args.sizes:
            self.step("floor", f"floor SQLite {jobs}", run_floor, embedded_stack(), jobs)
        if real:
            for jobs in [*self.args.real_sizes, STEADY_FLOOR_JOBS]:
                limit = self.args.real_floor_seconds
                self.step("floor", f"floor FerretDB {jobs}", run_floor, real_stack(), jobs, limit)

    def bursts(self, real: bool) -> None:
        a = self.args
        plans: list[tuple[str, Callable[[], Stack], list[int], float]] = []
        if not a.no_embedded:
            plans.append(("tickd embedded", embedded_stack, a.sizes, a.burst_timeout))
        if real:
            plans.append(("tickd real", real_stack, a.real_sizes, a.real_burst_timeout))
        for label, stack, sizes, timeout in plans:
            # Two daemons on the one store too, on the real stack (alternating with one).
            fleets = (1, 2) if stack is real_stack else (1,)
            for jobs in sizes:
                for repeat in range(1, a.repeats + 1):
                    for daemons in fleets:
                        named = label + (f", {daemons} daemons" if daemons > 1 else "")
                        self.step(
                            "burst",
                            f"{named} burst {jobs} #{repeat}",
                            run_burst,
                            stack(),
                            jobs,
                            timeout_seconds=timeout,
                            log_level=a.log_level,
                            daemons=daemons,
                            labels={"label": named, "repeat": repeat, "daemons": daemons},
                        )
        if not a.no_embedded:
            # The top of the hour as it comes: cron jobs, each advanced to its next fire time.
            jobs = max(a.sizes)
            self.step(
                "burst",
                f"tickd embedded hourly cron burst {jobs}",
                run_burst,
                embedded_stack(),
                jobs,
                timeout_seconds=a.burst_timeout,
                log_level=a.log_level,
                hourly=True,
                labels={"label": "tickd embedded, hourly cron jobs"},
            )

    def postgresql(self) -> None:
        """The floor, then the daemon's bursts with one instance and with two on the one store
        (same sizes, alternating), then steady load."""
        a = self.args
        for jobs in a.postgresql_sizes:
            self.step("floor", f"floor PostgreSQL {jobs}", run_floor, postgresql_stack(), jobs)
        for jobs in a.postgresql_sizes:
            for repeat in range(1, a.repeats + 1):
                for daemons in (1, 2):
                    label = "tickd postgresql" + (f", {daemons} daemons" if daemons > 1 else "")
                    self.step(
                        "burst",
                        f"{label} burst {jobs} #{repeat}",
                        run_burst,
                        postgresql_stack(),
                        jobs,
                        timeout_seconds=a.burst_timeout,
                        log_level=a.log_level,
                        daemons=daemons,
                        labels={"label": label, "repeat": repeat, "daemons": daemons},
                    )
        # Runs of a second: the workers, not the store, set the pace; a second daemon brings
        # its own.
        for daemons in (1, 2):
            label = "tickd postgresql, 1 s runs" + (f", {daemons} daemons" if daemons > 1 else "")
            self.step(
                "burst",
                f"{label} burst {LONG_RUNS_JOBS}",
                run_burst,
                postgresql_stack(),
                LONG_RUNS_JOBS,
                timeout_seconds=a.burst_timeout,
                log_level=a.log_level,
                daemons=daemons,
                handler_seconds=1.0,
                labels={"label": label, "daemons": daemons},
            )
        rate = a.postgresql_steady_rate
        self.step(
            "steady",
            f"steady postgresql {rate}/s",
            run_steady,
            postgresql_stack(),
            rate,
            a.steady_seconds,
            log_level=a.log_level,
        )

    def peers(self) -> None:
        for store, label in (("sqlite", "APScheduler SQLite"), ("memory", "APScheduler memory")):
            for jobs in self.args.sizes:
                timeout = self.args.burst_timeout
                self.step(
                    "burst",
                    f"{label} burst {jobs}",
                    run_peer,
                    store,
                    jobs,
                    timeout,
                    labels={"label": label},
                )

    def steady(self, real: bool) -> None:
        seconds = self.args.steady_seconds
        level = self.args.log_level
        for rate in [] if self.args.no_embedded else self.args.steady_rates:
            self.step(
                "steady",
                f"steady embedded {rate}/s",
                run_steady,
                embedded_stack(),
                rate,
                seconds,
                log_level=level,
            )
        if real:
            rate = self.real_steady_rate()
            self.step(
                "steady",
                f"steady real {rate}/s",
                run_steady,
                real_stack(),
                rate,
                seconds,
                log_level=level,
            )

    def real_steady_rate(self) -> int:
        """Half the FerretDB floor measured with STEADY_FLOOR_JOBS jobs (design.md), at most
        the target's 200/s, at least 1."""
        if self.args.real_steady_rate:
            return int(self.args.real_steady_rate)
        floors = [
            r
            for r in self.results["floor"]
            if r.get("stack") == "real" and r.get("jobs") == STEADY_FLOOR_JOBS
        ]
        floor = floors[0].get("executions_per_s") if floors else None
        return max(1, min(200, int(floor) // 2)) if floor else 50

    def domains(self, postgresql: bool) -> None:
        """One burst over 1 domain and over `--many-domains`, alternating, on each stack; then,
        embedded, over two domains of weights 1 and 3."""
        a = self.args
        plans: list[tuple[str, Callable[[], Stack], int]] = []
        if not a.no_embedded:
            plans.append(("embedded", embedded_stack, a.domains_jobs))
        if postgresql:
            plans.append(("postgresql", postgresql_stack, a.domains_postgresql_jobs))
        for kind, stack, jobs in plans:
            for repeat in range(1, a.domains_repeats + 1):
                for domains in (1, a.many_domains):
                    self._domains_step(kind, stack, jobs, repeat, domains=domains)
            if kind == "embedded":
                self._domains_step(kind, stack, jobs, 1, weights=(1, 3))

    def _domains_step(
        self,
        kind: str,
        stack: Callable[[], Stack],
        jobs: int,
        repeat: int,
        *,
        domains: int = 1,
        weights: tuple[int, ...] = (),
    ) -> None:
        over = f"{domains} domain" + ("s" if domains > 1 else "")
        over = f"weights {':'.join(map(str, weights))}" if weights else over
        self.step(
            "domains",
            f"{kind} burst {jobs} over {over} #{repeat}",
            run_domains,
            stack(),
            jobs,
            domains=domains,
            weights=weights,
            timeout_seconds=self.args.burst_timeout,
            log_level=self.args.log_level,
            labels={"stack": kind, "domains": len(weights) or domains, "repeat": repeat},
        )

    def profile(self) -> None:
        jobs = max(self.args.sizes)
        raw = self.out.parent / "profile.txt"

        def profiled() -> dict[str, Any]:
            result = run_burst(
                embedded_stack(),
                jobs,
                timeout_seconds=self.args.burst_timeout,
                log_level=self.args.log_level,
                profile=raw,
            )
            costs = top_costs(raw) if raw.exists() else {"error": "py-spy wrote nothing"}
            return {"label": "tickd embedded under py-spy", "jobs": jobs, "burst": result, **costs}

        print(f"[bench] profile: embedded burst {jobs} under py-spy ...", file=sys.stderr)
        try:
            self.results["profile"] = profiled()
        except Exception as exc:
            self.results["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
        self.save()


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=_sizes, default=[3000, 10000, 30000])
    parser.add_argument("--real-sizes", type=_sizes, default=[3000])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steady-rates", type=_sizes, default=[1000, 2000])
    parser.add_argument("--steady-seconds", type=float, default=120.0)
    parser.add_argument("--real-steady-rate", type=int, default=0, help="0: half the floor")
    parser.add_argument("--burst-timeout", type=float, default=180.0)
    parser.add_argument("--real-burst-timeout", type=float, default=120.0)
    parser.add_argument("--real-floor-seconds", type=float, default=60.0)
    parser.add_argument("--postgresql-sizes", type=_sizes, default=[3000, 30000])
    parser.add_argument("--postgresql-steady-rate", type=int, default=1000)
    parser.add_argument("--log-level", default="INFO", help="the daemon's log_level")
    parser.add_argument("--no-real", action="store_true", help="embedded stack and peers only")
    parser.add_argument("--no-postgresql", action="store_true", help="no PostgreSQL stack")
    parser.add_argument(
        "--no-embedded", action="store_true", help="the real stack only (no SQLite, no peers)"
    )
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--no-domains", action="store_true", help="no fair share bursts")
    parser.add_argument("--domains-only", action="store_true", help="the fair share bursts only")
    parser.add_argument("--domains-jobs", type=int, default=10000, help="embedded")
    parser.add_argument("--domains-postgresql-jobs", type=int, default=3000)
    parser.add_argument("--many-domains", type=int, default=100)
    parser.add_argument("--domains-repeats", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "results.json"))
    # SIGTERM unwinds like Ctrl-C, so every daemon and profiler started is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    Bench(parser.parse_args()).run()


if __name__ == "__main__":
    main()
