"""The store port: jobs and executions. Backends, a folder each with a file per role:
`sqlite:///path` (embedded, sqlite/), `mongodb://...` (mongodb/), `postgresql://...`
(postgresql/); what every store shares,
plug-ins' own stores included, in kit/."""

from __future__ import annotations

from urllib.parse import urlsplit

from tickd.scheduler.partitions import DEFAULT_PARTITIONS
from tickd.scheduler.ports.backends import Store


def open_store(url: str, *, partitions: int = DEFAULT_PARTITIONS) -> Store:
    """The store backend for a URL (not yet opened: call `await store.open()`); `partitions`,
    how many a store created by that open gets."""
    store = _store_for(url)
    store.new_partition_count = partitions
    return store


def _store_for(url: str) -> Store:
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
