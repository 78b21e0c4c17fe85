"""Domains on a real daemon (PostgreSQL store, Redis, Kafka): one domain's endpoint hangs and
the other domains' runs keep their time; under saturation the domains share the workers by
weight, and a domain with nothing due leaves its share to the others.

Per-endpoint concurrency keys are not built: the isolation here is what an operator configures
today, `max_running` on the noisy domain (`tickd domains set a --max-running 10`), so that its
hanging runs hold at most that many of the workers. NOISY_TENANT_CAP=0 runs the first test
without the cap: it then fails (docs/reliability.md has the figures).

PostgreSQL only, to keep within a few minutes: the noisy tenant asks 60 runs a second in its
quiet phases, more than the soak's 50 a second on FerretDB (docs/reliability.md).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.system.stack import (
    Daemon,
    Endpoints,
    Report,
    Sandbox,
    alive_until,
    daemons,
    eventually,
    executions,
    next_whole_second,
    percentile,
    sleeping_jobs,
    statuses,
    webhook_jobs,
)
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.model import Execution, Misfire

pytestmark = [pytest.mark.system]

WORKERS = 30

# -- the noisy tenant ---------------------------------------------------------------------------

# Jobs every second by domain. The noisy one has more jobs than there are workers, so that
# without its cap its hanging runs would hold every worker.
JOBS = {"a": 40, "b": 10, "c": 10}
NOISY = "a"
# 0: no cap. Not a TICKD_ variable: the daemons, which inherit the test's environment, refuse
# those they do not know.
CAP = int(os.environ.get("NOISY_TENANT_CAP", "10"))
# How long a run waits for the hanging endpoint (the webhook's timeout).
HANG_SECONDS = 3.0
# Quiet and noisy in turn, so that the machine's load, which other suites change by the minute,
# weighs on both alike.
PHASES = ("quiet", "noisy") * 3
PHASE_SECONDS = 15
# A quiet phase is measured once the runs left hanging by the noisy one before it have ended.
SETTLE_SECONDS = HANG_SECONDS + 1
# The daemon's first seconds of work (connections, caches) are in no phase.
WARM_UP_SECONDS = 5
# The noisy phases' p99 may exceed the quiet ones' by 20 % or by this, whichever is more: see
# test_a_hanging_endpoint_of_one_domain_leaves_the_others_runs_on_time.
LAG_FLOOR_SECONDS = 0.050


@dataclass(frozen=True)
class Phase:
    kind: str  # quiet or noisy
    start: datetime
    end: datetime

    @property
    def measured_from(self) -> datetime:
        settle = SETTLE_SECONDS if self.kind == "quiet" else 0
        return self.start + timedelta(seconds=settle)

    def measures(self, run: Execution) -> bool:
        """Whether the run's occurrence is in the measured part of the phase."""
        return self.measured_from <= run.scheduled_at < self.end


def phases_from(first: datetime) -> list[Phase]:
    start = first + timedelta(seconds=WARM_UP_SECONDS)
    step = timedelta(seconds=PHASE_SECONDS)
    return [Phase(kind, start + i * step, start + (i + 1) * step) for i, kind in enumerate(PHASES)]


def max_in_flight(runs: Iterable[Execution]) -> int:
    """The most runs in flight at once, from their starts and ends."""
    edges = sorted(
        edge
        for run in runs
        if run.started_at is not None and run.finished_at is not None
        for edge in ((run.started_at, 1), (run.finished_at, -1))
    )
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@dataclass
class Lags:
    """Fire lags (handler start minus occurrence) of one domain in one kind of phase."""

    values: list[float]

    @property
    def p50(self) -> float:
        return percentile(sorted(self.values), 0.5)

    @property
    def p99(self) -> float:
        return percentile(sorted(self.values), 0.99)

    def __str__(self) -> str:
        return f"p50 {self.p50 * 1000:.1f} ms, p99 {self.p99 * 1000:.1f} ms ({len(self.values)})"


