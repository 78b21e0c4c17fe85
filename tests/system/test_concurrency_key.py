"""A concurrency key on the real stack: three daemons, a burst of jobs naming one key with a limit
of 5 all due at one instant, and the daemon that owns the key's partition SIGKILLed mid-burst.
At no instant are more than 5 of the key's runs in flight, measured from the runs' real starts
and ends (the handler notes them: tests/system/timed_sleep.py); every job of the burst runs;
the jobs of another key and those of none are not held back behind it. And the same limit while
the key's partition moves to a daemon that joins mid-burst, its old owner alive with the key's
runs in flight: the new owner counts them. Prints its figures.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.system.stack import (
    ROOT,
    Daemon,
    Report,
    Sandbox,
    daemons,
    eventually,
    executions,
    next_whole_second,
    partition_shares,
    start_daemon,
)
from tickd.scheduler.model import Job, OnceSchedule
from tickd.scheduler.partitions import assignment, partition_of

pytestmark = [pytest.mark.system]

KEY = "endpoint:api.vendor.test"
LIMIT = 5
KEY_JOBS = 80
OTHER_KEY = "endpoint:other.vendor.test"
OTHER_LIMIT = 3
OTHER_KEY_JOBS = 10
UNKEYED_JOBS = 20
RUN_SECONDS = 0.6
# The owner of the key's partition is killed once this many of the key's runs ended (a quarter
# into the burst), with runs of the key in flight, and every other job's run ended: those then
# show what the key held back, not what the takeover's pause did.
KILL_AFTER_ENDED = 20
# The daemons' heartbeat settings (the defaults): a beat every 3 s, silent for 10 s is dead.
HEARTBEAT = 3.0
HEARTBEAT_TIMEOUT = 10.0
# A dead instance's partitions are taken within a timeout and a beat of the kill, and a pause.
TAKEN_OVER_WITHIN = HEARTBEAT_TIMEOUT + 5
HANDLER = "timed_sleep"


@dataclass(frozen=True)
class Span:
    """One run as its handler saw it: its process, job and attempt, and when it really started
    and ended (None: its process was killed first)."""

    pid: int
    job_id: str
    attempt: int
    start: float
    end: float | None


def install_timed_sleep(site: Path) -> None:
    """A distribution on the daemons' path whose entry point registers `timed_sleep`: the
    daemons load handlers from entry points only."""
    info = site / "tickd_timed_sleep-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tickd-timed-sleep\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[tickd.handlers]\n{HANDLER} = tests.system.timed_sleep:timed_sleep\n"
    )


def burst_jobs(
    count: int,
    *,
    prefix: str,
    at: datetime,
    record: Path,
    key: str | None,
    limit: int | None,
    seconds: Sequence[float] = (RUN_SECONDS,),
) -> list[Job]:
    """One-shot runs of `timed_sleep` (each the next of `seconds` long), all due at `at`. The
    ten-minute timeout keeps a killed run's lease for longer than the test: it is given back by
    the heartbeat takeover. One retry: a run the kill cuts off runs again rather than end as a
    dead letter."""
    return [
        Job(
            name=f"{prefix}-{i:03}",
            handler=HANDLER,
            params={"seconds": seconds[i % len(seconds)], "record": str(record)},
            schedule=OnceSchedule(at=at),
            next_run_at=at,
            timeout_seconds=600.0,
            max_retries=1,
            concurrency_key=key,
            concurrency_limit=limit,
        )
        for i in range(count)
    ]


def spans_in(record: Path) -> list[Span]:
    """Every run noted in `record` (one file per daemon process, named by its pid)."""
    found: list[Span] = []
    for path in record.glob("*.log"):
        pid = int(path.stem)
        started: dict[str, float] = {}
        for line in path.read_text().splitlines():
            what, at, run = line.split()
            if what == "start":
                started[run] = float(at)
            else:
                found.append(span(pid, run, started.pop(run), float(at)))
        found += [span(pid, run, at, None) for run, at in started.items()]
    return found


def span(pid: int, run: str, start: float, end: float | None) -> Span:
    job_id, attempt = run.split("/")
    return Span(pid, job_id, int(attempt), start, end)


def killed_at(spans: Iterable[Span], pid: int, when: float) -> list[Span]:
    """The spans, those the kill of `pid` cut off ending at `when`."""
    return [
        Span(s.pid, s.job_id, s.attempt, s.start, when) if s.end is None and s.pid == pid else s
        for s in spans
    ]


def peak(spans: Sequence[Span]) -> int:
    """The most runs in flight at one instant. An end at the very instant of a start counts
    first: a run is admitted only once another's end is recorded, after it."""
    events = sorted([(s.start, 1) for s in spans] + [(s.end or s.start, -1) for s in spans])
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def mean_in_flight(spans: Sequence[Span]) -> float:
    """How many runs were in flight on average while any was: how much of its limit a key used
    (a takeover's pause, with none in flight, is not counted)."""
    busy = 0.0
    reach = -1.0
    for start, end in sorted((s.start, s.end or s.start) for s in spans):
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    total = sum((s.end or s.start) - s.start for s in spans)
    return total / busy if busy else 0.0


