"""Two daemons, one of them cut off from the store (its connections dropped and new ones refused,
as a firewall rejecting) while it lives and its runs go on, then let back: the other takes its
partitions within the heartbeat timeout and 5 s of the cut and runs its jobs; the one cut off
starts nothing after half the timeout, when its hold on its partitions lapses, and takes its
share back once it can beat again. No job's runs overlap and none is lost. An occurrence runs
twice only if its first run was in flight at the cut: that run's end reaches the store once the
link is back, after the other instance ran the occurrence again (at least once, as after any
end that could not be written), and both runs are in its history. Prints its counts."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.fixtures.proxy import LoopbackProxy
from tests.system.databases import STORES
from tests.system.stack import (
    Daemon,
    Report,
    Sandbox,
    alive_until,
    by_job,
    eventually,
    holds_all,
    next_whole_second,
    occurrences_due,
    overlaps,
    partition_shares,
    runs_in,
    sleeping_jobs,
    start_daemon,
)

pytestmark = [pytest.mark.system]

# The daemons' heartbeat settings (the defaults): a beat every 3 s, silent for 10 s is dead; an
# instance that cannot beat stops reading its partitions half that after its last keep (5 s).
HEARTBEAT = 3.0
HEARTBEAT_TIMEOUT = 10.0
# Its runs claimed just before the cut still start: a lookahead (2 s) and a tick ahead at most.
CLAIMED_AHEAD = 3.0
JOBS = 40
RUN_SECONDS = 2.0
EVERY_FIVE = "*/5 * * * * *"


def through(url: str, port: int) -> str:
    """`url` with its port replaced (its user kept)."""
    parts = urlsplit(url)
    user, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}{at}{parts.hostname}:{port}"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES)
async def test_an_instance_cut_off_from_the_store_stops_before_its_partitions_move(
    sandbox: Sandbox, tmp_path: Path, report: Report
) -> None:
    upstream = urlsplit(sandbox.store_url)
    assert upstream.hostname is not None and upstream.port is not None
    link = LoopbackProxy((upstream.hostname, upstream.port))
    port = await link.start()
    async with sandbox.store():  # made before the daemons open it
        pass
    started: list[Daemon] = []
    try:
        started.append(
            await start_daemon("a", sandbox, tmp_path, store_url=through(sandbox.store_url, port))
        )
        started.append(await start_daemon("b", sandbox, tmp_path))
        cut_off, other = started
        for daemon in started:
            await daemon.wait_ready()
        first = next_whole_second(datetime.now(UTC), 2)
        first += timedelta(seconds=-first.second % 5)  # an occurrence of */5
        await sandbox.add_jobs(
            sleeping_jobs(
                JOBS, prefix=f"cut-{sandbox.tag}", seconds=RUN_SECONDS, cron=EVERY_FIVE, first=first
            )
        )

        async def even_split() -> bool:
            return sorted((await partition_shares(sandbox)).values()) == [32, 32]

        await eventually("the partitions split evenly", even_split, within=2 * HEARTBEAT + 5)
        await alive_until(first + timedelta(seconds=6), started)

        await link.stop()
        cut_at = datetime.now(UTC)
        moved_after = await eventually(
            f"{other.name} holds every partition",
            lambda: holds_all(sandbox, other),
            within=HEARTBEAT_TIMEOUT + 5,
        )
        # Cut off for two more occurrences: the other runs them all.
        await alive_until(datetime.now(UTC) + timedelta(seconds=10), started)
        await link.start(port)
        healed_at = datetime.now(UTC)
        back_after = await eventually(
            f"{cut_off.name} holds its share again",
            even_split,
            within=HEARTBEAT_TIMEOUT + 2 * HEARTBEAT + 5,
        )
        due_until = next_whole_second(datetime.now(UTC), 0)
        await alive_until(due_until + timedelta(seconds=6), started)
        for daemon in started:
            assert await daemon.stop() == 0, daemon.log_tail()
    finally:
        for daemon in started:
            await daemon.kill()
        await link.stop()

    ours = set(sandbox.job_ids)
    runs = [run for run in await runs_in(sandbox) if run.job_id in ours]
    jobs = by_job([run for run in runs if run.status != "skipped"])
    # The runs the one cut off started while it could not beat, past the claims it made before.
    started_cut_off = [
        run
        for run in runs
        if run.owner.startswith(f"{cut_off.name}-")
        and cut_at + timedelta(seconds=CLAIMED_AHEAD) < run.started_at < healed_at
    ]
    clashes = [pair for job_runs in jobs.values() for pair in overlaps(job_runs)]
    occurrences = Counter((run.job_id, run.scheduled_at) for run in runs if run.status == "success")
    twice = [key for key, n in occurrences.items() if n > 1]
    in_flight_at_cut = {
        (run.job_id, run.scheduled_at)
        for run in runs
        if run.owner.startswith(f"{cut_off.name}-")
        and run.started_at < cut_at + timedelta(seconds=CLAIMED_AHEAD)
        and (run.finished_at is None or run.finished_at > cut_at)
    }
    missed = occurrences_due(ours, first, every=5, until=due_until) - set(occurrences)
    report(
        f"{cut_off.name} cut off from the store for {(healed_at - cut_at).total_seconds():.1f} s: "
        f"{other.name} held every partition {moved_after:.1f} s after the cut; {cut_off.name} "
        f"held half again {back_after:.1f} s after the link came back"
    )
    report(
        f"executions {dict(Counter(run.status for run in runs))}; started by {cut_off.name} "
        f"while cut off: {len(started_cut_off)}; runs of one job overlapping: {len(clashes)}; "
        f"occurrences run twice: {len(twice)}, of {len(in_flight_at_cut)} in flight on "
        f"{cut_off.name} at the cut; missed: {len(missed)}"
    )

    assert not started_cut_off, f"started while cut off: {started_cut_off[:3]}"
    assert not clashes, f"runs of one job at once: {clashes[:3]}"
    again = set(twice) - in_flight_at_cut
    assert not again, f"run twice, not in flight at the cut: {sorted(again)[:3]}"
    assert not missed, f"occurrences lost: {sorted(missed)[:5]}"
