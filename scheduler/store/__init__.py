"""The store port: jobs and executions. Backends: `sqlite:///path` (embedded), `mongodb://...`."""

from __future__ import annotations

from urllib.parse import urlsplit

from tickd.scheduler.ports import Store


def open_store(url: str) -> Store:
    """The store backend for a URL (not yet opened: call `await store.open()`)."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        from tickd.scheduler.store.sqlite import SQLiteStore

        return SQLiteStore(url)
    if scheme in ("mongodb", "mongodb+srv"):
        from tickd.scheduler.store.mongodb import MongoStore

        return MongoStore(url)
    raise ValueError(
        f"store_url: unsupported scheme {scheme!r} (expected sqlite://, mongodb:// or mongodb+srv://)"
    )