def of(spans: Iterable[Span], jobs: set[str]) -> list[Span]:
    return [s for s in spans if s.job_id in jobs]


async def key_owner(sandbox: Sandbox, key: str) -> str | None:
    """The name of the daemon that holds the key's partition (None: nobody)."""
    async with sandbox.store() as store:
        owners = await store.partition_owners()
    owner = {o.part: o.owner for o in owners}[partition_of(key, len(owners))]
    return owner.split("-")[0] if owner else None


@dataclass(frozen=True)
class Burst:
    """The jobs of the burst, by kind, and the instant they are all due."""

    due: float
    keyed: set[str]
    other: set[str]
    unkeyed: set[str]

    @property
    def everyone(self) -> set[str]:
        return self.keyed | self.other | self.unkeyed


async def add_burst(sandbox: Sandbox, record: Path) -> Burst:
    at = next_whole_second(datetime.now(UTC), 2)
    kinds = [
        burst_jobs(KEY_JOBS, prefix="key", at=at, record=record, key=KEY, limit=LIMIT),
        burst_jobs(
            OTHER_KEY_JOBS, prefix="other", at=at, record=record, key=OTHER_KEY, limit=OTHER_LIMIT
        ),
        burst_jobs(UNKEYED_JOBS, prefix="free", at=at, record=record, key=None, limit=None),
    ]
    await sandbox.add_jobs([job for jobs in kinds for job in jobs])
    keyed, other, unkeyed = ({job.id for job in jobs} for jobs in kinds)
    return Burst(at.timestamp(), keyed, other, unkeyed)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", ["postgresql", "ferretdb"])
