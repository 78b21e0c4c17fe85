"""The outbox relay: every event written with an execution reaches the publisher, in order per
job, at least once, however long the publisher fails."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.maintenance.relay import (
    COUNT_UNSENT_EVERY,
    IDLE_MAX_SECONDS,
    IDLE_SECONDS,
    KEEP_SENT_SECONDS,
    PRUNE_BATCH,
    PRUNE_EVERY,
    RELAY_TURN_SECONDS,
    Relay,
)
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports.backends import CloudEvent, OutboxBacklog, RunEnd, Store
from tickd.scheduler.ports.clock import FakeClock


class FlakyPublisher:
    """Confirms nothing while `down`; `refuse` ids are refused even when it is up."""

    keeps_events = True

    def __init__(self) -> None:
        self.down = False
        self.refuse: set[str] = set()
        self.delivered: list[CloudEvent] = []

    def publish(self, event: CloudEvent) -> None:
        raise AssertionError("the relay publishes with confirmation only")

    async def publish_confirmed(
        self, events: Sequence[CloudEvent], *, timeout_seconds: float
    ) -> list[bool]:
        confirmed = []
        for event in events:
            ok = not self.down and event["id"] not in self.refuse
            if ok:
                self.delivered.append(event)
            confirmed.append(ok)
        return confirmed

    async def close(self, timeout_seconds: float) -> None:
        return None


async def run_twice(store: Store, name: str, clock: FakeClock) -> list[Execution]:
    """Two runs of one job, each started and ended: four events."""
    job = make_job(name)
    await store.insert_job(job)
    runs = []
    for token in (1, 2):
        run = Execution(
            job_id=job.id,
            job_name=name,
            handler="noop",
            scheduled_at=T0 + timedelta(minutes=token),
            status=Status.RUNNING,
            started_at=clock.now(),
            owner="a",
            token=token,
        )
        await store.insert_executions([run], event_source="a")
        clock.advance(1)
        ended = replace(run, status=Status.SUCCESS, finished_at=clock.now())
        await store.write_ends([RunEnd(ended, None)], event_source="a")
        runs.append(run)
    return runs


def ids_per_job(events: list[CloudEvent], job_id: str) -> list[str]:
    """What a consumer keeps: each id once, at its first arrival."""
    seen: list[str] = []
    for event in events:
        if event["subject"] == job_id and event["id"] not in seen:
            seen.append(event["id"])
    return seen


async def test_no_event_is_lost_while_the_publisher_is_down(store: Store) -> None:
    clock = FakeClock(T0)
    publisher = FlakyPublisher()
    metrics = Metrics()
    relay = Relay(store, publisher, clock=clock, metrics=metrics, batch_size=3)
    publisher.down = True
    a_runs = await run_twice(store, "a", clock)
    b_runs = await run_twice(store, "b", clock)

    for _ in range(5):  # an outage: every pass fails, nothing is marked sent
        clock.advance(10)
        assert (await relay.flush_once()).sent == 0
    assert relay.state().state == "retrying"
    assert metrics.outbox_backlog._value.get() == 8
    assert metrics.outbox_oldest_unsent_age._value.get() == 54.0

    publisher.down = False
    while (await relay.flush_once()).read:
        pass

    for runs in (a_runs, b_runs):
        expected = [f"{r.id}:{s}" for r in runs for s in ("running", "success")]
        assert ids_per_job(publisher.delivered, runs[0].job_id) == expected
    assert relay.state().state == "ok" and relay.state().backlog == 0
    assert metrics.outbox_backlog._value.get() == 0


def counting_outbox_reads(store: Store) -> list[int]:
    """How many times the store's outbox is counted from now on (one entry a count)."""
    counts: list[int] = []
    count = store.outbox_backlog

    async def counted() -> OutboxBacklog:
        backlog = await count()
        counts.append(backlog.unsent)
        return backlog

    store.outbox_backlog = counted  # type: ignore[method-assign]
    return counts


