"""One run of the catalogue walk: pages of parts, oldest-priced first, each part one vendor call
paid for with a unit of the day's quota, the page's answers recorded before the next page.

Why it stops, in `stopped`:
- `done`: every part was priced within `min_age_seconds`; nothing left to ask.
- `quota`: the day's quota is spent (by this run or any other sharing the key). The parts not
  reached keep their old `priceCheckedAt`, so tomorrow's first run takes them first.
- `max_parts`: the run asked as many parts as its params allow.
- `deadline`: too little time left for another call and the recording of the answers.
- `throttled`: the vendor asked to wait (429 Retry-After) beyond the deadline.
- `key_refused` and `vendor_failing` (the vendor failing `max_consecutive_failures` calls in a
  row): the answers so far are recorded, then the run fails (WalkFailed), since a retry or the
  next run is all that can help, and ops should hear of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from handlers.catalogue_walk.settings import WalkSettings
from handlers.catalogue_walk.vendor import Failed, KeyRefused, Priced, Throttled, VendorClient
from scheduler.clock import Clock
from scheduler.product import Doc, PriceCheck, ProductStore

# Kept back from the deadline to record the last page's answers.
RECORD_RESERVE_SECONDS = 2.0
# A call is not started with less time than this for it.
MIN_CALL_SECONDS = 1.0
# Parts read, asked and recorded together. A page costs a few store round trips whatever its
# size (on FerretDB, whose parts query reads the whole collection, the number of pages is most
# of the walk's time), and a run cut short could lose a page's answers.
MIN_PAGE = 25
PARTS_PER_WORKER = 8
MAX_PAGE = 100
# Without a readable Retry-After, wait 1 s, doubling with each 429 in a row, up to this.
MAX_UNSAID_RETRY_AFTER_SECONDS = 60.0
# The result lists the first few failed parts, not all of them.
ERRORS_IN_RESULT = 10
# Fields naming a part to the vendor, the first present wins.
PART_NUMBER_FIELDS = ("mpn", "partNumber", "name")

FAILING_STOPS = ("key_refused", "vendor_failing")


class WalkFailed(Exception):
    """The vendor refused the key or kept failing; the answers before were recorded."""


class QuotaPool:
    """Units of the day's quota, reserved from the store for what is left of a page at a time
    (at most `chunk`) and handed out one per call. Units reserved and not used when the run
    stops are lost to the day, a page's worth at most: the quota errs towards fewer calls,
    never more."""

    def __init__(
        self, products: ProductStore, *, key: str, day: date, limit: int, chunk: int
    ) -> None:
        self._products = products
        self.key = key
        self.day = day
        self.limit = limit
        self._chunk = chunk
        self._left = 0
        self.spent = False
        self.unused_reserved = 0
        self._lock = asyncio.Lock()

    async def take(self, upcoming: int) -> bool:
        """One unit for one call, with `upcoming` calls (this one included) in view, so that
        no more are reserved than will be asked; False once the day's quota is spent."""
        async with self._lock:
            if self._left == 0 and not self.spent:
                self._left = await self._products.reserve_quota(
                    self.key, self.day, limit=self.limit, want=min(self._chunk, upcoming)
                )
                self.spent = self._left == 0
            if self._left == 0:
                return False
            self._left -= 1
            return True

    def release_unused(self) -> None:
        """Count what is left as lost (the store never gives units back)."""
        self.unused_reserved, self._left = self._left, 0


@dataclass
class WalkReport:
    priced: int = 0
    failed: int = 0
    # 429 answers, and the time spent waiting for them.
    throttled: int = 0
    waited_seconds: float = 0.0
    stopped: str = ""
    errors: list[dict[str, str]] = field(default_factory=list)

    def add(self, check: PriceCheck) -> None:
        if check.error is None:
            self.priced += 1
            return
        self.failed += 1
        if len(self.errors) < ERRORS_IN_RESULT:
            self.errors.append({"part": check.part_id, "error": check.error})