def lags_of(
    runs: Sequence[Execution], domain_of: dict[str, str], phases: Sequence[Phase]
) -> dict[tuple[str, str], Lags]:
    """Each (domain, phase kind)'s lags, and each single phase's, as (domain, "quiet 1")."""
    found: dict[tuple[str, str], Lags] = defaultdict(lambda: Lags([]))
    numbers: Counter[str] = Counter()
    for phase in phases:
        numbers[phase.kind] += 1
        for run in runs:
            if run.started_at is None or not phase.measures(run):
                continue
            lag = (run.started_at - run.scheduled_at).total_seconds()
            domain = domain_of[run.job_id]
            found[domain, phase.kind].values.append(lag)
            found[domain, f"{phase.kind} {numbers[phase.kind]}"].values.append(lag)
    return found


def measured(run: Execution, phases: Sequence[Phase]) -> bool:
    return any(phase.measures(run) for phase in phases)


def due_in(phases: Sequence[Phase]) -> int:
    """Occurrences of a job every second in the measured parts of the phases."""
    return sum(int((p.end - p.measured_from).total_seconds()) for p in phases)


def started_hanging(runs: Sequence[Execution], phases: Sequence[Phase]) -> list[Execution]:
    """Runs that called the endpoint while it hung and gave up before it answered again:
    started in a noisy phase, a timeout and half a second before its end at least."""
    margin = timedelta(seconds=HANG_SECONDS + 0.5)
    return [
        run
        for run in runs
        if run.started_at is not None
        and any(p.kind == "noisy" and p.start <= run.started_at < p.end - margin for p in phases)
    ]


async def add_domains_jobs(
    sandbox: Sandbox, endpoints: Endpoints, first: datetime
) -> dict[str, str]:
    """Each domain's jobs, calling its endpoint; returns each job's domain by its id."""
    domain_of: dict[str, str] = {}
    for domain, count in JOBS.items():
        jobs = webhook_jobs(
            count,
            first,
            prefix=f"{domain}-{sandbox.tag}",
            url=endpoints.url(domain),
            domain=domain,
            timeout_seconds=HANG_SECONDS,
            # A run that gave up late runs once for what it missed, as a poll would.
            misfire=Misfire(grace_seconds=1.0) if domain == NOISY else None,
        )
        await sandbox.add_jobs(jobs)
        domain_of |= {job.id: domain for job in jobs}
    return domain_of


async def play(phases: Sequence[Phase], endpoints: Endpoints, running: list[Daemon]) -> None:
    """The noisy domain's endpoint hangs in the noisy phases and answers in the quiet ones."""
    for phase in phases:
        await alive_until(phase.start, running)
        if phase.kind == "noisy":
            endpoints.hang(NOISY)
        else:
            endpoints.answer(NOISY)
    await alive_until(phases[-1].end, running)
    endpoints.answer(NOISY)
    # The last occurrences run before the stop.
    await alive_until(phases[-1].end + timedelta(seconds=2), running)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", ["postgresql"])
