"""`catalogue_walk`: spot prices for the parts catalogue, under a vendor's daily quota.

Walks the parts oldest-priced first (never priced, then the longest ago), asks the vendor's
price API for each (vendor.py says what it calls and how it reads the answers) and records
`price`, `priceCurrency`, `priceCheckedAt` and a price history entry: the prices the alert
scanner's price rules see. A part the vendor fails on gets `priceError`. When the failure is
the part's (a 404, an answer without a price) its `priceCheckedAt` moves on, so a part the
vendor does not know cannot hold the walk at its head day after day; when it is the vendor's
(5xx, no answer) the part keeps its place, to be asked first next time.

The quota: every call costs one unit of `daily_quota`, counted in the product store per
`quota_key` and UTC day with an atomic reservation, so retries, overlapping runs and several
instances together never exceed it. At the quota the run stops, says so in its result
(`stopped: "quota"`), and the next day's run resumes where this one stopped. A 429 is waited
out (Retry-After) within the deadline; other failures are recorded on their part and the walk
goes on; at most `concurrency` calls are in flight.

Settings come from `[handler_settings.catalogue_walk]` and the params (settings.py: a job may
lower the configured quota, never raise it, and the configured key goes only to the configured
vendor). Once that table names `base_url`, `api_key` and `daily_quota`, a system job
`catalogue_walk` is seeded at boot: daily at 00:30 UTC, just after the vendor's day begins, an
hour's timeout, two retries (the quota holds across them). A job of one's own looks like:

    {"name": "spot-prices", "handler": "catalogue_walk",
     "schedule": {"kind": "cron", "expr": "0 30 1 * * *"},   # 01:30 UTC, after the quota resets
     "timeout_seconds": 3600, "max_retries": 2,
     "params": {"daily_quota": 5000, "concurrency": 4}}
"""

from __future__ import annotations

from tickd.handlers.catalogue_walk.settings import PARAMS, WalkSettings
from tickd.handlers.catalogue_walk.vendor import VendorClient
from tickd.handlers.catalogue_walk.walk import Walk
from tickd.handlers.product_store import PRODUCTS
from tickd.scheduler.plugin.api import CronSchedule, HandlerContext, Result, SystemJob, handler

SYSTEM_JOB = SystemJob(
    schedule=CronSchedule(expr="0 30 0 * * *"), timeout_seconds=3600, max_retries=2
)


# No limit per daemon: walks of one vendor keep apart by a lease in the store (walk.py), across
# every instance; walks of different vendors may well run together.
@handler(
    params_schema=PARAMS,
    secret_params={"api_key"},
    system_job=SYSTEM_JOB,
    system_job_needs={"base_url", "api_key", "daily_quota"},
    resources=(PRODUCTS,),
)
async def catalogue_walk(ctx: HandlerContext) -> Result:
    settings = WalkSettings.parse(ctx.params, ctx.config)
    walk = Walk(
        products=ctx.resource(PRODUCTS),
        vendor=VendorClient(ctx.http, base_url=settings.base_url, api_key=settings.api_key),
        clock=ctx.clock,
        settings=settings,
        deadline=ctx.deadline,
        logger=ctx.logger,
    )
    return await walk.run()
