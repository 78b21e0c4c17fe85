"""The production store: MongoDB through pymongo's asyncio client (`mongodb://host/database`).

Documents are the codec's (scheduler/codec.py), written as documents.py says: `_id`
strings, times as BSON dates with exact `_us` twins, collections `jobs`, `executions`,
`job_changes`, `run_requests` and `domains`. The database is the URL's path (default `tickd`);
a store built on a client it was handed uses that client's default database and never closes
it. What every MongoDB store shares (errors, FerretDB's limits, clients, indexes) is
scheduler/store/kit/mongodb.py.

Compare-and-set without transactions. Each statement is atomic on its document, which is all a
claim needs: the filter holds everything the claim read (revision, next_run_at, no lease, enabled)
and the update increments the job's fence, whose new value is the lease's token, and names the
claim call in `batch`. So a batch claim is two round trips whatever its size: one update command
with an UpdateOne per claim, then one find of the jobs whose `batch` is this call's (the winners).
Every other fenced write filters on the fence with a lease present: once a lease is reaped, its run
can no longer touch the job.

FerretDB 1.24 pushes down to PostgreSQL only equality on top-level fields (and $ne); `$in`, `$or`,
ranges, null and sorts are evaluated in Go over every document the pushed-down part matched. So
the hot path reads and writes by `_id` and by such equalities only (`batch`, `sent`), never by an
`_id` $in, which would decode the whole collection (scripts/services.sh indexes the equalities).

On FerretDB 1.24 (the test server, on its PostgreSQL handler) a statement is NOT atomic, so two
instances claiming one job at the same instant can both win, with the same token. There, only the
lock (Redis) keeps instances apart; the system tests run two daemons that way.
"""

from __future__ import annotations

from tickd.scheduler.store.mongodb.completion import MongoCompletion
from tickd.scheduler.store.mongodb.dispatch import MongoDispatch
from tickd.scheduler.store.mongodb.domains import MongoDomains
from tickd.scheduler.store.mongodb.executions import MongoExecutions
from tickd.scheduler.store.mongodb.housekeeping import MongoHousekeeping
from tickd.scheduler.store.mongodb.instances import MongoInstances
from tickd.scheduler.store.mongodb.jobs import MongoJobs
from tickd.scheduler.store.mongodb.outbox import MongoOutbox
from tickd.scheduler.store.mongodb.partitions import MongoPartitions
from tickd.scheduler.store.mongodb.requests import MongoRequests
from tickd.scheduler.store.mongodb.views import MongoViews


class MongoStore(
    MongoJobs,
    MongoDispatch,
    MongoCompletion,
    MongoInstances,
    MongoPartitions,
    MongoRequests,
    MongoExecutions,
    MongoOutbox,
    MongoHousekeeping,
    MongoViews,
    MongoDomains,
):
    """Jobs and executions in MongoDB; every batch of the engine is a bounded number of commands.
    A mixin per role of the store (scheduler/ports/store_engine.py, store_api.py), a file
    each."""