async def test_a_pass_that_sends_all_it_read_shows_an_empty_outbox_without_a_count(
    store: Store,
) -> None:
    """What ops alert on stays true, and a relay keeping up counts nothing: on FerretDB a
    count decodes every unsent event, several times a second."""
    clock = FakeClock(T0)
    metrics = Metrics()
    publisher = FlakyPublisher()
    relay = Relay(store, publisher, clock=clock, metrics=metrics, batch_size=3)
    publisher.down = True
    await run_twice(store, "a", clock)
    await relay.flush_once()
    assert metrics.outbox_backlog._value.get() == 4
    counts = counting_outbox_reads(store)

    publisher.down = False
    clock.advance(COUNT_UNSENT_EVERY.total_seconds())
    passes = [await relay.flush_once() for _ in range(4)]

    assert [p.sent for p in passes] == [3, 1, 0, 0]
    assert counts == [1], "after the full batch only, not after the passes that emptied it"
    assert metrics.outbox_backlog._value.get() == 0 and relay.state().backlog == 0
    assert metrics.outbox_oldest_unsent_age._value.get() == 0
    assert (await store.outbox_backlog()).unsent == 0


async def test_an_outbox_behind_is_counted_when_it_falls_behind_then_every_few_seconds(
    store: Store,
) -> None:
    clock = FakeClock(T0)
    metrics = Metrics()
    publisher = FlakyPublisher()
    relay = Relay(store, publisher, clock=clock, metrics=metrics)
    counts = counting_outbox_reads(store)
    publisher.down = True
    await run_twice(store, "a", clock)
    await relay.flush_once()
    clock.advance(1)
    await relay.flush_once()
    assert counts == [4], "at once when it fell behind, then not again within the interval"

    publisher.down = False
    await relay.flush_once()  # all four sent: empty, and no count
    publisher.down = True
    await run_twice(store, "b", clock)
    await relay.flush_once()
    clock.advance(1)
    await relay.flush_once()
    assert counts == [4, 4], "behind again, within the interval of the last count: at once"
    assert metrics.outbox_backlog._value.get() == 4

    interval = COUNT_UNSENT_EVERY.total_seconds()
    clock.advance(interval)
    await relay.flush_once()
    assert counts == [4, 4, 4]
    # b's first event was written before its two runs' two seconds, the second and the interval.
    assert metrics.outbox_oldest_unsent_age._value.get() == 2 + 1 + interval


async def test_a_refused_event_holds_back_the_later_events_of_its_job(store: Store) -> None:
    clock = FakeClock(T0)
    publisher = FlakyPublisher()
    relay = Relay(store, publisher, clock=clock, metrics=Metrics())
    a_runs = await run_twice(store, "a", clock)
    b_runs = await run_twice(store, "b", clock)
    publisher.refuse = {f"{a_runs[0].id}:success"}

    first = await relay.flush_once()
    publisher.refuse = set()
    await relay.flush_once()

    assert (first.read, first.sent) == (8, 5), "a's two later events wait for the refused one"
    a_ids = [e["id"] for e in publisher.delivered if e["subject"] == a_runs[0].job_id]
    # Delivered again in order from the refused one: the last arrival of each id is in order.
    assert a_ids[-3:] == [f"{a_runs[0].id}:success", f"{a_runs[1].id}:running",
                          f"{a_runs[1].id}:success"]  # fmt: skip
    assert len(ids_per_job(publisher.delivered, b_runs[0].job_id)) == 4
    assert (await store.outbox_backlog()).unsent == 0


async def test_a_restarted_relay_resumes_from_the_store(store: Store) -> None:
    clock = FakeClock(T0)
    down = FlakyPublisher()
    down.down = True
    runs = await run_twice(store, "a", clock)
    await Relay(store, down, clock=clock, metrics=Metrics()).flush_once()

    after_restart = FlakyPublisher()
    await Relay(store, after_restart, clock=clock, metrics=Metrics()).flush_once()

    assert [e["id"] for e in after_restart.delivered] == [
        f"{r.id}:{s}" for r in runs for s in ("running", "success")
    ]


