"""The embedded store: one SQLite file in WAL mode, for a fresh checkout and single-host setups.

sqlite3 blocks, so every write runs on one dedicated thread that owns the writing connection (or,
a small batch of the engine's, on the loop's own); a batch of the engine is one transaction there,
not one per job. The reads ops make run on reader connections of their own, on threads of their
own, each within a time limit: WAL lets them read beside the writer, so they never hold up the
engine. Times are integer microseconds since the epoch, so a compare-and-set compares exactly what
it read.
"""

from __future__ import annotations

from tickd.scheduler.store.sqlite.completion import SQLiteCompletion
from tickd.scheduler.store.sqlite.dispatch import SQLiteDispatch
from tickd.scheduler.store.sqlite.domains import SQLiteDomains
from tickd.scheduler.store.sqlite.executions import SQLiteExecutions
from tickd.scheduler.store.sqlite.housekeeping import SQLiteHousekeeping
from tickd.scheduler.store.sqlite.instances import SQLiteInstances
from tickd.scheduler.store.sqlite.jobs import SQLiteJobs
from tickd.scheduler.store.sqlite.outbox import SQLiteOutbox
from tickd.scheduler.store.sqlite.partitions import SQLitePartitions
from tickd.scheduler.store.sqlite.requests import SQLiteRequests
from tickd.scheduler.store.sqlite.views import SQLiteViews


class SQLiteStore(
    SQLiteJobs,
    SQLiteDispatch,
    SQLiteCompletion,
    SQLiteInstances,
    SQLitePartitions,
    SQLiteRequests,
    SQLiteExecutions,
    SQLiteOutbox,
    SQLiteHousekeeping,
    SQLiteViews,
    SQLiteDomains,
):
    """Jobs and executions in one SQLite file: a batch of the engine is one transaction. A mixin
    per role of the store (scheduler/ports/store_engine.py, store_api.py), a file each."""