async def test_a_key_limit_holds_across_three_daemons_while_its_owner_is_killed_mid_burst(
    sandbox: Sandbox, tmp_path: Path, report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    install_timed_sleep(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'site'}:{ROOT}")
    record = tmp_path / "runs"
    record.mkdir()
    async with daemons(sandbox, tmp_path, ["a", "b", "c"]) as trio:

        async def spread() -> bool:
            return sorted((await partition_shares(sandbox)).values()) == [21, 21, 22]

        await eventually("the partitions are spread over three", spread, within=3 * HEARTBEAT + 5)
        burst = await add_burst(sandbox, record)
        owner = await key_owner(sandbox, KEY)
        (doomed,) = [d for d in trio if d.name == owner]
        survivors = [d for d in trio if d is not doomed]

        async def mid_burst() -> bool:
            spans = spans_in(record)
            ended = {s.job_id for s in spans if s.end is not None}
            return (
                len(ended & burst.keyed) >= KILL_AFTER_ENDED
                and ended >= burst.other | burst.unkeyed
                and any(s.pid == doomed.process.pid for s in cut_off(spans, burst.keyed))
            )

        await eventually("a quarter of the key's runs and all others ended", mid_burst, within=60)
        await doomed.kill()
        # After the process is gone: the instant its runs in flight are taken to have ended is
        # no earlier than they really did.
        kill_time = time.time()
        moved = await eventually(
            f"{doomed.name}'s partitions move to the others",
            lambda: moved_to(sandbox, survivors),
            within=TAKEN_OVER_WITHIN,
        )

        async def every_job_ran() -> bool:
            alive_or_fail(survivors)
            return {s.job_id for s in spans_in(record) if s.end is not None} >= burst.everyone

        await eventually("every job of the burst ran", every_job_ran, within=90)
        for daemon in survivors:
            assert await daemon.stop() == 0, daemon.log_tail()

    noted = spans_in(record)
    stranded = cut_off(noted, burst.keyed)
    spans = killed_at(noted, doomed.process.pid, kill_time)
    key_spans = of(spans, burst.keyed)
    other_spans = of(spans, burst.other)
    ends = sorted(s.end for s in of(noted, burst.keyed) if s.end is not None)
    half_done = ends[KEY_JOBS // 2 - 1]
    others_started = max(s.start for s in of(spans, burst.other | burst.unkeyed))
    free_started = max(s.start for s in of(spans, burst.unkeyed))
    statuses = Counter(
        str(e.status) for e in await executions(sandbox) if e.job_id in burst.everyone
    )
    report(
        f"3 daemons on {sandbox.kind}: {KEY_JOBS} jobs of key limit {LIMIT}, {OTHER_KEY_JOBS} of "
        f"another key (limit {OTHER_LIMIT}), {UNKEYED_JOBS} of none, {RUN_SECONDS:g} s each, "
        f"all due at once; {doomed.name} (the key's partition owner) SIGKILLed after "
        f"{sum(1 for end in ends if end < kill_time)} of the key's runs ended, "
        f"{len(stranded)} of them in flight"
    )
    report(
        f"peak in flight: key {peak(key_spans)} (limit {LIMIT}; {mean_in_flight(key_spans):.1f} "
        f"on average while any ran), other key {peak(other_spans)} (limit {OTHER_LIMIT}); "
        f"partitions moved {moved:.1f} s after the kill, the key's next run started "
        f"{min(s.start for s in key_spans if s.start > kill_time) - kill_time:.1f} s after it; "
        f"key burst half done {half_done - burst.due:.1f} s, all done {ends[-1] - burst.due:.1f} "
        f"s after due"
    )
    report(
        f"all unkeyed started within {free_started - burst.due:.1f} s of due, all of the other "
        f"key within {others_started - burst.due:.1f} s; executions "
        f"{dict(statuses)}; test took {time.monotonic() - began:.0f} s"
    )

    # One instance admits the key's runs at a time: the partition's owner, then its successor.
    assert {s.pid for s in key_spans if s.start < kill_time} == {doomed.process.pid}
    assert len({s.pid for s in key_spans if s.start > kill_time}) == 1
    assert stranded, "the kill found none of the key's runs in flight"
    assert peak(key_spans) <= LIMIT
    assert peak(key_spans) == LIMIT, "the key never used its whole limit"
    assert peak(other_spans) <= OTHER_LIMIT
    # Every job ran to its end at least once (a run the kill cut off runs again).
    assert {s.job_id for s in noted if s.end is not None} == burst.everyone
    assert others_started < half_done, "another key's or an unkeyed job waited behind the key"


# The join: runs of 3 to 6 s, so that the old owner's runs in flight end at different times and
# the new owner, which counts them at each fetch (a second apart), admits runs beside the last
# of them.
JOIN_JOBS = 25
JOIN_RUN_SECONDS = (3.0, 3.75, 4.5, 5.25, 6.0)
# The newcomer starts once this many of the key's runs ended: the old owner's second wave runs.
JOIN_AFTER_ENDED = LIMIT
# The old owner frees the partition at its next beat, and the newcomer takes it within a pause.
MOVED_WITHIN = HEARTBEAT + 5


def key_moving_to(newcomer: str, before: Sequence[str], partitions: int) -> str:
    """A key whose partition one of `before` owns, and `newcomer` once it joins them."""
    now, then = assignment(partitions, before), assignment(partitions, [*before, newcomer])
    for n in range(10_000):
        key = f"endpoint:join{n}.vendor.test"
        part = partition_of(key, partitions)
        if now[part] != newcomer and then[part] == newcomer:
            return key
    raise AssertionError("no key moves to the newcomer")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", ["postgresql", "ferretdb"])
async def test_a_key_limit_holds_while_its_partition_moves_to_a_newcomer_beside_the_old_runs(
    sandbox: Sandbox, tmp_path: Path, report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_timed_sleep(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'site'}:{ROOT}")
    record = tmp_path / "runs"
    record.mkdir()
    instances = {name: f"{name}-{sandbox.tag}" for name in "abc"}
    key = key_moving_to(instances["c"], [instances["a"], instances["b"]], 64)
    async with daemons(sandbox, tmp_path, ["a", "b"]) as pair:

        async def spread() -> bool:
            return sorted((await partition_shares(sandbox)).values()) == [32, 32]

        await eventually("the partitions are spread over two", spread, within=3 * HEARTBEAT + 5)
        at = next_whole_second(datetime.now(UTC), 2)
        jobs = burst_jobs(
            JOIN_JOBS,
            prefix="join",
            at=at,
            record=record,
            key=key,
            limit=LIMIT,
            seconds=JOIN_RUN_SECONDS,
        )
        await sandbox.add_jobs(jobs)
        keyed = {job.id for job in jobs}
        old_owner = await key_owner(sandbox, key)
        (old,) = [d for d in pair if d.name == old_owner]

        async def second_wave() -> bool:
            return sum(1 for s in spans_in(record) if s.end is not None) >= JOIN_AFTER_ENDED

        await eventually("the key's first runs ended", second_wave, within=30)
        newcomer = await start_daemon("c", sandbox, tmp_path)
        pair.append(newcomer)  # killed on the way out with the others, should the test fail
        await newcomer.wait_ready()
        joined = time.time()

        async def moved() -> bool:
            return await key_owner(sandbox, key) == "c"

        moved_s = await eventually(
            "the key's partition moves to c", moved, within=TAKEN_OVER_WITHIN
        )

        async def every_job_ran() -> bool:
            alive_or_fail(pair)
            return {s.job_id for s in spans_in(record) if s.end is not None} >= keyed

        await eventually("every job of the key ran", every_job_ran, within=90)
        for daemon in pair:
            assert await daemon.stop() == 0, daemon.log_tail()

    spans = of(spans_in(record), keyed)
    by = {d.name: d.process.pid for d in pair}
    first_new = min(s.start for s in spans if s.pid == by["c"])
    beside = [s for s in spans if s.pid == by[old.name] and s.start < first_new < (s.end or 0)]
    report(
        f"{sandbox.kind}: {JOIN_JOBS} jobs of key limit {LIMIT}, runs of "
        f"{JOIN_RUN_SECONDS[0]:g}-{JOIN_RUN_SECONDS[-1]:g} s; c joined "
        f"{joined - at.timestamp():.1f} s after due, the key's partition moved from "
        f"{old.name} to c {moved_s:.1f} s after it; c's first run of the key started beside "
        f"{len(beside)} of {old.name}'s; peak in flight {peak(spans)}; "
        f"runs by daemon {dict(Counter(s.pid for s in spans))}"
    )
    assert peak(spans) <= LIMIT
    assert peak(spans) == LIMIT, "the key never used its whole limit"
    assert beside, "c's first run of the key started with none of the old owner's in flight"
    # One instance admits the key's runs at a time: the old owner until the move, then c.
    assert {s.pid for s in spans if s.start < first_new} == {by[old.name]}
    assert {s.pid for s in spans if s.start > first_new} <= {by[old.name], by["c"]}
    assert all(s.end is not None for s in spans)
    assert {s.job_id for s in spans} == keyed


def cut_off(spans: Iterable[Span], jobs: set[str]) -> list[Span]:
    """The runs of `jobs` started and not ended: in flight, or cut off by a kill."""
    return [s for s in spans if s.job_id in jobs and s.end is None]


async def moved_to(sandbox: Sandbox, survivors: Sequence[Daemon]) -> bool:
    """Every partition is held by one of `survivors`."""
    return set(await partition_shares(sandbox)) <= {d.name for d in survivors}


def alive_or_fail(running: Sequence[Daemon]) -> None:
    for daemon in running:
        if not daemon.alive:
            raise AssertionError(f"{daemon.name} exited:\n{daemon.log_tail()}")
