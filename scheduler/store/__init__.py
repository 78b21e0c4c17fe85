"""The store port: jobs and executions. Backends, a folder each with a file per role:
`sqlite:///path` (embedded, sqlite/), `mongodb://...` (mongodb/), `postgresql://...`
(postgresql/); what every store shares,
plug-ins' own stores included, in kit/."""

from __future__ import annotations

from urllib.parse import urlsplit

from tickd.scheduler.ports.backends import Store


def open_store(url: str) -> Store:
    """The store backend for a URL (not yet opened: call `await store.open()`)."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        from tickd.scheduler.store.sqlite import SQLiteStore

        return SQLiteStore(url)
    if scheme in ("mongodb", "mongodb+srv"):
        from tickd.scheduler.store.mongodb import MongoStore

        return MongoStore(url)
    if scheme in ("postgresql", "postgres"):
        from tickd.scheduler.store.postgresql import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"store_url: unsupported scheme {scheme!r} (expected sqlite://, mongodb://, "
        "mongodb+srv://, postgresql:// or postgres://)"
    )
