"""The vendor's price API, as the catalogue walk calls it.

    GET {base_url}/parts/{mpn}/price
    Authorization: Bearer {api_key}

    200 {"price": 0.71, "currency": "USD"}    the current unit price (a number, or a string of one);
                                              a 200 that is not a JSON object is the vendor failing
    429 Retry-After: 30                       throttled: wait (seconds or an HTTP date), ask again
    401, 403                                  the key is refused: no other part will fare better
    anything else, or no answer in time       this part failed; the walk goes on

Each call is one unit of the daily quota, whatever its answer. The key never appears in what
this module returns: a vendor that echoes it in an error body gets it masked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote

import aiohttp

from tickd.handlers.catalogue_walk.settings import as_number
from tickd.scheduler.plugin.api import MASK, failure_reason, read_prefix

# An answer larger than this is not a price.
MAX_ANSWER_BYTES = 64 * 1024
ERROR_EXCERPT_CHARS = 200
# A longer Retry-After is read as this (it is past any deadline anyway).
MAX_RETRY_AFTER_SECONDS = 604_800.0  # a week


@dataclass(frozen=True, slots=True)
class Priced:
    price: float
    currency: str | None


@dataclass(frozen=True, slots=True)
class Throttled:
    # Seconds to wait from now; None when the vendor did not say (or said it unreadably).
    retry_after: float | None


@dataclass(frozen=True, slots=True)
class KeyRefused:
    reason: str


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str
    # The vendor or the way to it is failing (no answer, 5xx), not just this part (404...).
    vendor_fault: bool = False


Answer = Priced | Throttled | KeyRefused | Failed


class VendorClient:
    def __init__(self, session: aiohttp.ClientSession, *, base_url: str, api_key: str) -> None:
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._api_key = api_key

    def url_of(self, mpn: str) -> str:
        return f"{self._base_url}/parts/{quote(mpn, safe='')}/price"

    async def ask(self, mpn: str, *, time_limit: float, now: datetime) -> Answer:
        """One call for one part's price; never raises for what the vendor, the network or the
        part's number did."""
        headers = {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}
        try:
            async with self._session.get(
                self.url_of(mpn),
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=time_limit),
            ) as response:
                body, cut = await read_prefix(response, MAX_ANSWER_BYTES)
                return self._answer(response, body, cut, now)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Failed(failure_reason(exc, time_limit), vendor_fault=True)
        except Exception as exc:
            # A part number the URL cannot hold, an answer no parser takes: this part's
            # failure, recorded on it, never the walk's end.
            return Failed(f"cannot ask for or read this part's price ({type(exc).__name__})")

    def _answer(
        self, response: aiohttp.ClientResponse, body: bytes, cut: bool, now: datetime
    ) -> Answer:
        status = response.status
        if status == 200 and cut:
            return Failed(f"status 200, but the answer is over {MAX_ANSWER_BYTES // 1024} KiB")
        if status == 200:
            return _priced(body)
        if status == 429:
            return Throttled(retry_after_seconds(response.headers.get("Retry-After"), now))
        reason = f"status {status}{self._excerpt(body)}"
        if status in (401, 403):
            return KeyRefused(reason)
        return Failed(reason, vendor_fault=status >= 500)

    def _excerpt(self, body: bytes) -> str:
        text = body.decode("utf-8", "replace").replace(self._api_key, MASK)
        text = " ".join(text.split())[:ERROR_EXCERPT_CHARS]
        return f": {text}" if text else ""


def _priced(body: bytes) -> Answer:
    try:
        answer = json.loads(body)
    except RecursionError:  # [[[[... nested past what the parser takes
        return Failed("status 200, but the answer is nested too deep")
    except ValueError:  # a maintenance page, a proxy's error: the vendor's fault, not the part's
        return Failed("status 200, but the answer is not JSON", vendor_fault=True)
    if not isinstance(answer, dict):
        return Failed("status 200, but the answer is not a JSON object", vendor_fault=True)
    price = _price(answer.get("price"))
    if price is None:
        return Failed("status 200, but the answer has no price (a number >= 0)")
    currency = answer.get("currency")
    if currency is not None and not (isinstance(currency, str) and 0 < len(currency) <= 8):
        return Failed("status 200, but the currency is not a short string")
    return Priced(price=price, currency=currency)


def _price(value: object) -> float | None:
    number = as_number(value)
    return number if number is not None and number >= 0 else None


def retry_after_seconds(header: str | None, now: datetime) -> float | None:
    """Retry-After as seconds from `now`: a number of seconds, or an HTTP date (RFC 9110)."""
    if header is None:
        return None
    header = header.strip()
    if header.isascii() and header.isdigit():  # not "²", which isdigit() also takes
        # Ten digits and more are centuries (and Python refuses to read thousands of them).
        return (
            MAX_RETRY_AFTER_SECONDS
            if len(header) > 9
            else min(float(header), MAX_RETRY_AFTER_SECONDS)
        )
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; an unzoned one is read as such
        when = when.replace(tzinfo=now.tzinfo)
    return min(max(0.0, (when - now).total_seconds()), MAX_RETRY_AFTER_SECONDS)
