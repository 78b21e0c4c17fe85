"""The ports of tickd: every contract between the engine and a backend, documented once.

Each port has an embedded backend (fresh checkout, no services) and a production one; a URL in the
configuration picks it (see the ``open_*`` factory in each port's package). Methods take batches
where the caller has a batch: one round trip per batch, never one per job.

The store's contract is big enough to have modules of its own: scheduler/ports/store.py (Store,
and where each of its roles is), scheduler/ports/store_values.py (what its methods take and return);
this module names them too. The lock, the event publisher and the mailer are here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Protocol

from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.due_filter import EVERY_DUE, DueFilter
from tickd.scheduler.ports.store import Store
from tickd.scheduler.ports.store_values import (
    ENDED_LEASE_UNTIL,
    OCCURRENCE_OWNER,
    Advance,
    Attention,
    Backlog,
    Claim,
    CloudEvent,
    DuplicateJobName,
    ExecutionQuery,
    ExecutionStats,
    InstanceStatus,
    InstanceView,
    JobChange,
    JobOrder,
    JobQuery,
    JobSearch,
    JobTrouble,
    LagPercentiles,
    LeaseTerms,
    OutboxBacklog,
    OutboxEvent,
    PartitionOwner,
    Retention,
    RunEnd,
    RunRequest,
    StoreError,
    UnstorableValue,
    shard_fence,
    unchanged_state,
)

__all__ = [
    "ENDED_LEASE_UNTIL",
    "EVERY_DUE",
    "OCCURRENCE_OWNER",
    "Advance",
    "Attention",
    "Backlog",
    "Claim",
    "CloudEvent",
    "DueFilter",
    "DuplicateJobName",
    "EventPublisher",
    "ExecutionQuery",
    "ExecutionStats",
    "InstanceStatus",
    "InstanceView",
    "JobChange",
    "JobOrder",
    "JobQuery",
    "JobSearch",
    "JobTrouble",
    "LagPercentiles",
    "LeaseTerms",
    "Lock",
    "LockUnavailable",
    "MailError",
    "Mailer",
    "OutboxBacklog",
    "OutboxEvent",
    "PartitionOwner",
    "Ports",
    "Retention",
    "RunEnd",
    "RunRequest",
    "Store",
    "StoreError",
    "UnstorableValue",
    "shard_fence",
    "unchanged_state",
]


class Lock(Protocol):
    """Mutual exclusion per job across instances: SET key token NX PX ttl, released by token."""

    async def acquire_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        """Try every key at once, each with its own time to live in seconds; returns the keys now
        held with `token`. Raises LockUnavailable when the lock service cannot be reached."""

    async def extend(self, key: str, token: str, ttl_seconds: float) -> bool:
        """Push back the expiry of a key still held with `token`."""

    async def extend_many(self, ttls: Mapping[str, float], token: str) -> set[str]:
        """Push back the expiry of every key still held with `token`, each to its own time to
        live in seconds, in one round trip; returns the keys extended."""

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        """Release the keys still held with `token`; others are left alone."""

    async def break_many(self, keys: Sequence[str]) -> None:
        """Free the keys whoever holds them: only for keys whose holder is known dead (its
        heartbeat lapsed), which would otherwise keep them for the whole run's timeout."""

    async def ping(self) -> None:
        """Raise LockUnavailable unless the lock service answers."""

    async def close(self) -> None: ...


class LockUnavailable(Exception):
    """The lock service cannot be reached: no run may start (fail closed)."""


class EventPublisher(Protocol):
    """Execution events, CloudEvents 1.0 structured JSON, keyed by job id."""

    # False for a publisher that drops everything (none://): then no event is even written to
    # the outbox, and runs cost nothing for events.
    keeps_events: bool

    def publish(self, event: CloudEvent) -> None:
        """Hand an event over without blocking; never raises (an outage is counted, not fatal)."""

    async def publish_confirmed(
        self, events: Sequence[CloudEvent], *, timeout_seconds: float
    ) -> list[bool]:
        """Publish events in order (each keyed by its job id) and wait, at most the timeout, for
        their delivery: for each, whether the backend confirmed it. Never raises; an event not
        confirmed may still arrive later (the relay publishes it again: at least once)."""

    async def close(self, timeout_seconds: float) -> None:
        """Deliver what is pending within the deadline, then let go."""


class Mailer(Protocol):
    async def send(self, message: EmailMessage) -> None:
        """Deliver one message; raises MailError (with `transient`) when it could not."""

    async def close(self) -> None: ...


class MailError(Exception):
    def __init__(self, message: str, *, transient: bool, recipient_refused: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        # The receiving side refused the address itself, for good (a 5xx at RCPT, or a 5.1.x /
        # 5.2.x mailbox status): a hard bounce, as opposed to a refused login or message.
        self.recipient_refused = recipient_refused


@dataclass(frozen=True, kw_only=True)
class Ports:
    """The backends one engine runs on, opened and closed together by the daemon."""

    store: Store
    lock: Lock
    events: EventPublisher
    mailer: Mailer
    clock: Clock
