"""The domains' fair share of a fetch under saturation (scheduler/admission/fair_share.py), on a
queue kept here: each read takes the head of the domains it names, as a store's due read would."""

from __future__ import annotations

from collections import Counter, deque
from datetime import timedelta

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.admission.fair_share import (
    MAX_LANES,
    OTHERS_EVERY,
    WEIGHTS_EVERY,
    DomainCaps,
    DomainWeights,
    Lanes,
)
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.model import Job, Priority
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.run.ledger import DueRun


class Settings:
    """The domains' records, as DomainStore.list_domains gives them."""

    def __init__(self, **weights: int) -> None:
        self.records = [DomainSettings(name=name, weight=w) for name, w in weights.items()]
        self.reads = 0
        self.failing = False

    async def list_domains(self) -> list[DomainSettings]:
        self.reads += 1
        if self.failing:
            raise StoreError("down")
        return self.records


class Queue:
    """Jobs due, by domain, each domain's in its order."""

    def __init__(self, **due: int) -> None:
        self.due = {
            domain: deque(make_job(f"{domain}-{n}", domain=domain) for n in range(count))
            for domain, count in due.items()
        }

    def add(self, domain: str, count: int) -> None:
        for n in range(count):
            self.due.setdefault(domain, deque()).append(
                make_job(f"{domain}-new-{n}", domain=domain)
            )

    def take(self, limit: int, domains: list[str] | None, exclude: list[str]) -> list[Job]:
        named = [d for d in self.due if (domains is None or d in domains) and d not in exclude]
        taken: list[Job] = []
        while len(taken) < limit and any(self.due[d] for d in named):
            for domain in named:  # the store's order mixes domains; any mix will do here
                if self.due[domain] and len(taken) < limit:
                    taken.append(self.due[domain].popleft())
        return taken


async def lanes_for(**weights: int) -> Lanes:
    lanes = Lanes(DomainWeights(Settings(**weights)))  # type: ignore[arg-type]
    await lanes.weights.refresh_if_due(T0)
    return lanes


def fetch(lanes: Lanes, queue: Queue, limit: int, at_ms: int = 0) -> Counter[str]:
    now = T0 + timedelta(milliseconds=at_ms)
    taken = []
    for read in lanes.reads(limit, now):
        jobs = queue.take(read.limit, read.domains, read.exclude_domains)
        lanes.took(read, jobs, now)
        taken.append((read, jobs))
    return Counter(job.domain for job in lanes.merged(taken))


def saturated(lanes: Lanes, queue: Queue, limit: int, fetches: int) -> Counter[str]:
    """The runs of a first read of everything, then of `fetches` fetches 10 ms apart."""
    first = queue.take(limit, None, [])
    lanes.seen(first)
    runs = Counter(job.domain for job in first)
    for n in range(fetches):
        runs += fetch(lanes, queue, limit, at_ms=10 * (n + 1))
    return runs


def ratio(runs: Counter[str], a: str, b: str) -> float:
    return runs[b] / runs[a]


