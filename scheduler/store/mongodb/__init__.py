"""The production store on MongoDB: a file per role of the store (jobs, dispatch, completion,
instances, requests, executions, outbox, housekeeping and its retention, views), what they share
(base), and the documents and statements they use. store.py composes MongoStore from the roles."""

from __future__ import annotations

from tickd.scheduler.store.mongodb.store import MongoStore

__all__ = ["MongoStore"]
