"""/v1/bounces: the addresses the receiving mail servers refused for good (hard bounces), from
the product store. From `bounces_before_blocking` (3) bounces on, an address gets no more alert
email until ops clear it here (or the user's alerts name another address)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from tickd.api.problems import ApiError
from tickd.api.routing import B, Call, Q, Reply, Route, Routes
from tickd.api.v1 import state
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.product_store import Bounce, ProductStore

BLOCKED_AFTER = EmailPolicy().bounces_before_blocking
MAX_LISTED = 1000


class BounceOut(BaseModel):
    address: str
    count: int = Field(description="Permanent refusals since the address was last cleared")
    blocked: bool = Field(description="No more mail goes to it until it is cleared")
    first_at: datetime
    last_at: datetime
    last_error: str = Field(description="The server's last reply")


class BounceList(BaseModel):
    items: list[BounceOut]
    blocked_after: int


def _products(call: Call[Q, B]) -> ProductStore:
    products = state(call).products
    if products is None:
        raise ApiError(503, "Service Unavailable", "the product store is not open here")
    return products


def _out(bounce: Bounce) -> BounceOut:
    return BounceOut(
        address=bounce.address,
        count=bounce.count,
        blocked=bounce.count >= BLOCKED_AFTER,
        first_at=bounce.first_at,
        last_at=bounce.last_at,
        last_error=bounce.last_error,
    )


async def list_bounces(call: Call[None, None]) -> Reply:
    # The alert scanner's addresses are of no domain: a token limited to domains sees none.
    bounces = [] if call.domains is not None else await _products(call).bounces(limit=MAX_LISTED)
    return Reply(BounceList(items=[_out(b) for b in bounces], blocked_after=BLOCKED_AFTER))


async def clear_bounce(call: Call[None, None]) -> Reply:
    address = call.path("address")
    if not await _products(call).clear_bounce(address):
        raise ApiError(404, "Not Found", f"no bounces recorded for {address!r}")
    return Reply(None, 204)


BOUNCE_ROUTES: Routes = [
    Route(
        "GET",
        "/v1/bounces",
        list_bounces,
        "Addresses refused for good by their mail servers, the latest first",
        "read",
        BounceList,
        tag="alerts",
    ),
    Route(
        "DELETE",
        "/v1/bounces/{address}",
        clear_bounce,
        "Forget an address's bounces: alert email goes to it again",
        "admin",
        None,
        204,
        tag="alerts",
    ),
]
