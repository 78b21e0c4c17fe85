"""The outbox relay: execution events go from the store's outbox to the event publisher.

The store writes each execution's event with the execution's change (scheduler/ports/store.py);
the relay reads the unsent ones oldest first, publishes a batch with delivery confirmed, and marks
what was confirmed sent, in one write. A job's events keep their order: an event is marked sent
only if every earlier event of its job in the batch was confirmed too, so after a failure a job's
events go out again from its first unconfirmed one, in order. Delivery is therefore at least once,
and the CloudEvents `id` (`<execution id>:<status>`) is stable, so a consumer deduplicates. The
state is the store's: an outage of the broker, or a restart, only delays the events. Sent events
are pruned a few minutes later.

One relay at a time across instances: the one holding the `relay` key of the lock service
publishes, the others stand by and take over within RELAY_TURN_SECONDS if it stops. (Two at once
would only send events twice, which at-least-once allows, but it doubles the broker's work.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import new_id
from tickd.scheduler.ports.backends import (
    EventPublisher,
    Lock,
    LockUnavailable,
    OutboxEvent,
    StoreError,
)
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import OutboxStore
from tickd.scheduler.schedule.backoff import backoff_delay

log = logging.getLogger("tickd.relay")

BATCH_SIZE = 500
# How long a batch waits for the broker's acknowledgements before its rest is retried.
CONFIRM_TIMEOUT_SECONDS = 30.0
# How soon a relay that has sent what it read looks for new events: at once after a full batch;
# IDLE_SECONDS after a pass that found some; twice as long as the last pause after one that
# found none, up to IDLE_MAX_SECONDS. Busy, events go out within a fifth of a second; a quiet
# outbox costs a read (and a renewal of the relay's turn) a second, not five.
IDLE_SECONDS = 0.2
IDLE_MAX_SECONDS = 1.0
# The outbox's gauges are counted in the store at most this often (on FerretDB a count decodes
# every unsent event). Between counts, a pass that read less than a batch and had each event
# confirmed has sent all the store held when it read: the gauges say so without a read.
COUNT_UNSENT_EVERY = timedelta(seconds=5)
# Sent events are kept this long (a look back for operators), then pruned in batches.
KEEP_SENT_SECONDS = 300.0
PRUNE_BATCH = 1000
# How often the relay prunes while a prune leaves nothing over: each is a store round trip, and
# under load the relay passes dozens of times a second.
PRUNE_EVERY = timedelta(seconds=10)
RELAY_KEY = "relay"
# The relay's turn lasts this long unless renewed (each pass renews it).
RELAY_TURN_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class RelayPass:
    """What one pass did: events read, confirmed (marked sent), left for a retry."""

    read: int
    sent: int
    retried: int


@dataclass(frozen=True, slots=True)
class RelayState:
    """For /readyz: `ok`, or `retrying` with the last error; the backlog as last measured."""

    state: str
    backlog: int
    oldest_unsent_age_seconds: float | None
    last_error: str | None


def idle_pause(read: int, last_pause: float) -> float:
    """The pause after a pass that read `read` events (less than a batch), the last pause
    having been `last_pause`."""
    return IDLE_SECONDS if read else min(IDLE_MAX_SECONDS, max(IDLE_SECONDS, 2 * last_pause))


def sendable(events: Sequence[OutboxEvent], confirmed: Sequence[bool]) -> list[str]:
    """The ids to mark sent: confirmed, and no earlier event of the same job unconfirmed."""
    blocked: set[str] = set()
    sent = []
    for event, ok in zip(events, confirmed, strict=True):
        if ok and event.job_id not in blocked:
            sent.append(event.id)
        else:
            blocked.add(event.job_id)
    return sent


class Relay:
    def __init__(
        self,
        store: OutboxStore,
        publisher: EventPublisher,
        *,
        clock: Clock,
        metrics: Metrics,
        batch_size: int = BATCH_SIZE,
        confirm_timeout_seconds: float = CONFIRM_TIMEOUT_SECONDS,
        lock: Lock | None = None,
    ) -> None:
        self._store = store
        # Whose turn it is to relay; None: always ours (one instance, tests).
        self._lock = lock
        self._token = new_id()
        self._holding = False
        self._publisher = publisher
        self._clock = clock
        self._metrics = metrics
        self._batch_size = batch_size
        self._confirm_timeout = confirm_timeout_seconds
        self._failures = 0
        self._last_error: str | None = None
        self._backlog = 0
        self._oldest_age: float | None = None
        self._counted_at: datetime | None = None
        self._prune_at: datetime | None = None  # None: at the next pass

    def state(self) -> RelayState:
        return RelayState(
            state="retrying" if self._failures else "ok",
            backlog=self._backlog,
            oldest_unsent_age_seconds=self._oldest_age,
            last_error=self._last_error,
        )

    async def flush_once(self) -> RelayPass:
        """One batch: read, publish confirmed, mark sent; then the gauges and pruning. Raises
        StoreError when the store cannot be read or written (nothing is lost: the events stay
        unsent and go out again)."""
        events = await self._store.unsent_events(self._batch_size)
        sent: list[str] = []
        if events:
            confirmed = await self._publisher.publish_confirmed(
                [e.event for e in events], timeout_seconds=self._confirm_timeout
            )
            sent = sendable(events, confirmed)
            await self._store.mark_events_sent(sent, self._clock.now())
        retried = len(events) - len(sent)
        self._note(retried)
        if len(events) < self._batch_size and not retried:
            self._show_backlog(0, None)
            self._counted_at = None  # should it fall behind again, counted at once
        else:
            await self._count_unsent()
        await self._prune()
        return RelayPass(read=len(events), sent=len(sent), retried=retried)

    def _note(self, retried: int) -> None:
        if retried:
            self._failures += 1
            self._last_error = f"{retried} events not confirmed by the publisher"
            if self._failures == 1:
                log_event(log, "relay.retrying", level=logging.WARNING, error=self._last_error)
        elif self._failures:
            log_event(log, "relay.recovered", after_failures=self._failures)
            self._failures, self._last_error = 0, None

    async def _count_unsent(self) -> None:
        """The outbox is behind (a full batch read, or events not confirmed): its gauges from
        a count in the store, at once when it falls behind, then at most every
        COUNT_UNSENT_EVERY."""
        now = self._clock.now()
        if self._counted_at is not None and now - self._counted_at < COUNT_UNSENT_EVERY:
            return
        self._counted_at = now
        backlog = await self._store.outbox_backlog()
        oldest = backlog.oldest_written_at
        self._show_backlog(
            backlog.unsent, None if oldest is None else max(0.0, (now - oldest).total_seconds())
        )

    def _show_backlog(self, unsent: int, oldest_age: float | None) -> None:
        self._backlog, self._oldest_age = unsent, oldest_age
        self._metrics.outbox_backlog.set(unsent)
        self._metrics.outbox_oldest_unsent_age.set(oldest_age or 0.0)

    async def _prune(self) -> None:
        """At most every PRUNE_EVERY, and at once again after a prune of a whole batch."""
        now = self._clock.now()
        if self._prune_at is not None and now < self._prune_at:
            return
        before = now - timedelta(seconds=KEEP_SENT_SECONDS)
        pruned = await self._store.prune_sent_events(before, limit=PRUNE_BATCH)
        self._prune_at = None if pruned >= PRUNE_BATCH else now + PRUNE_EVERY

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until `stop` is set: at once again after a full batch, after a short pause that
        grows while the outbox stays empty (`idle_pause`), after a growing backoff while the
        publisher or the store fails. On the way out it hands its turn back, so that another
        instance takes over at once."""
        try:
            await self._relay_until(stop)
        finally:
            await self._end_turn()

    async def _end_turn(self) -> None:
        if self._lock is not None and self._holding:
            self._holding = False
            with contextlib.suppress(LockUnavailable):
                await self._lock.release_many([RELAY_KEY], self._token)

    async def _relay_until(self, stop: asyncio.Event) -> None:
        idle = IDLE_SECONDS
        while not stop.is_set():
            if not await self._my_turn():
                await self._pause(RELAY_TURN_SECONDS / 3, stop)
                continue
            try:
                done = await self.flush_once()
            except StoreError as exc:
                self._failures += 1
                self._last_error = f"store: {exc}"
                log_event(log, "relay.store_failed", level=logging.WARNING, error=str(exc))
                await self._pause(self._backoff(), stop)
                continue
            except Exception as exc:  # a bug of ours: say so, keep relaying
                self._failures += 1
                self._last_error = f"{type(exc).__name__}: {exc}"
                log.exception("relay.unexpected_error")
                await self._pause(self._backoff(), stop)
                continue
            if done.retried:
                await self._pause(self._backoff(), stop)
            elif done.read < self._batch_size:
                idle = idle_pause(done.read, idle)
                await self._pause(idle, stop)

    async def _my_turn(self) -> bool:
        """Renew the turn we hold, or take it if nobody holds it. A lock service that cannot be
        reached gives nobody a turn: the events wait in the store."""
        if self._lock is None:
            return True
        try:
            if self._holding:
                self._holding = await self._lock.extend(RELAY_KEY, self._token, RELAY_TURN_SECONDS)
            if not self._holding:
                taken = await self._lock.acquire_many({RELAY_KEY: RELAY_TURN_SECONDS}, self._token)
                self._holding = RELAY_KEY in taken
        except LockUnavailable:
            self._holding = False
        return self._holding

    def _backoff(self) -> float:
        return backoff_delay(self._failures, base=0.5, cap=30.0)

    async def _pause(self, seconds: float, stop: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