async def test_sent_events_are_pruned_after_a_few_minutes(store: Store) -> None:
    clock = FakeClock(T0)
    relay = Relay(store, FlakyPublisher(), clock=clock, metrics=Metrics())
    await run_twice(store, "a", clock)
    await relay.flush_once()
    clock.advance(KEEP_SENT_SECONDS + 61)  # a store may keep them to the end of their minute
    await relay.flush_once()
    assert await store.prune_sent_events(clock.now(), limit=100) == 0, "pruned by the relay"


async def test_a_busy_relay_prunes_once_in_a_while_and_a_backlog_of_sent_events_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(T0)
    relay = Relay(store, FlakyPublisher(), clock=clock, metrics=Metrics())
    answers = iter([PRUNE_BATCH, 3, 0, 0])  # a whole batch of old ones, then the rest
    asked: list[datetime] = []

    async def prune(before: datetime, *, limit: int) -> int:
        asked.append(clock.now())
        return next(answers)

    monkeypatch.setattr(store, "prune_sent_events", prune)
    for _ in range(5):  # passes in the same instant: a full prune goes on at once, then waits
        await relay.flush_once()
    assert asked == [T0, T0]
    clock.advance(PRUNE_EVERY.total_seconds() - 1)
    await relay.flush_once()
    assert len(asked) == 2
    clock.advance(1)
    await relay.flush_once()
    assert asked[2:] == [clock.now()]


async def test_an_idle_relay_looks_less_often_down_to_once_a_second_and_soon_again_once_busy(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each empty look at the outbox doubles the pause before the next, to IDLE_MAX_SECONDS; a
    pass that finds events brings it back to IDLE_SECONDS."""
    clock = FakeClock(T0)
    relay = Relay(store, FlakyPublisher(), clock=clock, metrics=Metrics())
    stop = asyncio.Event()
    pauses: list[float] = []

    async def noted(seconds: float, _stop: asyncio.Event) -> None:
        pauses.append(seconds)
        if len(pauses) == 4:  # events written while the relay waits
            await run_twice(store, "a", clock)
        if len(pauses) == 6:
            stop.set()

    monkeypatch.setattr(relay, "_pause", noted)
    await asyncio.wait_for(relay.run(stop), 10)

    idle, most = IDLE_SECONDS, IDLE_MAX_SECONDS
    assert pauses == [2 * idle, 4 * idle, most, most, idle, 2 * idle]
    assert (await store.outbox_backlog()).unsent == 0


async def test_one_relay_at_a_time_and_another_takes_over_when_it_stops(store: Store) -> None:
    """Every instance runs a relay; the one whose turn it is publishes, the others stand by."""
    clock = FakeClock(T0)
    lock = MemoryLock(monotonic=lambda: clock.now().timestamp())
    first, second = (
        Relay(store, FlakyPublisher(), clock=clock, metrics=Metrics(), lock=lock) for _ in "ab"
    )
    assert await first._my_turn()
    assert not await second._my_turn(), "the first holds the turn"
    assert await first._my_turn(), "and renews it"
    clock.advance(RELAY_TURN_SECONDS + 1)  # the first stopped: its turn runs out
    assert await second._my_turn()
    assert not await first._my_turn()


async def test_a_relay_that_stops_hands_its_turn_back_at_once(store: Store) -> None:
    clock = FakeClock(T0)
    lock = MemoryLock(monotonic=lambda: clock.now().timestamp())
    first, second = (
        Relay(store, FlakyPublisher(), clock=clock, metrics=Metrics(), lock=lock) for _ in "ab"
    )
    stop = asyncio.Event()
    stop.set()  # told to stop at once: it takes no turn, or gives it back
    assert await first._my_turn()
    await first.run(stop)
    assert await second._my_turn(), "no need to wait for the first's turn to run out"
