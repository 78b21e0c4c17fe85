"""Round trips to the stores, counted where they happen: every command a MongoDB client of ours
sends (pymongo's command monitoring) and every call handed to a SQLite store's thread (one
transaction: a batch of the engine is one). Exported as
`tickd_store_operations_total{backend, operation}`, so anyone can see round trips per execution."""

from __future__ import annotations

import threading
from collections import Counter

from pymongo import monitoring


class OperationCounts:
    """Process-wide counts by (backend, operation), from any thread."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def count(self, backend: str, operation: str) -> None:
        with self._lock:
            self._counts[(backend, operation)] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


STORE_OPERATIONS = OperationCounts()


class CommandCounter(monitoring.CommandListener):
    """Counts each command a client sends, by name (find, update, insert, getMore...)."""

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        STORE_OPERATIONS.count("mongodb", event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        return None

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        return None


def count_sqlite_transaction() -> None:
    """One call on a SQLite store's thread. Statements are not counted: a Python callback per
    statement (every row of a batch) would cost more than the statement."""
    STORE_OPERATIONS.count("sqlite", "transaction")
