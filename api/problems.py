"""One error format everywhere: RFC 9457 problem details, naming each field at fault."""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

from aiohttp import web
from pydantic import ValidationError as PydanticError

from tickd.scheduler.jobspec import Refusals
from tickd.scheduler.logs import RepeatedErrors, log_event
from tickd.scheduler.model import ValidationError
from tickd.scheduler.store.kit import StoreError
from tickd.scheduler.store.kit.patience import is_disk_full, refuses_for_now

log = logging.getLogger("tickd.api")
PROBLEM_JSON = "application/problem+json"
# Seconds a client told the store refuses for now (503) waits before it asks again.
RETRY_AFTER_SECONDS = 5
# Each app's store errors, logged once each and then counted (an outage fails every request).
_STORE_ERRORS: weakref.WeakKeyDictionary[web.Application, RepeatedErrors] = (
    weakref.WeakKeyDictionary()
)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        title: str,
        detail: str | None = None,
        errors: Sequence[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail or title)
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = [{"field": f, "reason": r} for f, r in errors]
        self.headers = headers or {}


def field_error(field: str, reason: str, status: int = 422) -> ApiError:
    # A field that clashes with what exists (a taken name) is a conflict, not a bad request.
    title = "Conflict" if status == 409 else "Invalid request"
    return ApiError(status, title, f"{field}: {reason}", [(field, reason)])


def from_validation(exc: ValidationError, prefix: str = "") -> ApiError:
    """A 422 naming the field at fault, or each of them (Refusals)."""
    if not isinstance(exc, Refusals):
        return field_error(prefix + exc.field, exc.reason)
    errors = [(prefix + error.field, error.reason) for error in exc.errors]
    detail = "; ".join(f"{name}: {reason}" for name, reason in errors)
    return ApiError(422, "Invalid request", detail, errors)


@contextmanager
def validation_problems(prefix: str = "") -> Iterator[None]:
    """A ValidationError of the core (scheduler/jobspec.py, the model) as a 422 naming its
    field."""
    try:
        yield
    except ValidationError as exc:
        raise from_validation(exc, prefix) from None


def from_pydantic(exc: PydanticError, where: str, status: int = 422) -> ApiError:
    """Pydantic's errors as (field, reason) pairs: `schedule.expr`, `query.limit`..."""
    errors = []
    for error in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in error["loc"] if not _is_union_tag(part))
        reason = error["msg"].removeprefix("Value error, ")  # pydantic's, before our words
        errors.append((f"{where}{path}" if path else where.rstrip(".") or "body", reason))
    detail = "; ".join(f"{field}: {reason}" for field, reason in errors)
    return ApiError(status, "Invalid request", detail, errors)


def _is_union_tag(part: object) -> bool:
    # Discriminated unions put the tag in the location (`schedule.cron.expr`): drop it.
    return part in ("cron", "interval", "once")


def problem(
    status: int,
    title: str,
    detail: str | None = None,
    errors: Sequence[dict[str, str]] = (),
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"type": "about:blank", "title": title, "status": status}
    if detail:
        body["detail"] = detail
    body["errors"] = list(errors)
    return web.Response(
        status=status,
        text=json.dumps(body),
        content_type=PROBLEM_JSON,
        headers=headers,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def problems_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return problem(exc.status, exc.title, exc.detail, exc.errors, exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return problem(exc.status, exc.reason, None, (), _allowed(exc))
    except StoreError as exc:
        return store_problem(request, exc)
    except Exception:
        # Nothing of the failure reaches the client: it may hold internals or secrets.
        log_event(log, "api.internal_error", level=logging.ERROR, path=request.path)
        log.exception("api.internal_error")
        return problem(500, "Internal Server Error", "the server could not handle the request")


def store_problem(request: web.Request, exc: StoreError) -> web.Response:
    """503 with Retry-After when the store refuses for now (a full disk, a lost connection):
    the request was fine, the store refused it. Otherwise a 500. The client learns the
    cause, never the store's own words (they may hold internals or secrets); the log has them."""
    errors = _STORE_ERRORS.setdefault(request.app, RepeatedErrors(log))
    if not refuses_for_now(exc):
        errors.error("api.internal_error", exc, path=request.path)
        return problem(500, "Internal Server Error", "the server could not handle the request")
    errors.error("api.store_refused", exc, level=logging.WARNING, path=request.path)
    cause = "the store's disk is full" if is_disk_full(exc) else "the store is unavailable"
    return problem(
        503,
        "Service Unavailable",
        f"{cause}: try again in {RETRY_AFTER_SECONDS} s",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def _allowed(exc: web.HTTPException) -> dict[str, str] | None:
    allow = exc.headers.get("Allow")
    return {"Allow": allow} if allow else None