class Walk:
    def __init__(
        self,
        *,
        products: ProductStore,
        vendor: VendorClient,
        clock: Clock,
        settings: WalkSettings,
        deadline: datetime,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self.products = products
        self.vendor = vendor
        self.clock = clock
        self.settings = settings
        self.deadline = deadline
        self.logger = logger
        self.report = WalkReport()
        self.started = clock.now()
        self.quota = QuotaPool(
            products,
            key=settings.quota_key,
            day=self.started.astimezone(UTC).date(),
            limit=settings.daily_quota,
            chunk=page_size(settings.concurrency),
        )
        self._asked = 0
        self._failures_in_a_row = 0
        self._throttles_in_a_row = 0
        self._resume_at = self.started
        self._stop_detail = ""
        # One worker waits out a 429 at a time: the others queue behind it, not beside it.
        self._throttle_wait = asyncio.Lock()

    async def run(self) -> dict[str, Any]:
        """Walk until a reason to stop; returns the result. Raises WalkFailed (after recording
        every answer) when the vendor refuses the key or keeps failing."""
        checked_before = self.started - timedelta(seconds=self.settings.min_age_seconds)
        while not self.report.stopped:
            page = await self._next_page(checked_before)
            if page:
                await self._walk_page(page)
        self.quota.release_unused()
        result = await self._result()
        self.logger.info(
            "catalogue walk stopped: %s", self.report.stopped, extra={"result": result}
        )
        if self.report.stopped in FAILING_STOPS:
            raise WalkFailed(self._failure_message())
        return result

    async def _next_page(self, checked_before: datetime) -> list[Doc]:
        size = page_size(self.settings.concurrency)
        if self.settings.max_parts is not None:
            size = min(size, self.settings.max_parts - self._asked)
            if size <= 0:
                self._stop("max_parts")
                return []
        page = await self.products.parts_to_price(checked_before=checked_before, limit=size)
        if not page:
            self._stop("done")
        return page

    async def _walk_page(self, page: list[Doc]) -> None:
        waiting = deque(page)
        checks: list[PriceCheck] = []
        workers = min(self.settings.concurrency, len(page))
        await asyncio.gather(*(self._worker(waiting, checks) for _ in range(workers)))
        await self.products.record_price_checks(checks)
        for check in checks:
            self.report.add(check)

    async def _worker(self, waiting: deque[Doc], checks: list[PriceCheck]) -> None:
        while waiting and not self.report.stopped:
            check = await self._check(waiting.popleft(), upcoming=len(waiting) + 1)
            if check is not None:
                checks.append(check)

    async def _check(self, part: Doc, *, upcoming: int) -> PriceCheck | None:
        """The part's price check, or None if the walk stopped before the part was asked."""
        part_id = str(part["_id"])
        mpn = part_number(part)
        if mpn is None:
            return self._checked(part_id, error="the part has no mpn, partNumber or name")
        while not self.report.stopped:
            timeout = await self._time_for_a_call()
            if timeout is None or not await self._take_unit(upcoming):
                return None
            answer = await self.vendor.ask(mpn, time_limit=timeout, now=self.clock.now())
            if isinstance(answer, Throttled):
                self._throttled(answer)
                continue
            return self._on_answer(part_id, answer)
        return None

    async def _time_for_a_call(self) -> float | None:
        """Waits out a 429 first. The seconds a call may take, or None (and the walk stopped)
        if there is no time for one before the deadline."""
        async with self._throttle_wait:
            wait = (self._resume_at - self.clock.now()).total_seconds()
            if wait > 0:
                if self._seconds_left() - wait < MIN_CALL_SECONDS:
                    self._stop("throttled")
                    return None
                await self.clock.sleep(wait)
                self.report.waited_seconds += wait
        time_left = self._seconds_left()
        if time_left < MIN_CALL_SECONDS:
            self._stop("deadline")
            return None
        return min(self.settings.request_timeout_seconds, time_left)

    async def _take_unit(self, upcoming: int) -> bool:
        if self.settings.max_parts is not None and self._asked >= self.settings.max_parts:
            self._stop("max_parts")
            return False
        if self.settings.max_parts is not None:
            upcoming = min(upcoming, self.settings.max_parts - self._asked)
        if not await self.quota.take(upcoming):
            self._stop("quota")
            return False
        self._asked += 1
        return True

    def _throttled(self, answer: Throttled) -> None:
        self.report.throttled += 1
        self._throttles_in_a_row += 1
        wait = answer.retry_after
        if wait is None:
            wait = min(2.0 ** (self._throttles_in_a_row - 1), MAX_UNSAID_RETRY_AFTER_SECONDS)
        self._resume_at = max(self._resume_at, self.clock.now() + timedelta(seconds=wait))

    def _on_answer(self, part_id: str, answer: Priced | KeyRefused | Failed) -> PriceCheck | None:
        self._throttles_in_a_row = 0
        if isinstance(answer, KeyRefused):
            self._stop("key_refused", detail=answer.reason)
            return None
        if isinstance(answer, Priced):
            self._failures_in_a_row = 0
            return self._checked(part_id, price=answer.price, currency=answer.currency)
        if answer.vendor_fault:
            self._failures_in_a_row += 1
            if self._failures_in_a_row >= self.settings.max_consecutive_failures:
                self._stop("vendor_failing", detail=answer.reason)
        return self._checked(part_id, error=answer.reason)

    def _checked(self, part_id: str, **outcome: Any) -> PriceCheck:
        return PriceCheck(
            part_id=part_id, checked_at=self.clock.now(), source=self.settings.quota_key, **outcome
        )

    def _seconds_left(self) -> float:
        return (self.deadline - self.clock.now()).total_seconds() - RECORD_RESERVE_SECONDS

    def _stop(self, reason: str, *, detail: str = "") -> None:
        if not self.report.stopped:  # the first reason is the one that counts
            self.report.stopped = reason
            self._stop_detail = detail

    def _failure_message(self) -> str:
        what = {
            "key_refused": "the vendor refused the API key",
            "vendor_failing": (
                f"the vendor failed {self.settings.max_consecutive_failures} calls in a row"
            ),
        }[self.report.stopped]
        return (
            f"{what} ({self._stop_detail}); {self.report.priced} parts priced and "
            f"{self.report.failed} failed before that were recorded"
        )

    async def _result(self) -> dict[str, Any]:
        report = self.report
        used = await self.products.quota_used(self.quota.key, self.quota.day)
        result: dict[str, Any] = {
            "priced": report.priced,
            "failed": report.failed,
            "stopped": report.stopped,
            "throttled": report.throttled,
            "waited_seconds": round(report.waited_seconds, 3),
            "quota": {
                "key": self.quota.key,
                "day": self.quota.day.isoformat(),
                "limit": self.quota.limit,
                "used": used,
                "reserved_unused": self.quota.unused_reserved,
            },
            "errors": report.errors,
        }
        if report.stopped == "quota":
            result["message"] = (
                f"the daily quota of {self.quota.limit} calls ({self.quota.key}) is spent; "
                "the walk resumes where it stopped after 00:00 UTC"
            )
        return result


def page_size(concurrency: int) -> int:
    return min(MAX_PAGE, max(MIN_PAGE, PARTS_PER_WORKER * concurrency))


def part_number(part: Doc) -> str | None:
    for name in PART_NUMBER_FIELDS:
        value = part.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None
