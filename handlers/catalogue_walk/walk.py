"""One run of the catalogue walk: pages of parts, oldest-priced first, each part one vendor call
paid for with a unit of the day's quota, the page's answers recorded before the next page.

Why it stops, in `stopped`:
- `busy`: another walk of the same vendor (`quota_key`) is running, on this instance or any
  other; they would ask for the same parts and pay twice. This one asks nothing.
- `done`: every part was priced within `min_age_seconds`; nothing left to ask.
- `quota`: the day's quota is spent (by this run or any other sharing the key). The parts not
  reached keep their old `priceCheckedAt`, so tomorrow's first run takes them first.
- `max_parts`: the run made as many calls as its params allow.
- `deadline`: too little time left for another call and the recording of the answers.
- `throttled`: the vendor asked to wait (429) beyond the deadline, or refused too often in a row
  (throttle.py).
- `key_refused` and `vendor_failing` (the vendor failing `max_consecutive_failures` calls in a
  row): the answers so far are recorded, then the run fails (WalkFailed), since a retry or the
  next run is all that can help, and ops should hear of it.

Until the vendor has answered one call with a price, calls go one at a time, and every failure
counts towards `max_consecutive_failures`: a refused key costs one unit per attempt, and a
vendor that is down, or a base URL that answers 404 to everything, is asked once at a time
until the walk gives up on it.

Answers paid for are not thrown away: each page's are recorded even when a worker failed, and
the recording is shielded from the deadline's cancellation (it finishes in the background).
The time kept back for it grows with what recording has taken (FerretDB commits each part's
update on its own). A part whose answer the store could not record (an `_id` of a type it
cannot match) is not asked again in the run, is named in the result and the log, and is read
past on later pages, as are the parts whose failure was the vendor's (they keep their place).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tickd.handlers.catalogue_walk.quota import QuotaPool
from tickd.handlers.catalogue_walk.settings import WalkSettings
from tickd.handlers.catalogue_walk.throttle import Throttle
from tickd.handlers.catalogue_walk.vendor import (
    Answer,
    Failed,
    KeyRefused,
    Priced,
    Throttled,
    VendorClient,
)
from tickd.handlers.product_store import Doc, PriceCheck, ProductStore
from tickd.scheduler.plugin.api import Clock

# Kept back from the deadline to record the last page's answers, at least; twice the longest
# recording so far, if that is more.
RECORD_RESERVE_SECONDS = 2.0
# A call is not started with less time than this for it.
MIN_CALL_SECONDS = 1.0
# Parts read, asked and recorded together. A page costs a few store round trips whatever its
# size (on FerretDB, whose parts query reads the whole collection, the number of pages is most
# of the walk's time).
MIN_PAGE = 25
PARTS_PER_WORKER = 8
MAX_PAGE = 100
# The result lists the first few failed or unrecorded parts, not all of them.
PARTS_IN_RESULT = 10
# Fields naming a part to the vendor, the first present wins.
PART_NUMBER_FIELDS = ("mpn", "partNumber", "name")

FAILING_STOPS = ("key_refused", "vendor_failing")
# A walk's lease on its vendor outlives its deadline by this much, should it die holding it.
LEASE_MARGIN_SECONDS = 60.0
# A part the vendor failed on keeps its place at the head of the walk this many times in a row,
# less one; then it goes to the back like any part checked.
VENDOR_FAILURES_IN_PLACE = 3


class WalkFailed(Exception):
    """The vendor refused the key or kept failing; the answers before were recorded."""


@dataclass
class WalkReport:
    priced: int = 0
    failed: int = 0
    stopped: str = ""
    stop_detail: str = ""
    errors: list[dict[str, str]] = field(default_factory=list)
    # Answered, but the store found no part to write them to.
    unrecorded: list[str] = field(default_factory=list)

    def add(self, check: PriceCheck, *, recorded: bool) -> None:
        if not recorded:
            self.unrecorded.append(check.part_id)
        elif check.error is None:
            self.priced += 1
        else:
            self.failed += 1
            if len(self.errors) < PARTS_IN_RESULT:
                self.errors.append({"part": check.part_id, "error": check.error})

    def stop(self, reason: str, detail: str = "") -> None:
        if not self.stopped:  # the first reason is the one that counts
            self.stopped, self.stop_detail = reason, detail


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
            limit=settings.daily_quota,
            chunk=settings.concurrency,
        )
        self.throttle = Throttle(clock)
        # Parts taken from a page in this run: none is asked twice.
        self._taken: set[tuple[str, str]] = set()
        self._calls = 0
        self._failures_in_a_row = 0
        self._record_reserve = RECORD_RESERVE_SECONDS
        # Until the vendor answers with a price, calls go one at a time (see _call).
        self._vendor_answers = asyncio.Event()
        self._one_at_a_time = asyncio.Lock()
        # Parts asked in this run that are still first in line: their failure was the vendor's
        # (keep_place), or the store could not record the answer. Pages read past them.
        self._still_first = 0
        # One walk per vendor at a time, across instances: two would ask for the same parts.
        self._lease = f"catalogue_walk|{settings.quota_key}"
        self._owner = uuid.uuid4().hex

    async def run(self) -> dict[str, Any]:
        """Walk until a reason to stop; returns the result. Raises WalkFailed (after recording
        every answer) when the vendor refuses the key or keeps failing."""
        until = self.deadline + timedelta(seconds=LEASE_MARGIN_SECONDS)
        if not await self.products.take_lease(
            self._lease, owner=self._owner, until=until, now=self.started
        ):
            self.report.stop("busy")
            return await self._result()
        try:
            await self._walk()
        finally:
            await self._release_lease()
        self.quota.release_unused()
        result = await self._result()
        self._log(result)
        if self.report.stopped in FAILING_STOPS:
            raise WalkFailed(self._failure_message())
        return result

    async def _walk(self) -> None:
        checked_before = self.started - timedelta(seconds=self.settings.min_age_seconds)
        while not self.report.stopped:
            await self._walk_page(await self._next_page(checked_before))

    async def _release_lease(self) -> None:
        """Given back even when the run failed or was cancelled; if the store cannot be told,
        the lease ends by itself a minute after the deadline."""
        try:
            await asyncio.shield(self.products.release_lease(self._lease, owner=self._owner))
        except Exception:
            self.logger.warning("catalogue walk: could not release %s", self._lease, exc_info=True)

    async def _next_page(self, checked_before: datetime) -> list[Doc]:
        size = page_size(self.settings.concurrency)
        if self.settings.max_parts is not None:
            size = min(size, self.settings.max_parts - self._calls)
            if size <= 0:
                self.report.stop("max_parts")
                return []
        limit = size + self._still_first
        page = await self.products.parts_to_price(checked_before=checked_before, limit=limit)
        fresh = [part for part in page if part_key(part) not in self._taken]
        if not fresh:
            self.report.stop("done")
        return fresh[:size]

    async def _walk_page(self, page: list[Doc]) -> None:
        waiting = deque(page)
        checks: list[PriceCheck] = []
        try:
            async with asyncio.TaskGroup() as workers:
                for _ in range(min(self.settings.concurrency, len(page))):
                    workers.create_task(self._worker(waiting, checks))
        except BaseExceptionGroup as failed:
            # One worker's error ends the page (the group cancels the others): the answers
            # paid for are still recorded, and that error is the run's.
            await self._record_after_failure(checks)
            raise failed.exceptions[0] from failed
        except asyncio.CancelledError:  # the deadline
            await self._record_after_failure(checks)
            raise
        await self._record(checks)

    async def _worker(self, waiting: deque[Doc], checks: list[PriceCheck]) -> None:
        while waiting and not self.report.stopped:
            part = waiting.popleft()
            self._taken.add(part_key(part))
            check = await self._check(part, upcoming=len(waiting) + 1)
            if check is not None:
                checks.append(check)

    async def _record(self, checks: list[PriceCheck]) -> None:
        if not checks:
            return
        started = time.monotonic()
        recorded = await asyncio.shield(self.products.record_price_checks(checks))
        took = time.monotonic() - started
        self._record_reserve = max(self._record_reserve, 2 * took)
        for check in checks:
            self.report.add(check, recorded=check.part_id in recorded)
            self._still_first += check.keep_place or check.part_id not in recorded

    async def _record_after_failure(self, checks: list[PriceCheck]) -> None:
        """Record, but let the failure that ended the page be the one raised."""
        try:
            await self._record(checks)
        except Exception:
            self.logger.exception("catalogue walk: %d answers could not be recorded", len(checks))

    async def _check(self, part: Doc, *, upcoming: int) -> PriceCheck | None:
        """The part's price check, or None if the walk stopped before the part was asked."""
        mpn = part_number(part)
        if mpn is None:
            return self._checked(part, error="the part has no usable mpn, partNumber or name")
        while not self.report.stopped:
            called = await self._call(mpn, upcoming)
            if called is None:
                return None
            answer, call_started = called
            if not isinstance(answer, Throttled):
                return self._on_answer(part, answer)
            if not self.throttle.refused(answer.retry_after, call_started=call_started):
                self.report.stop("throttled", "too many refusals (429) in a row")
        return None

    async def _call(self, mpn: str, upcoming: int) -> tuple[Answer, datetime] | None:
        """One call, once there is time and a unit for it: its answer, and when it was made
        (after any wait for a 429). None if the walk stopped first.

        Until the vendor has answered a call with a price, calls go one at a time: a refused
        key costs one unit per attempt, and a vendor that is down or throttling is asked once
        at a time, not once per worker."""
        if not self._vendor_answers.is_set():
            async with self._one_at_a_time:
                if not self._vendor_answers.is_set():
                    return await self._make_call(mpn, upcoming)
        return await self._make_call(mpn, upcoming)

    async def _make_call(self, mpn: str, upcoming: int) -> tuple[Answer, datetime] | None:
        if self.report.stopped:  # while this worker waited its turn
            return None
        time_limit = await self._time_for_a_call()
        if time_limit is None or self.report.stopped or not await self._take_unit(upcoming):
            return None
        started = self.clock.now()
        answer = await self.vendor.ask(mpn, time_limit=time_limit, now=started)
        if isinstance(answer, Priced):
            self._vendor_answers.set()
        return answer, started

    async def _time_for_a_call(self) -> float | None:
        """Waits out a 429 first. The seconds a call may take, or None (and the walk stopped)
        if there is no time for one before the deadline."""
        latest = self.deadline - timedelta(seconds=self._record_reserve + MIN_CALL_SECONDS)
        if not await self.throttle.wait(latest=latest):
            self.report.stop("throttled", "the vendor asked to wait past the deadline")
            return None
        time_left = (self.deadline - self.clock.now()).total_seconds() - self._record_reserve
        if time_left < MIN_CALL_SECONDS:
            self.report.stop("deadline")
            return None
        return min(self.settings.request_timeout_seconds, time_left)

    async def _take_unit(self, upcoming: int) -> bool:
        if self.settings.max_parts is not None:
            if self._calls >= self.settings.max_parts:
                self.report.stop("max_parts")
                return False
            upcoming = min(upcoming, self.settings.max_parts - self._calls)
        if not await self.quota.take(upcoming, self.clock.now):
            self.report.stop("quota")
            return False
        self._calls += 1
        return True

    def _on_answer(self, part: Doc, answer: Priced | KeyRefused | Failed) -> PriceCheck | None:
        if isinstance(answer, KeyRefused):
            self.report.stop("key_refused", answer.reason)
            return None
        self.throttle.answered()
        if isinstance(answer, Priced):
            self._failures_in_a_row = 0
            return self._checked(part, price=answer.price, currency=answer.currency)
        # Before the run's first price, any failure counts: a base URL that answers 404 to
        # everything is as broken as a vendor that is down.
        if answer.vendor_fault or not self._vendor_answers.is_set():
            self._failures_in_a_row += 1
            if self._failures_in_a_row >= self.settings.max_consecutive_failures:
                self.report.stop("vendor_failing", answer.reason)
        if not answer.vendor_fault:
            return self._checked(part, error=answer.reason)
        # The vendor failing on this part: it keeps its place, a few times. A vendor that
        # always fails on some parts must not hold the head of the walk for good.
        failures = vendor_failures(part) + 1
        return self._checked(
            part,
            error=answer.reason,
            keep_place=failures < VENDOR_FAILURES_IN_PLACE,
            vendor_failures=failures,
        )

    def _checked(self, part: Doc, **outcome: Any) -> PriceCheck:
        return PriceCheck(
            part_id=str(part["_id"]),
            stored_id=part["_id"],
            checked_at=self.clock.now(),
            source=self.settings.quota_key,
            **outcome,
        )

    def _failure_message(self) -> str:
        what = {
            "key_refused": "the vendor refused the API key",
            "vendor_failing": (
                f"the vendor failed {self.settings.max_consecutive_failures} calls in a row"
            ),
        }[self.report.stopped]
        return (
            f"{what} ({self.report.stop_detail}); {self.report.priced} parts priced and "
            f"{self.report.failed} failed before that were recorded"
        )

    async def _result(self) -> dict[str, Any]:
        report, quota = self.report, self.quota
        day = quota.day or self.clock.now().astimezone(UTC).date()
        result: dict[str, Any] = {
            "priced": report.priced,
            "failed": report.failed,
            "stopped": report.stopped,
            "throttled": self.throttle.count,
            "waited_seconds": round(self.throttle.waited_seconds, 3),
            "quota": {
                "key": quota.key,
                "day": day.isoformat(),
                "limit": quota.limit,
                "used": await self.products.quota_used(quota.key, day),
                "reserved_unused": quota.unused_reserved,
            },
            "errors": report.errors,
        }
        if report.unrecorded:
            result["unrecorded"] = len(report.unrecorded)
            result["unrecorded_parts"] = report.unrecorded[:PARTS_IN_RESULT]
        if report.stopped == "busy":
            result["message"] = (
                f"another walk of this vendor ({quota.key}) is running; this one asked nothing"
            )
        if report.stopped == "quota":
            result["message"] = (
                f"the daily quota of {quota.limit} calls ({quota.key}) is spent; "
                "the walk resumes where it stopped after 00:00 UTC"
            )
        return result

    def _log(self, result: dict[str, Any]) -> None:
        quota = result["quota"]
        self.logger.info(
            "catalogue walk stopped (%s): %d priced, %d failed, quota %d of %d used on %s",
            self.report.stopped,
            self.report.priced,
            self.report.failed,
            quota["used"],
            quota["limit"],
            quota["day"],
        )
        if self.report.unrecorded:
            self.logger.error(
                "catalogue walk: %d answers had no part to be recorded on (ids the store "
                "cannot match), e.g. %s",
                len(self.report.unrecorded),
                ", ".join(self.report.unrecorded[:PARTS_IN_RESULT]),
            )


def vendor_failures(part: Doc) -> int:
    """The vendor's failures in a row on this part so far, as its `priceError` records them."""
    error = part.get("priceError")
    count = error.get("vendorFailures") if isinstance(error, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def part_key(part: Doc) -> tuple[str, str]:
    """A part's id as text and its type: `_id` 7 and "7" are two parts."""
    return str(part["_id"]), type(part["_id"]).__name__


def page_size(concurrency: int) -> int:
    return min(MAX_PAGE, max(MIN_PAGE, PARTS_PER_WORKER * concurrency))


def part_number(part: Doc) -> str | None:
    """What to ask the vendor for. Not "." or "..": in a URL path they would name another
    path of the vendor's (the parent), with the key, and its answer be taken for this part's."""
    for name in PART_NUMBER_FIELDS:
        value = part.get(name)
        if isinstance(value, str) and value.strip().strip("."):
            return value.strip()
    return None
