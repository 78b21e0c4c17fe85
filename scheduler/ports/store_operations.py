"""Round trips to the stores, counted where they happen: every command a MongoDB client of ours
sends (pymongo's command monitoring, in store_kit/mongodb.py) and every SQLite transaction (one
transaction: a batch of the engine is one), every PostgreSQL statement and explicit transaction.
Exported as
`tickd_store_operations_total{backend, operation}`, so anyone can see round trips per execution."""

from __future__ import annotations

import threading
from collections import Counter


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


def count_sqlite_transaction() -> None:
    """One call on a SQLite store's thread. Statements are not counted: a Python callback per
    statement (every row of a batch) would cost more than the statement."""
    STORE_OPERATIONS.count("sqlite", "transaction")


def count_postgresql_statement() -> None:
    """One statement sent to a PostgreSQL store: a round trip."""
    STORE_OPERATIONS.count("postgresql", "statement")


def count_postgresql_transaction() -> None:
    """One explicit transaction on a PostgreSQL store: its BEGIN and COMMIT are two round trips
    more than its statements. A single statement runs in a transaction of its own, uncounted."""
    STORE_OPERATIONS.count("postgresql", "transaction")