async def test_a_hanging_endpoint_of_one_domain_leaves_the_others_runs_on_time(
    sandbox: Sandbox, tmp_path: Path, report: Report
) -> None:
    """Three domains of jobs every second, each calling an endpoint of its own; the noisy one's
    hangs in every other phase until its runs give up. The other domains' p99 fire lag in the
    noisy phases must stay within 1.2 times the quiet phases', or LAG_FLOOR_SECONDS more.

    The floor: the lags are milliseconds, and a p99 of a few hundred runs is set by the worst
    second or two of a phase (all of a domain's jobs fire at once), so one stall of the machine
    moves it by its whole length whatever the phase. Over nine runs on the 2-core development
    machine, three of them beside a process keeping a core busy (load average up to 8), a
    domain's p99 was 3-27 ms in a phase, once 47 ms in one phase where the others of its kind
    were 10-12 ms. Against the quiet phases', the noisy phases' p99 was up to 8 ms lower in
    three runs, 1-11 ms higher in five, and 32 ms higher in the run of that stall. 50 ms is above
    any of those, and two hundred times below what the other domains wait without the cap (10 s)."""
    if CAP:
        await sandbox.put_domains(DomainSettings(name=NOISY, max_running=CAP))
    settings = {"http_allow": ["127.0.0.1"], "workers": WORKERS}
    async with (
        Endpoints() as endpoints,
        daemons(sandbox, tmp_path, ["d"], **settings) as running,
    ):
        first = next_whole_second(datetime.now(UTC), 2)
        domain_of = await add_domains_jobs(sandbox, endpoints, first)
        phases = phases_from(first)
        await play(phases, endpoints, running)
        assert await running[0].stop() == 0

    runs = [run for run in await executions(sandbox) if run.job_id in domain_of]
    lags = lags_of(runs, domain_of, phases)
    noisy = [run for run in runs if domain_of[run.job_id] == NOISY]
    hung = started_hanging(noisy, phases)
    in_flight = max_in_flight(noisy)
    others = [run for run in runs if domain_of[run.job_id] != NOISY]
    occurrences = Counter((r.job_id, r.scheduled_at) for r in others if measured(r, phases))
    for key in sorted(lags):
        report(f"{key[0]} {key[1]}: {lags[key]}")
    report(
        f"{NOISY}: cap {CAP or 'none'}, at most {in_flight} in flight; runs that called it "
        f"hanging {dict(Counter(str(r.status) for r in hung))}; calls {dict(endpoints.calls)}"
    )
    report(
        f"the others: {len(others)} runs, {dict(Counter(str(r.status) for r in others))}; "
        f"{len(occurrences)} occurrences measured, run twice "
        f"{sum(1 for n in occurrences.values() if n > 1)}"
    )

    assert Counter(str(r.status) for r in others) == {"success": len(others)}
    assert set(occurrences.values()) == {1}, "an occurrence of the other domains ran twice"
    assert len(occurrences) == due_in(phases) * (len(domain_of) - JOBS[NOISY])
    assert hung and all(
        r.status == "failed" and r.error is not None and "no response within" in r.error.message
        for r in hung
    ), Counter((str(r.status), r.error and r.error.message) for r in hung)
    if CAP:
        assert in_flight == CAP, "the noisy domain's runs in flight: its cap and no more"
    for domain in JOBS.keys() - {NOISY}:
        before, during = lags[domain, "quiet"], lags[domain, "noisy"]
        bound = max(1.2 * before.p99, before.p99 + LAG_FLOOR_SECONDS)
        assert during.p99 < bound, f"{domain}: quiet {before}, noisy {during}"


# -- weights under saturation -------------------------------------------------------------------

# One-shot jobs by domain, all due at one instant: far more than the workers, who are the
# bottleneck (30 runs of 50 ms at a time: 600 a second at most; one daemon on PostgreSQL
# claims over 1,600 a second, docs/performance.md).
BACKLOG = 2_000
RUN_SECONDS = 0.05
WEIGHTS = {"light": 1, "heavy": 3, "idle": 6}  # idle: nothing due
BATCH = 100  # the daemon's batch_size, its default


@dataclass(frozen=True, order=True)
class Start:
    at: float  # seconds after the first start
    ended: float
    domain: str


def occupancy(starts: Sequence[Start], lo: float, hi: float) -> float:
    """The mean runs in flight from `lo` to `hi` (seconds after the first start)."""
    busy = sum(max(0.0, min(s.ended, hi) - max(s.at, lo)) for s in starts)
    return busy / (hi - lo)


def shares_by_second(starts: Sequence[Start], lo: float, hi: float) -> list[str]:
    """Heavy runs started for each light one, second by second from `lo` to `hi`: where the
    share broke, if it did."""
    seconds: dict[int, Counter[str]] = defaultdict(Counter)
    for s in starts:
        if lo <= s.at < hi:
            seconds[int(s.at)][s.domain] += 1
    return [f"{n['heavy'] / max(1, n['light']):.2f}" for _, n in sorted(seconds.items())]


