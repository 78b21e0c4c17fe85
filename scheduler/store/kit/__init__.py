"""The store kit: what every store shares, whoever owns it. The job store (scheduler/store) is
built on it, and so are plug-ins' own stores (the product store of handlers/product_store): the
one part of the engine besides scheduler.plugin.api that plug-ins may import.

- `scheduler.store.kit.sqlite`: SQLiteFile, one file in WAL mode on a thread of its own;
- `scheduler.store.kit.mongodb`: MongoDatabase (a shared client per URL, the server's limits,
  indexes at open) and the FerretDB particulars in one place;
- here: the error every store raises, opening patiently (a database down at startup delays
  the daemon, it does not kill it), and the codec's time helpers.
"""

from __future__ import annotations

from tickd.scheduler.codec import EPOCH, Doc, as_datetime, exact_micros, micros, to_json_ready
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.store.kit.patience import StartupAborted, open_patiently

__all__ = [
    "EPOCH",
    "Doc",
    "StartupAborted",
    "StoreError",
    "as_datetime",
    "exact_micros",
    "micros",
    "open_patiently",
    "to_json_ready",
]
