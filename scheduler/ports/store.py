"""The store's contract: the roles of its callers, and Store, the union a backend implements.

Each role is the part of the contract one kind of caller uses, its methods documented once where
the role is declared: the engine's loops' roles in scheduler/ports/store_engine.py, those ops reach
through the API in scheduler/ports/store_api.py. A caller takes the narrowest role it needs. The
values the methods take and return are in scheduler/ports/store_values.py.
"""

from __future__ import annotations

from typing import Protocol

from tickd.scheduler.ports.store_api import (
    CancelRequestStore,
    DomainStore,
    ExecutionStore,
    JobStore,
    RunRequestStore,
    ViewStore,
)
from tickd.scheduler.ports.store_engine import (
    CompletionStore,
    DispatchStore,
    HousekeepingStore,
    InstanceStore,
    OutboxStore,
    PartitionStore,
)


class StoreLifecycle(Protocol):
    """Opening, probing and closing the store: the daemon, which opens it with the other ports,
    and its health probe."""

    async def open(self) -> None:
        """Connect and create the schema and the indexes the due and history queries need."""

    async def close(self) -> None:
        """Close what this store opened (never a client it was handed)."""

    async def ping(self) -> None:
        """Raise StoreError unless the store answers."""


class Store(
    StoreLifecycle,
    JobStore,
    RunRequestStore,
    DispatchStore,
    CompletionStore,
    InstanceStore,
    PartitionStore,
    OutboxStore,
    HousekeepingStore,
    ExecutionStore,
    CancelRequestStore,
    ViewStore,
    DomainStore,
    Protocol,
):
    """Jobs, their executions, their history and the runs asked of them: every role at once.

    The same on every backend, and pinned by tests/contract/test_store.py:
    - Every failure is a StoreError (a driver's exception never escapes); `transient` says
      whether the same call may succeed later (connection lost, database busy) or never will
      (a constraint, a document the database cannot hold).
    - Times go in and come out exactly, to the microsecond, in UTC.
    - Writes that the engine may replay after a lost connection (inserting executions and run
      requests) are idempotent by id: a duplicate is left as stored, and nothing is raised.
    - Each method is one round trip for its whole batch, or a small fixed number of them.
    - Only what a method says is atomic is atomic; on FerretDB a filtered update is not, which
      is why the lock keeps instances apart there (scheduler/store/mongodb/store.py).

    The outbox (durable events). Given an `event_source` (the instance id), the three writes of an
    execution's state (insert_executions, write_ends, reap_expired_leases) write each
    execution's CloudEvent (scheduler/events `execution_event`) to the outbox with it; the relay
    (scheduler/maintenance/relay.py) publishes them and marks them sent. An event's `id` is
    `<execution id>:<status>`, so writing one twice (a replayed batch) stores it once, and a
    consumer deduplicates redeliveries by it. On SQLite the events are in the same transaction as
    the executions. On MongoDB (FerretDB has no transactions) they are written by the command
    right BEFORE the executions': a crash in between leaves an event whose execution write never
    happened (the run is then retried or reaped, and a later event of the execution tells what
    became of it), never an execution change without its event: at least once, never lost.
    """
