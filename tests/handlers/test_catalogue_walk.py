"""`catalogue_walk` against a real vendor API on loopback, on every product store backend.

The vendor is an aiohttp app that answers prices, scripted failures and 429s, counts the calls
and the calls in flight, and refuses a wrong key with a body that echoes it. Time is the
handler context's FakeClock: a Retry-After moves it, a new UTC day is a jump of the clock.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from aiohttp import web

from tests.alerts.builders import alert, price_rule
from tests.conftest import EngineFactory, make_job
from tests.fixtures.products import ProductDatabase
from tests.handlers.conftest import Serve
from tickd.handlers.alert_scanner.scan import scan
from tickd.handlers.catalogue_walk import catalogue_walk
from tickd.handlers.catalogue_walk.quota import QuotaPool
from tickd.handlers.catalogue_walk.settings import WalkSettings
from tickd.handlers.catalogue_walk.vendor import retry_after_seconds
from tickd.handlers.catalogue_walk.walk import WalkFailed
from tickd.handlers.product_store import PRODUCTS, Doc, ProductStore
from tickd.handlers.product_store.mongodb import MongoProductStore
from tickd.scheduler.mail.outbox import OutboxMailer
from tickd.scheduler.model import Status
from tickd.scheduler.plugin.api import HandlerContext
from tickd.scheduler.plugin.testing import handler_context
from tickd.scheduler.ports.backends import ExecutionQuery, StoreError
from tickd.scheduler.ports.clock import FakeClock

API_KEY = "vendor-key-0123456789abcdef"
# The walk's first day, mid-morning UTC.
DAY_1 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

Reply = tuple[int, Mapping[str, str], str]


@dataclass
class Vendor:
    """A price API: `prices` by part number; `scripted` replies for a part number are used, in
    turn, before its price is."""

    prices: dict[str, float] = field(default_factory=dict)
    scripted: dict[str, deque[Reply]] = field(default_factory=dict)
    # Held this long (real time) per call, so that calls overlap.
    delay: float = 0.0
    calls: list[str] = field(default_factory=list)
    # ("start" or "end", part number), in order.
    events: list[tuple[str, str]] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0

    def script(self, mpn: str, *replies: Reply) -> None:
        self.scripted.setdefault(mpn, deque()).extend(replies)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v2/parts/{mpn}/price", self._price)
        return app

    async def _price(self, request: web.Request) -> web.Response:
        mpn = request.match_info["mpn"]
        self.calls.append(mpn)
        self.events.append(("start", mpn))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            return self._reply(mpn, request.headers.get("Authorization", ""))
        finally:
            self.in_flight -= 1
            self.events.append(("end", mpn))

    def _reply(self, mpn: str, authorization: str) -> web.Response:
        if authorization != f"Bearer {API_KEY}":
            return web.Response(status=401, text=f"unknown key: {authorization}")
        if self.scripted.get(mpn):
            status, headers, body = self.scripted[mpn].popleft()
            return web.Response(status=status, headers=dict(headers), text=body)
        if mpn not in self.prices:
            return web.Response(status=404, text="no such part")
        return web.json_response({"price": self.prices[mpn], "currency": "USD"})


@pytest.fixture
def vendor() -> Vendor:
    return Vendor(prices={f"MPN-{i}": 1.0 + i for i in range(10)})


@pytest.fixture
async def vendor_url(serve: Serve, vendor: Vendor) -> str:
    return f"{await serve(vendor.app())}/v2"


def catalogue(count: int) -> list[Doc]:
    return [{"_id": f"part-{i}", "mpn": f"MPN-{i}", "price": 0.5} for i in range(count)]


@asynccontextmanager
async def walk_context(
    products: ProductStore,
    vendor_url: str,
    *,
    at: datetime = DAY_1,
    timeout_seconds: float = 600.0,
    config: Mapping[str, Any] | None = None,
    **params: Any,
) -> AsyncIterator[HandlerContext]:
    settings = {"base_url": vendor_url, "api_key": API_KEY, "daily_quota": 1000}
    async with handler_context(
        params=params,
        config=settings | dict(config or {}),
        resources={PRODUCTS: products},
        scheduled_at=at,
        timeout_seconds=timeout_seconds,
        http_allow=["127.0.0.1"],
    ) as ctx:
        yield ctx


async def walk(
    products: ProductStore, vendor_url: str, **options: Any
) -> tuple[dict[str, Any], HandlerContext]:
    async with walk_context(products, vendor_url, **options) as ctx:
        outcome = catalogue_walk(ctx)
        assert inspect.isawaitable(outcome)
        result = await outcome
        assert isinstance(result, dict)
        return result, ctx


async def part_docs(products: ProductStore, count: int) -> dict[str, Doc]:
    return await products.parts([f"part-{i}" for i in range(count)])


# -- pricing the catalogue ------------------------------------------------------------------------


async def test_the_walk_prices_every_part_and_keeps_a_history(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(3))

    result, _ = await walk(products, vendor_url)

    assert (result["priced"], result["failed"], result["stopped"]) == (3, 0, "done")
    assert sorted(vendor.calls) == ["MPN-0", "MPN-1", "MPN-2"]
    parts = await part_docs(products, 3)
    assert [parts[f"part-{i}"]["price"] for i in range(3)] == [1.0, 2.0, 3.0]
    assert {p["priceCurrency"] for p in parts.values()} == {"USD"}
    assert all(_as_utc(p["priceCheckedAt"]) == DAY_1 for p in parts.values())
    quota_key = vendor_url.split("/")[2]  # the vendor's host and port, by default
    [entry] = await products.price_history("part-1")
    assert (entry["price"], entry["currency"], entry["source"]) == (2.0, "USD", quota_key)
    assert result["quota"] == {
        "key": quota_key,
        "day": "2026-03-02",
        "limit": 1000,
        "used": 3,
        "reserved_unused": 0,  # no more reserved than there were parts to ask
    }


async def test_the_oldest_priced_go_first_and_the_recently_priced_are_left_alone(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    parts = catalogue(4)
    parts[0]["priceCheckedAt"] = DAY_1 - timedelta(days=3)
    parts[1]["priceCheckedAt"] = DAY_1 - timedelta(minutes=10)  # fresher than min_age
    parts[2]["priceCheckedAt"] = DAY_1 - timedelta(days=9)
    await products.upsert_parts(parts)  # part-3 was never priced

    result, _ = await walk(products, vendor_url, concurrency=1, min_age_seconds=3600)

    assert vendor.calls == ["MPN-3", "MPN-2", "MPN-0"]
    assert result["priced"] == 3


async def test_the_prices_written_are_what_the_alert_scanners_price_rules_see(
    products: ProductStore, vendor: Vendor, vendor_url: str, tmp_path: Any
) -> None:
    await products.upsert_parts([{"_id": "part-1", "mpn": "MPN-1", "price": 1.0}])
    await products.upsert_alerts([alert("a1", price_rule(baseline=1.0, threshold=50))])
    vendor.prices["MPN-1"] = 1.8  # +80 %

    await walk(products, vendor_url)
    result = await scan(products, OutboxMailer(tmp_path), FakeClock(DAY_1))

    assert result.triggered == 1
    [notification] = await products.notifications()
    assert notification.current_value == 1.8


# -- the daily quota ------------------------------------------------------------------------------


async def test_at_the_quota_the_walk_stops_says_so_and_resumes_the_next_day(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(5))
    config = {"daily_quota": "3"}  # from the environment: a string

    first, _ = await walk(products, vendor_url, config=config, concurrency=1)
    again, _ = await walk(products, vendor_url, config=config, at=DAY_1 + timedelta(hours=6))

    assert (first["priced"], first["stopped"], first["quota"]["used"]) == (3, "quota", 3)
    assert "quota of 3 calls" in first["message"] and "resumes" in first["message"]
    assert (again["priced"], again["stopped"]) == (0, "quota")
    assert len(vendor.calls) == 3
    next_day = DAY_1.replace(hour=0, minute=30) + timedelta(days=1)
    resumed, _ = await walk(products, vendor_url, config=config, at=next_day, concurrency=1)
    assert vendor.calls[3:5] == ["MPN-3", "MPN-4"]  # where the walk left off
    assert (resumed["quota"]["day"], resumed["quota"]["used"]) == ("2026-03-03", 3)


async def test_two_walks_of_one_vendor_at_once_one_walks_one_stands_aside_and_retries_add_nothing(
    product_db: ProductDatabase, vendor: Vendor, vendor_url: str
) -> None:
    # Two instances (two handles on one database) run walks of the same vendor at once.
    vendor.prices = {f"MPN-{i}": 1.0 for i in range(40)}
    vendor.delay = 0.01
    first, second = await product_db.open(), await product_db.open()
    await first.upsert_parts(catalogue(40))
    options: dict[str, Any] = {"config": {"daily_quota": 10}, "concurrency": 4}

    results = await asyncio.gather(
        walk(first, vendor_url, **options), walk(second, vendor_url, **options)
    )
    retried, _ = await walk(second, vendor_url, **options)

    assert sorted(result["stopped"] for result, _ in results) == ["busy", "quota"]
    assert sum(result["priced"] for result, _ in results) == 10
    assert len(vendor.calls) == len(set(vendor.calls)) == 10  # no part asked twice
    assert (retried["priced"], retried["stopped"], retried["quota"]["used"]) == (0, "quota", 10)


async def test_a_lease_left_by_a_walk_that_died_does_not_block_the_next(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(2))
    key = vendor_url.split("/")[2]
    dead_until = DAY_1 - timedelta(minutes=1)
    assert await products.take_lease(
        f"catalogue_walk|{key}", owner="died", until=dead_until, now=dead_until
    )

    result, _ = await walk(products, vendor_url)

    assert (result["priced"], result["stopped"]) == (2, "done")


# -- what the vendor answers ----------------------------------------------------------------------


async def test_a_429_is_waited_out_within_the_deadline(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(2))
    vendor.script("MPN-0", (429, {"Retry-After": "30"}, "slow down"))

    result, ctx = await walk(products, vendor_url, concurrency=1)

    assert (result["priced"], result["throttled"], result["waited_seconds"]) == (2, 1, 30.0)
    assert vendor.calls == ["MPN-0", "MPN-0", "MPN-1"]  # the same part, asked again
    assert ctx.clock.now() >= DAY_1 + timedelta(seconds=30)
    assert result["quota"]["used"] == 3  # the throttled call counted too


async def test_a_429_asking_to_wait_past_the_deadline_stops_the_walk_cleanly(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(3))
    later = (DAY_1 + timedelta(hours=2)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    vendor.script("MPN-0", (429, {"Retry-After": later}, ""))

    result, ctx = await walk(products, vendor_url, concurrency=1, timeout_seconds=600)

    assert (result["stopped"], result["priced"], result["throttled"]) == ("throttled", 0, 1)
    assert ctx.clock.now() == DAY_1  # it did not wait
    assert "priceCheckedAt" not in (await part_docs(products, 1))["part-0"]  # first next time


async def test_a_failing_part_is_recorded_on_itself_and_the_walk_goes_on(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts([*catalogue(3), {"_id": "part-x", "mpn": "GONE-1", "price": 7}])
    vendor.script("MPN-1", (500, {}, "internal error"))

    result, _ = await walk(products, vendor_url, concurrency=1)

    assert (result["priced"], result["failed"], result["stopped"]) == (2, 2, "done")
    errors = {e["part"]: e["error"] for e in result["errors"]}
    assert errors == {"part-1": "status 500: internal error", "part-x": "status 404: no such part"}
    parts = await products.parts(["part-1", "part-x", "part-2"])
    assert (parts["part-x"]["price"], parts["part-x"]["priceError"]["message"]) == (
        7,
        errors["part-x"],
    )
    assert _as_utc(parts["part-x"]["priceCheckedAt"]) == DAY_1  # not at the head again tomorrow
    assert parts["part-2"]["price"] == 3.0 and "priceError" not in parts["part-2"]
    assert await products.price_history("part-x") == []


@pytest.mark.parametrize(
    ("body", "price", "error"),
    [
        ('{"price": " 0.71 ", "currency": "EUR"}', 0.71, None),
        ('{"price": 3}', 3.0, None),
        ('{"price": -1}', None, "status 200, but the answer has no price (a number >= 0)"),
        ('{"price": "$2.95"}', None, "status 200, but the answer has no price (a number >= 0)"),
        ("<html>", None, "status 200, but the answer is not JSON"),
        ("[1.5]", None, "status 200, but the answer is not a JSON object"),
        ('{"price": 1, "currency": 7}', None, "status 200, but the currency is not a short string"),
    ],
)
async def test_what_a_price_answer_may_look_like(
    products: ProductStore,
    vendor: Vendor,
    vendor_url: str,
    body: str,
    price: float | None,
    error: str | None,
) -> None:
    await products.upsert_parts(catalogue(1))
    vendor.script("MPN-0", (200, {"Content-Type": "application/json"}, body))

    result, _ = await walk(products, vendor_url)

    part = (await part_docs(products, 1))["part-0"]
    assert part["price"] == (0.5 if price is None else price)
    assert part.get("priceError", {}).get("message") == error
    assert result["failed"] == (error is not None)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120.0),
        ("Mon, 02 Mar 2026 09:01:30 GMT", 90.0),
        ("Mon, 02 Mar 2026 08:00:00 GMT", 0.0),  # in the past: at once
        ("soon", None),
        (None, None),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header, DAY_1) == seconds


async def test_a_429_without_retry_after_backs_off_doubling(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(1))
    vendor.script("MPN-0", *[(429, {}, "")] * 3)

    result, _ = await walk(products, vendor_url)

    assert (result["priced"], result["throttled"], result["waited_seconds"]) == (1, 3, 7.0)


async def test_a_later_success_clears_the_parts_error(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(1))
    vendor.script("MPN-0", (503, {}, "maintenance"))
    await walk(products, vendor_url)
    await walk(products, vendor_url, at=DAY_1 + timedelta(hours=2))

    part = (await part_docs(products, 1))["part-0"]
    assert part["price"] == 1.0 and "priceError" not in part


async def test_a_refused_key_fails_the_run_and_never_shows_the_key(
    products: ProductStore, vendor: Vendor, vendor_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await products.upsert_parts(catalogue(3))
    caplog.set_level(logging.DEBUG)

    with pytest.raises(WalkFailed, match="refused the API key") as failure:
        await walk(products, vendor_url, config={"api_key": "wrong-key-abcdef0123"})

    assert "wrong-key-abcdef0123" not in str(failure.value)
    assert "unknown key: Bearer ***" in str(failure.value)
    assert "wrong-key-abcdef0123" not in caplog.text
    assert all("priceCheckedAt" not in p for p in (await part_docs(products, 3)).values())


async def test_a_vendor_that_keeps_failing_fails_the_run_after_recording_the_answers(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(6))
    for i in range(6):
        vendor.script(f"MPN-{i}", (502, {}, "bad gateway"))

    with pytest.raises(WalkFailed, match="failed 3 calls in a row"):
        await walk(products, vendor_url, concurrency=1, max_consecutive_failures=3)

    assert len(vendor.calls) == 3
    parts = await part_docs(products, 6)
    assert sum("priceError" in p for p in parts.values()) == 3


async def test_a_vendor_answering_a_maintenance_page_is_given_up_on_not_paid_for_in_full(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(10))
    for i in range(10):
        vendor.script(f"MPN-{i}", (200, {"Content-Type": "text/html"}, "<html>maintenance</html>"))

    with pytest.raises(WalkFailed, match="failed 3 calls in a row"):
        await walk(products, vendor_url, concurrency=4, max_consecutive_failures=3)

    assert (len(vendor.calls), vendor.most_in_flight) == (3, 1)


async def test_a_base_url_that_answers_404_to_everything_is_given_up_on(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(10))
    vendor.prices.clear()  # every part: 404

    with pytest.raises(WalkFailed, match="failed 3 calls in a row"):
        await walk(products, vendor_url, concurrency=4, max_consecutive_failures=3)

    assert len(vendor.calls) == 3


async def test_parts_the_vendor_always_fails_on_give_up_their_place_after_three_runs(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(8))
    for i in range(3):  # the first three in line: the vendor errs on them, every time
        vendor.script(f"MPN-{i}", *[(502, {}, "upstream error")] * 10)

    for day in range(3):
        with pytest.raises(WalkFailed, match="failed 3 calls in a row"):
            await walk(
                products,
                vendor_url,
                at=DAY_1 + timedelta(days=day),
                concurrency=1,
                max_consecutive_failures=3,
            )
    # The three were asked a day ago: a min_age of two days leaves them out of this run.
    result, _ = await walk(
        products,
        vendor_url,
        at=DAY_1 + timedelta(days=3),
        max_consecutive_failures=3,
        min_age_seconds=2 * 86_400,
    )

    assert (result["priced"], result["stopped"]) == (5, "done")
    stuck = (await part_docs(products, 3))["part-0"]
    assert stuck["priceError"]["vendorFailures"] == 3 and "priceCheckedAt" in stuck


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("[" * 100_000, "status 200, but the answer is over 64 KiB"),
        ("[" * 5_000, "status 200, but the answer is nested too deep"),
        (
            '{"price": 1' + "0" * 400 + "}",
            "status 200, but the answer has no price (a number >= 0)",
        ),
    ],
)
async def test_an_answer_no_parser_takes_is_the_parts_failure_not_the_walks(
    products: ProductStore, vendor: Vendor, vendor_url: str, body: str, error: str
) -> None:
    await products.upsert_parts(catalogue(3))
    vendor.script("MPN-1", (200, {"Content-Type": "application/json"}, body))

    result, _ = await walk(products, vendor_url, concurrency=1)

    assert (result["priced"], result["failed"], result["stopped"]) == (2, 1, "done")
    assert result["errors"] == [{"part": "part-1", "error": error}]


async def test_a_part_number_the_url_cannot_hold_is_the_parts_failure(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    if isinstance(products, MongoProductStore):
        pytest.skip("BSON cannot hold such a string: the part cannot exist there")
    await products.upsert_parts([*catalogue(2), {"_id": "part-x", "mpn": "BAD\ud800"}])

    result, _ = await walk(products, vendor_url, concurrency=1)

    assert (result["priced"], result["failed"]) == (2, 1)
    assert result["errors"][0]["error"].startswith("cannot ask for or read this part's price")


async def test_a_vendor_that_is_down_is_asked_one_call_at_a_time_and_parts_keep_their_place(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(10))
    for i in range(10):
        vendor.script(f"MPN-{i}", (503, {}, "down for maintenance"))
    vendor.delay = 0.02

    with pytest.raises(WalkFailed, match="failed 5 calls in a row"):
        await walk(products, vendor_url, concurrency=4, max_consecutive_failures=5)

    assert (len(vendor.calls), vendor.most_in_flight) == (5, 1)
    parts = await part_docs(products, 10)
    asked = [parts[f"part-{i}"] for i in range(5)]
    assert all(p["priceError"]["message"] == "status 503: down for maintenance" for p in asked)
    assert all("priceCheckedAt" not in p for p in asked)  # first in line again next time


async def test_the_first_call_goes_alone_then_calls_in_flight_are_bounded_by_the_concurrency(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(10))
    vendor.delay = 0.02

    result, _ = await walk(products, vendor_url, concurrency=3)

    assert result["priced"] == 10
    assert vendor.events[:2] == [("start", "MPN-0"), ("end", "MPN-0")]  # then the others
    assert vendor.most_in_flight == 3


async def test_max_parts_bounds_a_run(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(10))
    result, _ = await walk(products, vendor_url, max_parts=4)
    assert (result["priced"], result["stopped"], len(vendor.calls)) == (4, "max_parts", 4)


async def test_with_too_little_time_left_nothing_is_asked(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(2))
    result, _ = await walk(products, vendor_url, timeout_seconds=2.5)
    assert (result["stopped"], result["priced"], vendor.calls) == ("deadline", 0, [])
    assert result["quota"]["used"] == 0


async def test_a_retry_after_of_zero_still_backs_off_and_the_walk_gives_up_in_the_end(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(2))
    vendor.script("MPN-0", *[(429, {"Retry-After": "0"}, "")] * 30)

    result, _ = await walk(products, vendor_url, concurrency=1)

    # 1, 2, 4 ... doubling to 60 s for ten refusals in a row; the eleventh stops the walk.
    assert (result["stopped"], result["throttled"], len(vendor.calls)) == ("throttled", 11, 11)
    assert result["waited_seconds"] == 1 + 2 + 4 + 8 + 16 + 32 + 60 * 4
    assert result["quota"]["used"] == 11  # not the whole day's quota on one part


async def test_one_burst_of_429s_to_several_workers_is_waited_out_once(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(5))
    for i in range(1, 5):  # the first call (alone, see below) goes through; the next four not
        vendor.script(f"MPN-{i}", (429, {"Retry-After": "10"}, ""))
    vendor.delay = 0.5  # the four calls are in flight together when the first 429 comes back

    result, ctx = await walk(products, vendor_url, concurrency=4)

    assert (result["priced"], result["throttled"], result["waited_seconds"]) == (5, 4, 10.0)
    assert ctx.clock.now() == DAY_1 + timedelta(seconds=10)


@pytest.mark.parametrize(
    "header", ["99999999999999", "9" * 5000, "\u00b2", "Fri, 31 Dec 9999 23:59:59 GMT"]
)
async def test_an_absurd_retry_after_stops_the_walk_without_breaking_it(
    products: ProductStore, vendor: Vendor, vendor_url: str, header: str
) -> None:
    await products.upsert_parts(catalogue(2))
    vendor.script("MPN-0", (429, {"Retry-After": header}, ""))

    result, _ = await walk(products, vendor_url, concurrency=1)

    if header == "\u00b2":  # unreadable: the 1 s backoff, then the part is priced
        assert (result["stopped"], result["priced"]) == ("done", 2)
    else:
        assert (result["stopped"], result["priced"]) == ("throttled", 0)


async def test_a_run_across_midnight_charges_each_call_to_its_own_day(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(8))
    vendor.script("MPN-0", (429, {"Retry-After": "60"}, ""))
    before_midnight = DAY_1.replace(hour=23, minute=59, second=30)

    result, _ = await walk(
        products, vendor_url, at=before_midnight, config={"daily_quota": 5}, concurrency=1
    )

    assert await products.quota_used(result["quota"]["key"], DAY_1.date()) == 1
    assert result["quota"]["day"] == "2026-03-03"
    assert (result["quota"]["used"], result["priced"], len(vendor.calls)) == (5, 5, 6)


async def test_a_worker_that_read_the_time_before_midnight_does_not_take_the_pool_back(
    products: ProductStore,
) -> None:
    pool = QuotaPool(products, key="vendor:443", limit=5, chunk=2)
    after = datetime(2026, 3, 3, 0, 0, 1, tzinfo=UTC)
    before = after - timedelta(seconds=2)

    assert await pool.take(2, lambda: after)  # the run's first unit, alone
    assert await pool.take(2, lambda: before)

    assert pool.day == after.date()
    assert await products.quota_used("vendor:443", before.date()) == 0
    assert await products.quota_used("vendor:443", after.date()) == 3


async def test_a_refused_key_costs_one_unit_per_attempt(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(30))
    for _attempt in range(3):
        with pytest.raises(WalkFailed):
            await walk(products, vendor_url, config={"api_key": "wrong-key-abcdef0123"})
    assert len(vendor.calls) == 3
    assert await products.quota_used(vendor_url.split("/")[2], DAY_1.date()) == 3


class FailingStore:
    """A product store whose `fail_on`-th reservation raises, and whose recording can be held."""

    def __init__(self, inner: ProductStore, *, fail_on: int = 0) -> None:
        self._inner = inner
        self._fail_on = fail_on
        self.reservations = 0
        self.hold_recording: asyncio.Event | None = None
        self.recording = asyncio.Event()
        self.recorded = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def reserve_quota(self, key: str, day: Any, *, limit: int, want: int) -> int:
        self.reservations += 1
        if self.reservations == self._fail_on:
            raise StoreError("sqlite: disk I/O error")
        return await self._inner.reserve_quota(key, day, limit=limit, want=want)

    async def record_price_checks(self, checks: Any) -> set[str]:
        self.recording.set()
        if self.hold_recording is not None:
            await self.hold_recording.wait()
        recorded = await self._inner.record_price_checks(checks)
        self.recorded.set()
        return recorded


async def test_a_store_error_mid_page_fails_the_run_but_keeps_the_answers_paid_for(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(5))
    failing = FailingStore(products, fail_on=3)

    with pytest.raises(StoreError, match="disk I/O error"):
        await walk(cast(ProductStore, failing), vendor_url, concurrency=1)

    # The probe and one more reservation paid for two calls; both answers are in the store.
    parts = await part_docs(products, 5)
    assert sorted(p for p, doc in parts.items() if "priceCheckedAt" in doc) == ["part-0", "part-1"]
    assert len(vendor.calls) == 2


async def test_answers_being_recorded_when_the_deadline_cancels_the_run_are_recorded(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    await products.upsert_parts(catalogue(3))
    held = FailingStore(products)
    held.hold_recording = asyncio.Event()

    run = asyncio.ensure_future(walk(cast(ProductStore, held), vendor_url))
    await asyncio.wait_for(held.recording.wait(), timeout=10)
    run.cancel()  # what the runner does at the deadline
    with pytest.raises(asyncio.CancelledError):
        await run
    held.hold_recording.set()

    await asyncio.wait_for(held.recorded.wait(), timeout=10)
    parts = await part_docs(products, 3)
    assert [parts[f"part-{i}"]["price"] for i in range(3)] == [1.0, 2.0, 3.0]


async def test_parts_with_ids_of_any_type_are_priced_each_on_itself(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    if not isinstance(products, MongoProductStore):
        pytest.skip("SQLite keeps every id as a string")
    typed: list[Doc] = [
        {"_id": 1.5, "mpn": "MPN-0"},
        {"_id": 7, "mpn": "MPN-1"},
        {"_id": "7", "mpn": "MPN-2"},  # another part, whose id reads the same as text
        {"_id": {"sku": "A-1"}, "mpn": "MPN-3"},
    ]
    # Enough int ids after them for the string "7" to come on a later page than the int 7.
    ints: list[Doc] = [{"_id": 100 + i, "mpn": f"MPN-{100 + i}"} for i in range(30)]
    vendor.prices |= {f"MPN-{100 + i}": 9.0 for i in range(30)}
    await products.upsert_parts(typed + ints)

    result, _ = await walk(products, vendor_url, concurrency=1)

    assert (result["priced"], result["stopped"], len(vendor.calls)) == (34, "done", 34)
    by_mpn = {
        doc["mpn"]: (doc["_id"], doc["price"])
        async for doc in products.part_docs.find(
            {"mpn": {"$in": ["MPN-0", "MPN-1", "MPN-2", "MPN-3"]}}
        )
    }
    assert by_mpn == {
        "MPN-0": (1.5, 1.0),
        "MPN-1": (7, 2.0),
        "MPN-2": ("7", 3.0),
        "MPN-3": ({"sku": "A-1"}, 4.0),
    }


class ForgetfulStore(FailingStore):
    """Records every answer but those for `forget`: as a store that cannot match their ids."""

    def __init__(self, inner: ProductStore, forget: str) -> None:
        super().__init__(inner)
        self.forget = forget

    async def record_price_checks(self, checks: Any) -> set[str]:
        kept = [check for check in checks if check.part_id != self.forget]
        return await self._inner.record_price_checks(kept)


async def test_an_answer_the_store_could_not_record_is_named_and_the_part_not_asked_again(
    products: ProductStore, vendor: Vendor, vendor_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await products.upsert_parts(catalogue(4))
    forgetful = ForgetfulStore(products, forget="part-0")

    result, _ = await walk(cast(ProductStore, forgetful), vendor_url, concurrency=1)

    assert (result["stopped"], result["priced"], result["unrecorded"]) == ("done", 3, 1)
    assert result["unrecorded_parts"] == ["part-0"]
    assert vendor.calls == ["MPN-0", "MPN-1", "MPN-2", "MPN-3"]  # read past, not asked again
    assert "1 answers had no part to be recorded on" in caplog.text


async def test_a_part_number_of_dots_is_not_asked_for(
    products: ProductStore, vendor: Vendor, vendor_url: str
) -> None:
    # In a URL path ".." is the parent: the key would go to another of the vendor's paths.
    await products.upsert_parts([{"_id": "part-0", "mpn": ".."}, {"_id": "part-1", "name": "."}])

    result, _ = await walk(products, vendor_url)

    assert (result["failed"], vendor.calls) == (2, [])
    assert {e["error"] for e in result["errors"]} == {
        "the part has no usable mpn, partNumber or name"
    }


# -- settings -------------------------------------------------------------------------------------


CONFIGURED = {"base_url": "https://api.vendor.example/v2/", "api_key": "k" * 20, "daily_quota": 9}


def test_a_job_may_lower_the_configured_quota_never_raise_or_rename_it() -> None:
    settings = WalkSettings.parse({"daily_quota": 5, "concurrency": 2}, CONFIGURED)
    assert (settings.base_url, settings.daily_quota, settings.concurrency) == (
        "https://api.vendor.example/v2",
        5,
        2,
    )
    assert settings.quota_key == "api.vendor.example:443"
    assert "k" * 20 not in repr(settings)
    with pytest.raises(ValueError, match=r"params\.daily_quota: at most the configured 9"):
        WalkSettings.parse({"daily_quota": 10}, CONFIGURED)
    with pytest.raises(ValueError, match=r"params\.quota_key: only with a base_url of the job"):
        WalkSettings.parse({"quota_key": "fresh-counter"}, CONFIGURED)


def test_the_configured_key_is_never_sent_to_a_url_of_the_jobs_choosing() -> None:
    elsewhere = {"base_url": "https://collector.example"}
    with pytest.raises(ValueError, match=r"params\.api_key: required with a base_url of the job"):
        WalkSettings.parse(elsewhere, CONFIGURED)
    own = WalkSettings.parse({**elsewhere, "api_key": "theirs", "daily_quota": 50}, CONFIGURED)
    assert (own.api_key, own.daily_quota, own.quota_key) == ("theirs", 50, "collector.example:443")
    same = WalkSettings.parse({"base_url": "https://api.vendor.example/v2"}, CONFIGURED)
    assert same.api_key == "k" * 20  # the configured URL, spelt as configured


@pytest.mark.parametrize(
    ("urls", "key"),
    [
        (
            ["https://API.Vendor.example/v2", "https://api.vendor.example.:443/v3/"],
            "api.vendor.example:443",
        ),
        (["http://[0::1]:8080/", "http://[::1]:8080/prices"], "[::1]:8080"),
        (["https://bücher.example/", "https://xn--bcher-kva.example"], "xn--bcher-kva.example:443"),
    ],
)
def test_one_vendor_is_one_quota_however_its_url_is_spelt(urls: list[str], key: str) -> None:
    keys = {
        WalkSettings.parse({"base_url": url, "api_key": "k", "daily_quota": 1}, {}).quota_key
        for url in urls
    }
    assert keys == {key}


def test_another_spelling_of_the_configured_vendor_is_the_configured_vendor() -> None:
    # Its key, and its quota: a job cannot get a counter of its own by spelling the URL anew.
    for url in ("https://API.vendor.example:443/v3", "https://api.vendor.example./v2"):
        settings = WalkSettings.parse({"base_url": url, "daily_quota": 5}, CONFIGURED)
        assert (settings.api_key, settings.quota_key) == (
            CONFIGURED["api_key"],
            "api.vendor.example:443",
        )
        with pytest.raises(ValueError, match=r"params\.daily_quota: at most the configured 9"):
            WalkSettings.parse({"base_url": url, "daily_quota": 10}, CONFIGURED)


def test_a_look_alike_of_the_configured_host_is_another_vendor() -> None:
    # IDNA 2003 folds "faß" into "fass"; aiohttp dials xn--fa-hia.de, someone else's domain.
    configured = {**CONFIGURED, "base_url": "https://fass.de/api"}
    with pytest.raises(ValueError, match=r"params\.api_key: required with a base_url of the job"):
        WalkSettings.parse({"base_url": "https://faß.de/api"}, configured)


def test_the_walk_refuses_settings_it_does_not_know() -> None:
    # TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__DAILY__QUOTA is daily__quota: a typo, not silence.
    with pytest.raises(ValueError, match=r"handler_settings\.catalogue_walk: unknown daily__quota"):
        WalkSettings.parse({}, {**CONFIGURED, "daily__quota": "5"})


def test_a_jobs_own_vendor_cannot_spend_the_configured_quota() -> None:
    own = {"base_url": "https://other.example", "api_key": "theirs", "daily_quota": 10**6}
    with pytest.raises(ValueError, match=r"params\.quota_key: 'api\.vendor\.example:443' is"):
        WalkSettings.parse({**own, "quota_key": "api.vendor.example:443"}, CONFIGURED)


@pytest.mark.parametrize(
    ("params", "config", "message"),
    [
        ({}, {"base_url": "https://v.example"}, r"params\.api_key: required \(or set handler_"),
        (
            {"daily_quota": 5},
            {"base_url": "https://v.example", "api_key": "k"},
            r"handler_settings\.catalogue_walk\.daily_quota: required with handler_settings",
        ),
        ({"api_key": "k"}, {}, r"params\.base_url: required"),
        (
            {},
            {"base_url": "https://v.example", "api_key": "k", "daily_quota": "lots"},
            r"handler_settings\.catalogue_walk\.daily_quota: a whole number >= 1",
        ),
        (
            {"api_key": "k", "base_url": "ftp://v.example", "daily_quota": 1},
            {},
            r"params\.base_url: an http:// or https:// URL",
        ),
        (
            {"api_key": "k", "base_url": "https://user:pw@v.example", "daily_quota": 1},
            {},
            r"params\.base_url: no user or password in the URL",
        ),
        (
            {"api_key": "k", "base_url": "https://v.example/api?v=2", "daily_quota": 1},
            {},
            r"params\.base_url: no query or fragment in the base URL",
        ),
        (
            {},
            {"base_url": "https://v.example", "api_key": "pasted-key\n", "daily_quota": 1},
            r"handler_settings\.catalogue_walk\.api_key: a key without spaces or control",
        ),
        (
            {"api_key": "k", "base_url": "https://v.example", "daily_quota": 1, "concurency": 2},
            {},
            r"params: unknown concurency",
        ),
    ],
)
def test_a_missing_or_bad_setting_is_named(
    params: dict[str, Any], config: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        WalkSettings.parse(params, config)


# -- through the engine ---------------------------------------------------------------------------


async def test_a_job_walks_with_the_vendor_of_the_daemons_configuration(
    make_engine: EngineFactory, vendor: Vendor, vendor_url: str
) -> None:
    configured = {"base_url": vendor_url, "api_key": API_KEY, "daily_quota": "2"}
    h = make_engine(
        {"catalogue_walk": catalogue_walk},
        http_allow=["127.0.0.1"],
        handler_settings={"catalogue_walk": configured},
    )
    products = h.products
    await products.upsert_parts(catalogue(3))
    await h.add(make_job("prices", "catalogue_walk", params={"concurrency": 2}))
    await h.engine.drain()

    [run] = await h.store.list_executions(ExecutionQuery(limit=10))
    assert run.status == Status.SUCCESS, run.error
    assert run.result is not None
    assert (run.result["priced"], run.result["stopped"]) == (2, "quota")
    assert API_KEY not in repr(h.settings) and API_KEY not in repr(run.result)


def _as_utc(value: Any) -> datetime:
    """A stored time: a datetime (MongoDB gives it naive, in UTC) or an ISO string (SQLite)."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when