async def add_backlog(sandbox: Sandbox, at: datetime) -> dict[str, str]:
    """BACKLOG one-shot jobs of the light and of the heavy domain due at `at`, and a few of the
    idle one an hour later; returns the busy domains' jobs' domains by their ids."""
    domain_of: dict[str, str] = {}
    for domain in ("light", "heavy"):
        prefix = f"{domain}-{sandbox.tag}"
        jobs = sleeping_jobs(BACKLOG, prefix=prefix, seconds=RUN_SECONDS, once_at=at, domain=domain)
        await sandbox.add_jobs(jobs)
        domain_of |= {job.id: domain for job in jobs}
    later = at + timedelta(hours=1)
    prefix = f"idle-{sandbox.tag}"
    await sandbox.add_jobs(
        sleeping_jobs(10, prefix=prefix, seconds=RUN_SECONDS, once_at=later, domain="idle")
    )
    return domain_of


@pytest.mark.timeout(180)
@pytest.mark.parametrize("store", ["postgresql"])
async def test_under_saturation_domains_share_the_workers_by_weight(
    sandbox: Sandbox, tmp_path: Path, report: Report
) -> None:
    """Weights 1 and 3, 2,000 runs due at once each: while both have runs due, 3 runs of the
    heavy domain start for each of the light one's (within 10 %). The idle domain, weight 6 and
    nothing due, takes no share: the workers stay busy while both domains have work, and once
    the heavy one is done the light one alone keeps them busy.

    Counted from the third fetch of 100: the first reads everything due, most urgent first (the
    domain whose jobs sort first), and only then are the domains seen busy; the second finds the
    other domain in the lane of the others; the third reads each for its share. Counted until
    the heavy domain has a fetch's worth left, so that its last few runs, however late, do not
    stretch the count into the light domain's time alone."""
    await sandbox.put_domains(*(DomainSettings(name=n, weight=w) for n, w in WEIGHTS.items()))
    async with daemons(sandbox, tmp_path, ["d"], workers=WORKERS, batch_size=BATCH) as running:
        domain_of = await add_backlog(sandbox, next_whole_second(datetime.now(UTC), 2))

        async def drained() -> bool:
            return (await statuses(sandbox, "sleep"))["success"] >= 2 * BACKLOG

        took = await eventually("the backlog drained", drained, within=120)
        assert await running[0].stop() == 0

    runs = [run for run in await executions(sandbox) if run.job_id in domain_of]
    starts = starts_of(runs, domain_of)
    by_domain = {d: [s.at for s in starts if s.domain == d] for d in ("light", "heavy")}
    lo, hi = starts[2 * BATCH].at, min(at[BACKLOG - BATCH] for at in by_domain.values())
    shared = Counter(s.domain for s in starts if lo <= s.at < hi)
    ratio = shared["heavy"] / shared["light"]
    heavy_done, last = by_domain["heavy"][-1], starts[-1].at
    alone = [s for s in starts if s.at > heavy_done]
    busy_both, busy_alone = occupancy(starts, lo, hi), occupancy(starts, heavy_done, last)
    report(
        f"weights 1:3, {BACKLOG} runs of {RUN_SECONDS * 1000:.0f} ms each: drained in "
        f"{took:.1f} s; from {lo:.2f} s to {hi:.2f} s: {dict(shared)}, {ratio:.2f} to 1 (by "
        f"second: {', '.join(shares_by_second(starts, lo, hi))}); {len(alone)} light runs alone"
    )
    report(
        f"runs in flight (of {WORKERS}): {busy_both:.1f} while both had work "
        f"({sum(shared.values()) / (hi - lo):.0f} starts/s), {busy_alone:.1f} "
        f"with the light one alone ({len(alone) / (last - heavy_done):.0f} starts/s)"
    )

    assert Counter(str(run.status) for run in runs) == {"success": 2 * BACKLOG}
    assert 2.7 <= ratio <= 3.3, shared
    assert busy_both >= 0.8 * WORKERS and busy_alone >= 0.8 * WORKERS


def starts_of(runs: Sequence[Execution], domain_of: dict[str, str]) -> list[Start]:
    """Each run's start and end in seconds after the first start, in the order they started."""
    timed = [(r.started_at, r.finished_at, domain_of[r.job_id]) for r in runs]
    first = min(started for started, _, _ in timed if started is not None)
    return sorted(
        Start((s - first).total_seconds(), (e - first).total_seconds(), d)
        for s, e, d in timed
        if s is not None and e is not None
    )
