"""Alert scans on each product store: rules evaluated per second, and peak memory.

For each store: seed `--alerts` alerts of `--rules` rules each (all five types, all due, about one
rule in five fires, one alert in ten wants email) on a part per four alerts, then run scans with
the handler's default limits (200 alerts a scan) in one run, as the handler runs them (scans back to
back until nothing is due, then the emails), with no bound on the run's scans or time. The rate
is rules checked divided by the wall time of the run, emails to an outbox folder included;
`alerts_per_hour` is what a run scanning without a pause would check.

Peak memory is measured on a second pass over a fresh set of alerts, under tracemalloc (which
slows Python down, so it is not the pass that is timed): the peak of Python allocations during
one scan, beside the process's peak RSS.

    python -m bench.alert_scan [--alerts 2000] [--rules 5] [--stores sqlite,mongodb]
                               [--mongodb-url mongodb://127.0.0.1:27017/]

Prints one JSON line per store. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pymongo import AsyncMongoClient

from tickd.handlers.alert_scanner.scan import ScanLimits, ScanResult, scan, scan_until_done
from tickd.handlers.product_store import Doc, ProductStore, open_product_store
from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.ports.clock import SystemClock

RULE_KINDS = [
    ("price_change", "gt", 10),
    ("risk", "gt", 70),
    ("lifecycle", "changed", None),
    ("compliance", "changed", "RoHS"),
    ("new_alternate", "changed", None),
]


def parts(count: int) -> list[Doc]:
    return [
        {
            "_id": f"part-{i}",
            "name": f"PN-{i}",
            "price": " 12.00 " if i % 5 == 0 else 10.5,
            "riskScore": 80 if i % 5 == 1 else 40,
            "riskLevel": "medium",
            "compliance": {"RoHS": "no" if i % 5 == 2 else "yes", "REACH": "YES"},
            "lifecycle": "EOL" if i % 5 == 3 else "Active",
            "alternates": [f"ALT-{i}", f"ALT-{i}-B"] if i % 5 == 4 else [f"ALT-{i}"],
        }
        for i in range(count)
    ]


def alerts(count: int, rules: int, part_count: int, prefix: str) -> list[Doc]:
    return [
        {
            "_id": f"{prefix}-{i}",
            "userId": f"user-{i % max(1, count // 10)}",
            "email": f"user-{i % max(1, count // 10)}@example.com",
            "partId": f"part-{i % part_count}",
            "active": True,
            "rules": [_rule(r, notify_email=i % 10 == 0) for r in range(rules)],
        }
        for i in range(count)
    ]


def _rule(index: int, *, notify_email: bool) -> Doc:
    rule_type, operator, threshold = RULE_KINDS[index % len(RULE_KINDS)]
    cursor: Any = {
        "price_change": 10.0,
        "risk": 40,
        "lifecycle": "Active",
        "compliance": "YES",
        "new_alternate": None,  # armed by its first check, after which it is steady
    }[rule_type]
    return {
        "id": f"r{index}",
        "type": rule_type,
        "operator": operator,
        "threshold": threshold,
        "baseline": 10.0 if rule_type == "price_change" else None,
        "cursor": cursor,
        "lastCheckedAt": None,
        "lastTriggeredAt": None,
        "cooldownMinutes": 60,
        "notifyEmail": notify_email,
        "active": True,
    }


async def one_run(products: ProductStore, outbox: str) -> tuple[ScanResult, float]:
    """A run of the handler as deployed (scans back to back, then the emails), with no bound on
    its scans or its time."""
    mailer, clock = OutboxMailer(outbox), SystemClock()
    limits = ScanLimits(scans_per_run=10_000)
    started = time.perf_counter()
    until = clock.now() + timedelta(days=1)
    result = await scan_until_done(products, mailer, clock, limits, until=until)
    return result, time.perf_counter() - started


async def peak_of_one_scan(products: ProductStore, outbox: str) -> int:
    tracemalloc.start()
    try:
        await scan(products, OutboxMailer(outbox), SystemClock(), ScanLimits())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def measure(products: ProductStore, args: argparse.Namespace) -> dict[str, Any]:
    part_count = max(1, args.alerts // 4)
    await products.upsert_parts(parts(part_count))
    await products.upsert_alerts(alerts(args.alerts, args.rules, part_count, "timed"))
    with tempfile.TemporaryDirectory() as outbox:
        result, elapsed = await one_run(products, outbox)
        await products.upsert_alerts(alerts(args.alerts, args.rules, part_count, "traced"))
        peak = await peak_of_one_scan(products, outbox)
    return {
        "alerts": args.alerts,
        "rules": args.alerts * args.rules,
        "scans": result.scans,
        "evaluated": result.evaluated,
        "triggered": result.triggered,
        "emails_sent": result.emails_sent,
        "errors": result.errors,
        "seconds": round(elapsed, 3),
        "rules_per_second": round(result.evaluated / elapsed),
        "alerts_per_hour": round(result.alerts_read / elapsed * 3600),
        "ms_per_scan": round(elapsed / max(1, result.scans) * 1000, 1),
        "peak_python_mib_one_scan": round(peak / 2**20, 2),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


@asynccontextmanager
async def opened(store: str, mongodb_url: str) -> AsyncIterator[ProductStore]:
    with tempfile.TemporaryDirectory() as folder:
        database = f"tickd_bench_{uuid.uuid4().hex[:8]}"
        url = (
            f"sqlite:///{folder}/bench.db"
            if store == "sqlite"
            else urlunsplit(urlsplit(mongodb_url)._replace(path=f"/{database}"))
        )
        products = open_product_store(url)
        await products.open()
        try:
            yield products
        finally:
            await products.close()
            if store == "mongodb":
                client: AsyncMongoClient[Doc] = AsyncMongoClient(mongodb_url)
                await client.drop_database(database)
                await client.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alerts", type=int, default=2000)
    parser.add_argument("--rules", type=int, default=5)
    parser.add_argument("--stores", default="sqlite,mongodb")
    parser.add_argument("--mongodb-url", default="mongodb://127.0.0.1:27017/")
    args = parser.parse_args()
    for store in args.stores.split(","):
        async with opened(store, args.mongodb_url) as products:
            print(json.dumps({"store": store, **await measure(products, args)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
