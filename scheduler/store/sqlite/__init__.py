"""The embedded store on SQLite: a file per role of the store (jobs, dispatch, completion,
instances, requests, executions, outbox, housekeeping, views), what they share (base), and the
tables (schema), rows and statements they use. store.py composes SQLiteStore from the roles."""

from __future__ import annotations

from tickd.scheduler.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
