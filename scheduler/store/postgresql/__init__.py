"""The store on PostgreSQL (asyncpg): a file per role of the store (jobs, dispatch, completion,
instances, requests, executions, outbox, housekeeping, views), what they share (base), the
versioned schema (schema) and the statements several roles run. Rows are SQLite's shapes, read
by the same conversions (sqlite/rows.py). store.py composes PostgresStore from the roles."""

from __future__ import annotations

from tickd.scheduler.store.postgresql.store import PostgresStore

__all__ = ["PostgresStore"]