@pytest.mark.parametrize("limit", [100, 7, 1])
async def test_weights_one_to_three_share_the_runs_one_to_three(limit: int) -> None:
    lanes = await lanes_for(a=1, b=3)
    queue = Queue(a=10_000, b=10_000)
    runs = saturated(lanes, queue, limit, fetches=max(40, 4_000 // limit))
    assert 2.7 <= ratio(runs, "a", "b") <= 3.3, runs


async def test_each_fetch_takes_its_whole_limit_while_the_busy_domains_have_work() -> None:
    lanes = await lanes_for(a=1, b=3)
    queue = Queue(a=10_000, b=10_000)
    lanes.seen(queue.take(100, None, []))
    fetch(lanes, queue, 100, at_ms=10)  # the others' lane is read, and finds none
    assert sum(fetch(lanes, queue, 100, at_ms=20).values()) == 100


async def test_an_idle_domains_share_goes_to_the_busy_ones() -> None:
    lanes = await lanes_for(a=1, b=3, idle=6)
    queue = Queue(a=10_000, b=10_000, idle=1)
    runs = saturated(lanes, queue, 100, fetches=40)
    assert runs["idle"] == 1
    # Nearly every fetch is whole: the idle domain's 60 % goes to a and b, by their weights.
    assert runs["a"] + runs["b"] >= 41 * 100 * 0.95
    assert 2.7 <= ratio(runs, "a", "b") <= 3.3


async def test_a_domain_without_settings_has_the_default_weight() -> None:
    lanes = await lanes_for(b=2)
    queue = Queue(a=10_000, b=10_000)
    runs = saturated(lanes, queue, 100, fetches=40)
    assert 1.8 <= ratio(runs, "a", "b") <= 2.2


async def test_a_domain_whose_work_shows_up_in_a_burst_gets_its_share_at_once() -> None:
    lanes = await lanes_for()
    queue = Queue(burst=20_000)
    saturated(lanes, queue, 100, fetches=5)
    queue.add("small", 30)
    # Read within OTHERS_EVERY through the others' lane, then in a lane of its own.
    after = 10 * 5 + OTHERS_EVERY / timedelta(milliseconds=1)
    runs = fetch(lanes, queue, 100, at_ms=int(after)) + fetch(
        lanes, queue, 100, at_ms=int(after) + 10
    )
    assert runs["small"] == 30


async def test_the_others_lane_is_read_once_every_while_it_finds_none() -> None:
    lanes = await lanes_for()
    queue = Queue(burst=20_000)
    lanes.seen(queue.take(100, None, []))
    reads = [len(lanes_read) for lanes_read in (reads_at(lanes, queue, ms) for ms in (10, 20, 30))]
    assert reads == [2, 1, 1]  # its lane and the others'; then its lane alone
    assert len(reads_at(lanes, queue, 10 + int(OTHERS_EVERY / timedelta(milliseconds=1)))) == 2


async def test_a_slow_others_lane_is_read_for_a_tenth_of_the_time_at_most() -> None:
    """On FerretDB a read of the others' lane decodes every free job: about a second in a
    burst of 3,000. Read every OTHERS_EVERY, it would leave the store little time for runs."""
    lanes = await lanes_for()
    queue = Queue(burst=20_000)
    lanes.seen(queue.take(100, None, []))
    now = T0 + timedelta(milliseconds=10)
    for read in lanes.reads(100, now):
        jobs = queue.take(read.limit, read.domains, read.exclude_domains)
        lanes.took(read, jobs, now, seconds=1.0 if read.domain is None else 0.05)
    assert [read.domain for read in lanes.reads(100, now + timedelta(seconds=9.9))] == ["burst"]
    assert None in [read.domain for read in lanes.reads(100, now + timedelta(seconds=10))]


async def test_after_a_slow_read_of_every_domain_the_others_lane_waits_its_turn() -> None:
    """That read looked at every domain's head: a slow store is not asked again at once."""
    lanes = await lanes_for()
    queue = Queue(burst=20_000)
    lanes.read_all(queue.take(100, None, []), T0, seconds=0.5)
    assert [read.domain for read in lanes.reads(100, T0 + timedelta(seconds=4.9))] == ["burst"]
    assert None in [read.domain for read in lanes.reads(100, T0 + timedelta(seconds=5))]
    fast = await lanes_for()  # PostgreSQL's read of 100 domains' heads: 10-20 ms
    fast.read_all(queue.take(100, None, []), T0, seconds=0.02)
    assert None in [read.domain for read in fast.reads(100, T0)]


def reads_at(lanes: Lanes, queue: Queue, at_ms: int) -> list[str | None]:
    now = T0 + timedelta(milliseconds=at_ms)
    reads = lanes.reads(100, now)
    for read in reads:
        lanes.took(read, queue.take(read.limit, read.domains, read.exclude_domains), now)
    return [read.domain for read in reads]


async def test_a_capped_domain_is_read_in_no_lane() -> None:
    lanes = await lanes_for()
    queue = Queue(a=1_000, b=1_000)
    lanes.seen(queue.take(100, None, []))
    for read in lanes.reads(100, T0, capped=["a"]):
        assert read.domain != "a"
        assert read.domains is None or "a" not in read.domains
        assert read.domain is not None or "a" in read.exclude_domains


async def test_the_busy_lanes_never_ask_more_than_the_fetch_has_room_for() -> None:
    lanes = await lanes_for(**{f"d{n}": 1 for n in range(30)})
    queue = Queue(**{f"d{n}": 1_000 for n in range(30)})
    lanes.seen(queue.take(100, None, []))
    for ms in range(10, 400, 10):
        reads = lanes.reads(5, T0 + timedelta(milliseconds=ms))
        busy = [read for read in reads if read.domain is not None]
        assert 1 <= sum(read.limit for read in busy) <= 5
        assert sum(read.limit for read in reads if read.domain is None) <= 1
        for read in reads:
            lanes.took(read, queue.take(read.limit, read.domains, read.exclude_domains), T0)


@pytest.mark.parametrize("limit", [1, 2])
async def test_a_fetch_too_small_for_a_run_a_lane_still_reads_one(limit: int) -> None:
    lanes = await lanes_for()
    queue = Queue(a=100, b=100, c=100)
    lanes.seen(queue.take(3, None, []))
    for ms in range(10, 1000, 10):
        assert fetch(lanes, queue, limit, at_ms=ms).total() >= 1


async def test_critical_runs_of_every_lane_come_first_in_the_batch() -> None:
    lanes = await lanes_for(b=3)
    urgent = make_job("a-urgent", domain="a", priority=Priority.CRITICAL)
    lanes.seen([urgent, make_job("b-0", domain="b")])
    by_domain = {read.domain: read for read in lanes.reads(10, T0)}
    b_jobs = [make_job(f"b-{n}", domain="b") for n in range(3)]
    batch = lanes.merged([(by_domain["b"], b_jobs), (by_domain["a"], [urgent])])
    assert batch == [urgent, *b_jobs]


async def test_weights_are_read_again_after_a_while_and_kept_when_the_read_fails() -> None:
    store = Settings(a=4)
    weights = DomainWeights(store)  # type: ignore[arg-type]
    await weights.refresh_if_due(T0)
    await weights.refresh_if_due(T0 + WEIGHTS_EVERY / 2)
    assert store.reads == 1
    store.failing = True
    await weights.refresh_if_due(T0 + WEIGHTS_EVERY)
    assert store.reads == 2
    assert weights.of("a") == 4
    assert weights.of("unknown") == 1


class Held:
    """The partitions an instance holds, as the heartbeat keeps them."""

    def __init__(self, held: list[int] | None, count: int = 64) -> None:
        self.held, self.total = held, count

    @property
    def count(self) -> int:
        return self.total

    def readable(self) -> list[int] | None:
        return self.held


async def caps_for(partitions: Held | None, **caps: int) -> DomainCaps:
    store = Settings()
    store.records = [DomainSettings(name=name, max_running=cap) for name, cap in caps.items()]
    weights = DomainWeights(store)  # type: ignore[arg-type]
    await weights.refresh_if_due(T0)
    return DomainCaps(weights, partitions)


@pytest.mark.parametrize(
    ("held", "part"),
    [
        (None, 10),
        (list(range(64)), 10),
        (list(range(32)), 5),
        (list(range(21)), 3),
        ([1], 1),
        ([], 0),
    ],
)
async def test_an_instances_part_of_a_cap_follows_the_partitions_it_holds(
    held: list[int] | None, part: int
) -> None:
    caps = await caps_for(Held(held), a=10)
    assert caps.part("a") == part
    assert caps.part("uncapped") is None


async def test_a_domain_at_its_part_is_capped_and_its_runs_beyond_it_are_left() -> None:
    caps = await caps_for(None, a=3)
    runs = [DueRun(make_job(f"a-{n}", domain="a")) for n in range(5)]
    runs += [DueRun(make_job(f"b-{n}", domain="b")) for n in range(5)]
    assert caps.capped(Counter(a=3)) == ["a"]
    assert caps.capped(Counter(a=2)) == []
    kept = caps.within(runs, Counter(a=1))
    assert [run.job.name for run in kept] == ["a-0", "a-1", *(f"b-{n}" for n in range(5))]


async def test_a_sharded_occurrence_takes_no_room_but_each_shard_does() -> None:
    caps = await caps_for(None, a=2)
    occurrence = DueRun(make_job("a-wide", domain="a", shards=4))
    assert caps.within([occurrence], Counter(a=2)) == [occurrence]
    assert caps.within([DueRun(make_job("a-1", domain="a"))], Counter(a=2)) == []


async def test_a_fetch_reads_ten_busy_domains_at_most_and_each_gets_its_share_over_fetches() -> (
    None
):
    lanes = await lanes_for()
    queue = Queue(**{f"d{n:03}": 250 for n in range(100)})
    lanes.seen(queue.take(1_000, None, []))  # every domain busy
    runs: Counter[str] = Counter()
    for n in range(120):  # 12,000 runs: none of the domains runs out
        now = T0 + timedelta(milliseconds=10 * (n + 1))
        reads = lanes.reads(100, now)
        assert len([read for read in reads if read.domain is not None]) <= MAX_LANES
        for read in reads:
            jobs = queue.take(read.limit, read.domains, read.exclude_domains)
            lanes.took(read, jobs, now)
            runs.update(job.domain for job in jobs)
    assert min(runs.values()) >= 0.9 * max(runs.values()), runs.most_common(3)
