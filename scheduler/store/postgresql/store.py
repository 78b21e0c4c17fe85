"""The store on PostgreSQL, for several instances on one database: a pool of asyncpg
connections, the schema created and migrated at open. Its tables and rows are SQLite's
(sqlite/schema.py, sqlite/rows.py), times integer microseconds, so a compare-and-set compares
exactly what it read. The hot calls are one statement a batch (arrays read back with unnest);
claims lock what they take with FOR UPDATE SKIP LOCKED, so claimers on several instances pass
each other by instead of waiting."""

from __future__ import annotations

from tickd.scheduler.store.postgresql.completion import PostgresCompletion
from tickd.scheduler.store.postgresql.dispatch import PostgresDispatch
from tickd.scheduler.store.postgresql.domains import PostgresDomains
from tickd.scheduler.store.postgresql.executions import PostgresExecutions
from tickd.scheduler.store.postgresql.housekeeping import PostgresHousekeeping
from tickd.scheduler.store.postgresql.instances import PostgresInstances
from tickd.scheduler.store.postgresql.jobs import PostgresJobs
from tickd.scheduler.store.postgresql.outbox import PostgresOutbox
from tickd.scheduler.store.postgresql.partitions import PostgresPartitions
from tickd.scheduler.store.postgresql.requests import PostgresRequests
from tickd.scheduler.store.postgresql.views import PostgresViews


class PostgresStore(
    PostgresJobs,
    PostgresDispatch,
    PostgresCompletion,
    PostgresInstances,
    PostgresPartitions,
    PostgresRequests,
    PostgresExecutions,
    PostgresOutbox,
    PostgresHousekeeping,
    PostgresViews,
    PostgresDomains,
):
    """Jobs and executions in one PostgreSQL database. A mixin per role of the store
    (scheduler/ports/store_engine.py, store_api.py), a file each."""
