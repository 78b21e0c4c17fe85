"""The catalogue walk on each product store, against its peer: the same vendor calls, no store.

A vendor on loopback answers every price at once, so what is measured is tickd's side: reading
the pages, reserving the quota, recording prices and history. The peer asks the same vendor for
the same parts with the same concurrency and records nothing, in the same process and minute;
`of_peer` is the walk's rate as a share of the peer's (1.0: the store costs nothing).

    python -m bench.catalogue_walk [--parts 2000] [--concurrency 4] [--stores sqlite,mongodb]
                                   [--mongodb-url mongodb://127.0.0.1:27017/]

Prints one JSON line for the peer and one per store. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from datetime import timedelta
from typing import Any

from aiohttp import web

from bench.alert_scan import opened
from tickd.handlers.catalogue_walk.settings import WalkSettings
from tickd.handlers.catalogue_walk.vendor import Priced, VendorClient
from tickd.handlers.catalogue_walk.walk import Walk
from tickd.handlers.product_store import Doc
from tickd.scheduler.plugin.http import safe_client_session
from tickd.scheduler.ports.clock import SystemClock

API_KEY = "bench-key-0123456789"


def vendor_app() -> web.Application:
    async def price(request: web.Request) -> web.Response:
        return web.json_response({"price": 1.25, "currency": "USD"})

    app = web.Application()
    app.router.add_get("/parts/{mpn}/price", price)
    return app


def catalogue(count: int) -> list[Doc]:
    return [{"_id": f"part-{i:06d}", "mpn": f"MPN-{i}", "price": 1.0} for i in range(count)]


async def peer(vendor: VendorClient, count: int, concurrency: int) -> float:
    """Calls per second of the vendor calls alone."""
    waiting = [f"MPN-{i}" for i in range(count)]
    clock = SystemClock()

    async def worker() -> None:
        while waiting:
            answer = await vendor.ask(waiting.pop(), time_limit=10, now=clock.now())
            assert isinstance(answer, Priced), answer

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - started)


async def walk_rate(
    store: str, vendor: VendorClient, settings: WalkSettings, args: argparse.Namespace
) -> dict[str, Any]:
    async with opened(store, args.mongodb_url) as products:
        await products.upsert_parts(catalogue(args.parts))
        clock = SystemClock()
        walk = Walk(
            products=products,
            vendor=vendor,
            clock=clock,
            settings=settings,
            deadline=clock.now() + timedelta(hours=1),
            logger=logging.getLogger("bench"),
        )
        started = time.perf_counter()
        result = await walk.run()
        elapsed = time.perf_counter() - started
    assert result["priced"] == args.parts, result
    return {"priced": result["priced"], "seconds": round(elapsed, 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--stores", default="sqlite,mongodb")
    parser.add_argument("--mongodb-url", default="mongodb://127.0.0.1:27017/")
    args = parser.parse_args()
    runner = web.AppRunner(vendor_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with safe_client_session(allow=["127.0.0.1"]) as http:
            vendor = VendorClient(http, base_url=base_url, api_key=API_KEY)
            settings = WalkSettings.parse(
                {"concurrency": args.concurrency, "min_age_seconds": 0},
                {"base_url": base_url, "api_key": API_KEY, "daily_quota": 10 * args.parts},
            )
            for store in args.stores.split(","):
                peer_rate = await peer(vendor, args.parts, args.concurrency)
                measured = await walk_rate(store, vendor, settings, args)
                rate = args.parts / measured["seconds"]
                print(
                    json.dumps(
                        {
                            "store": store,
                            **measured,
                            "parts_per_second": round(rate),
                            "peer_calls_per_second": round(peer_rate),
                            "of_peer": round(rate / peer_rate, 2),
                        }
                    ),
                    flush=True,
                )
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
