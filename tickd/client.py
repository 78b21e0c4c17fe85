"""The typed Python client of the tickd API: `Client` for plain code, `AsyncClient` for asyncio.

    from tickd.client import Client
    from tickd.api.models import JobCreate, IntervalScheduleIn

    with Client("http://127.0.0.1:8080", token="...") as tickd:
        job = tickd.create_job(JobCreate(name="ping", handler="noop",
                                         schedule=IntervalScheduleIn(kind="interval",
                                                                     every_seconds=60)))

One method per operation of /openapi.json (the table OPERATIONS maps each operationId to it),
taking and returning the API's own pydantic models (tickd.api.models and the route modules that
declare the rest), so the client and the server cannot disagree on a field. A list method returns
one page; its `iter_` twin follows the cursors.

Built on httpx: one API for blocking and asyncio code, with timeouts, connection pooling and
pluggable transports (a test or a proxy setup passes its own). aiohttp, which the server uses,
has no blocking client: a synchronous wrapper would run a private event loop in a thread per
client, and could not be called from inside a running loop at all.

Errors raise ApiError subclasses carrying the problem details (status, title, detail, the fields
at fault); a write with a stale If-Match raises PreconditionFailed; an answer the API never gives
(some other server's) raises NotTickd, never pydantic's ValidationError. Calls that are safe to
repeat (GET, DELETE, and PUT with If-Match) are retried with backoff on 503 and on connection
failures; others never are, since a repeated POST could run a job twice. The token goes in the
Authorization header only: never in a repr or an error message, even one quoting what a server
echoed back. Redirects are not followed, so the token is never sent to where one points.

A server is not trusted to behave: `timeout` bounds a whole call (connecting, sending, every
read of the body, the retries and their waits), an answer's body is refused past
`max_response_bytes` once decoded, a Retry-After that is not a sane delay is ignored, and a list
that hands back a cursor it gave before stops with ProtocolError instead of looping.
"""

from __future__ import annotations

import asyncio
import re
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar
from urllib.parse import quote, quote_plus, urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from tickd.api.bounces import BounceList
from tickd.api.dead_letters import (
    DeadLetterQuery,
    DiscardFilter,
    DiscardOut,
    ErrorGroups,
    GroupQuery,
    RedriveFilter,
    RedriveOut,
)
from tickd.api.domains import DomainList, DomainOut, DomainSettingsIn
from tickd.api.executions import RunOut
from tickd.api.jobs import JobListPage, JobSearchQuery
from tickd.api.models import (
    BackfillOut,
    BackfillRequest,
    CancelOut,
    CancelRequestBody,
    ChangeOut,
    ChangePage,
    ExecutionListQuery,
    ExecutionOut,
    ExecutionPage,
    HandlerList,
    Health,
    InstancePage,
    JobCreate,
    JobExecutionQuery,
    JobOut,
    JobPatch,
    JobPreviewQuery,
    PageQuery,
    PreviewOut,
    PreviewRequest,
    Problem,
    Readiness,
    RunningPage,
    RunningQuery,
    RunRequestOut,
)
from tickd.api.stats import SessionOut, StatsOut, StatsQuery
from tickd.scheduler.secrets.masking import MASK, scrub_text

__all__ = [
    "OPERATIONS",
    "ApiError",
    "AsyncClient",
    "BadUrl",
    "Client",
    "ClientError",
    "Conflict",
    "FieldError",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "NotTickd",
    "Page",
    "PreconditionFailed",
    "ProtocolError",
    "Request",
    "ResponseTooLarge",
    "Retry",
    "ServiceUnavailable",
    "Timeout",
    "TransportFailed",
    "Unauthorized",
    "shown_url",
]

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# The longest wait a server's Retry-After can ask for; more is a broken or hostile server.
RETRY_AFTER_LIMIT_SECONDS = 300.0

# Every operation of /openapi.json (its operationId) and the method of Client and AsyncClient
# that calls it; tests/client checks the document against this table.
OPERATIONS: dict[str, str] = {
    "get_v1_jobs": "list_jobs",
    "post_v1_jobs": "create_job",
    "get_v1_jobs_job_id": "get_job",
    "put_v1_jobs_job_id": "update_job",
    "patch_v1_jobs_job_id": "patch_job",
    "delete_v1_jobs_job_id": "delete_job",
    "post_v1_jobs_job_id_pause": "pause_job",
    "post_v1_jobs_job_id_resume": "resume_job",
    "post_v1_jobs_job_id_trigger": "trigger_job",
    "post_v1_jobs_job_id_backfill": "backfill_job",
    "get_v1_jobs_job_id_preview": "preview_job",
    "get_v1_jobs_job_id_history": "job_history",
    "get_v1_jobs_job_id_executions": "job_executions",
    "get_v1_executions": "list_executions",
    "get_v1_executions_execution_id": "get_execution",
    "post_v1_executions_execution_id_retry": "retry_execution",
    "get_v1_running": "running",
    "post_v1_executions_execution_id_cancel": "cancel_execution",
    "get_v1_instances": "instances",
    "post_v1_schedules_preview": "preview_schedule",
    "get_v1_handlers": "list_handlers",
    "get_v1_bounces": "list_bounces",
    "delete_v1_bounces_address": "clear_bounces",
    "get_healthz": "health",
    "get_readyz": "readiness",
    "get_metrics": "metrics",
    "get_openapi.json": "openapi",
    "get_docs": "docs_page",
    "get_v1_session": "session",
    "get_v1_stats": "get_stats",
    "get_v1_dead_letters": "list_dead_letters",
    "get_v1_dead_letters_groups": "dead_letter_groups",
    "post_v1_dead_letters_redrive": "redrive_dead_letters",
    "post_v1_dead_letters_discard": "discard_dead_letters",
    "post_v1_dead_letters_execution_id_redrive": "redrive_dead_letter",
    "post_v1_dead_letters_execution_id_discard": "discard_dead_letter",
    "get_v1_domains": "list_domains",
    "get_v1_domains_name": "get_domain",
    "put_v1_domains_name": "put_domain",
    "delete_v1_domains_name": "delete_domain",
}


# -- errors ---------------------------------------------------------------------------------------


class ClientError(Exception):
    """Anything that keeps a call from its answer; the message never holds the token."""


class TransportFailed(ClientError):
    """No HTTP answer: the connection was refused, reset or not HTTP."""


class Timeout(TransportFailed):
    """No whole answer within the client's timeout, which bounds the call from start to end."""


class BadUrl(ClientError, ValueError):
    """A base URL the clients cannot call: not http:// or https:// with a host, or with
    credentials in it (the API reads a bearer token, passed as `token`, and nothing else)."""


class NotTickd(ClientError):
    """An answer, but not one the tickd API gives: some other server, a proxy's page, a
    redirect (the API never sends one)."""


class ProtocolError(ClientError):
    """An answer that breaks the API's rules in a way that would make the call go on without
    end: a list handing back a cursor it gave before, a body the client cannot decode."""


class ResponseTooLarge(ProtocolError):
    """An answer's body, once decoded, larger than the client's `max_response_bytes`."""


@dataclass(frozen=True)
class FieldError:
    field: str  # e.g. `schedule.expr`, `query.limit`, `If-Match`
    reason: str


class ApiError(ClientError):
    """The API answered with an error status: its RFC 9457 problem details."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.status = problem.status
        self.title = problem.title
        self.detail = problem.detail
        self.errors = [FieldError(e.get("field", ""), e.get("reason", "")) for e in problem.errors]
        super().__init__(f"{problem.status} {problem.title}: {problem.detail or problem.title}")

    @property
    def fields(self) -> list[str]:
        """The fields at fault, in the order the API named them."""
        return [error.field for error in self.errors]


class InvalidRequest(ApiError):
    """400 or 422: a query, a body or a field the API refused; `errors` names each field."""


class Unauthorized(ApiError):
    """401: no token, or not one the API knows."""


class Forbidden(ApiError):
    """403: the token's scope is too low for the operation."""


class NotFound(ApiError):
    """404: no such job, execution or address."""


class Conflict(ApiError):
    """409: a job of that name exists already, or the job kept changing under the write."""


class PreconditionFailed(ApiError):
    """412: the job is no longer at the revision sent as If-Match; read it again."""

    @property
    def current_revision(self) -> int | None:
        """The job's revision now, when the API said it (None otherwise)."""
        found = _CURRENT_REVISION.search(self.detail or "")
        return int(found[1]) if found else None


class ServiceUnavailable(ApiError):
    """503, still so after the retries (or for a call that is not retried)."""


_CURRENT_REVISION = re.compile(r"revision (\d+)")
_ERRORS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    422: InvalidRequest,
    503: ServiceUnavailable,
}


def api_error(response: httpx.Response) -> ApiError:
    problem = _problem(response)
    return _ERRORS.get(problem.status, ApiError)(problem)


def _problem(response: httpx.Response) -> Problem:
    """The problem details the API sent; made from the status when the answer is not one (a
    proxy's error page, say)."""
    try:
        return Problem.model_validate_json(response.content)
    except ValidationError:
        title = response.reason_phrase or "Error"
        return Problem(title=title, status=response.status_code, detail=_excerpt(response))


def _excerpt(response: httpx.Response) -> str | None:
    # On one line: a proxy's HTML page spreads its few words over many.
    return " ".join(response.text.split())[:200] or None


def _not_tickd(response: httpx.Response, what: str) -> NotTickd:
    where = _where(response.request)
    return NotTickd(f"{where} answered {response.status_code}, {what}: is it the tickd API?")


def _where(request: httpx.Request) -> str:
    return f"{request.method} {shown_url(str(request.url.copy_with(query=None)))}"


def checked_url(base_url: str) -> str:
    """`base_url` if the clients can call it; else BadUrl, showing it as `shown_url` does."""
    shown = repr(shown_url(base_url))
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - read for its ValueError: a port that is no number
        httpx.URL(base_url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise BadUrl(f"{shown}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadUrl(f"{shown}: not an http:// or https:// URL with a host")
    if "@" in parts.netloc:
        raise BadUrl(
            f"{shown}: credentials in the URL are not sent (the API reads a bearer token, "
            "given apart from the URL)"
        )
    return base_url


def shown_url(url: str) -> str:
    """A URL as messages show it: whatever comes before `@` in it masked, a user name as well
    as a password (a token pasted as the user name is a secret too)."""
    return scrub_text(_USERINFO.sub(rf"\g<scheme>{MASK}@", url))


# The user information of a URL: from `://` to the last `@` before the path, query or fragment.
_USERINFO = re.compile(r"(?P<scheme>://)[^/?#]*@")


def _transport_failed(exc: httpx.TransportError) -> TransportFailed:
    kind = Timeout if isinstance(exc, httpx.TimeoutException) else TransportFailed
    return kind(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


@dataclass(frozen=True)
class _Masking:
    """The token in each form a server may echo it back (as sent, percent-encoded,
    form-encoded), masked in every error the client raises, with any other credential
    scrub_text finds: an error body, a header quoted by the HTTP parser, a redirect's URL."""

    forms: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, token: str | None) -> _Masking:
        if not token:
            return cls()
        forms = {token, quote(token, safe=""), quote_plus(token, safe="")}
        return cls(tuple(sorted(forms, key=len, reverse=True)))

    def text(self, text: str) -> str:
        for form in self.forms:
            text = text.replace(form, MASK)
        return scrub_text(text)

    def error(self, exc: ClientError) -> ClientError:
        """`exc` again, with the token masked in its message and every field it carries."""
        if isinstance(exc, ApiError):
            return type(exc)(Problem.model_validate(self._value(exc.problem.model_dump())))
        return type(exc)(self.text(str(exc)))

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._value(item) for item in value]
        if isinstance(value, dict):
            return {self._value(key): self._value(item) for key, item in value.items()}
        return value


# -- the limits of one call -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Deadline:
    """When a call must have its whole answer, on the monotonic clock (None: never). httpx's
    timeouts bound each network operation alone: a server sending a byte at a time would keep
    a call going for ever, so each operation gets only what is left of the call's time."""

    at: float | None
    seconds: float | None

    @classmethod
    def after(cls, seconds: float | None) -> _Deadline:
        return cls(None if seconds is None else time.monotonic() + seconds, seconds)

    def left(self) -> float | None:
        """The seconds an operation may still wait (None: no limit); never 0, which a socket
        reads as "do not wait at all" rather than as a timeout."""
        if self.at is None:
            return None
        return max(self.at - time.monotonic(), _LEAST_WAIT_SECONDS)

    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def allows(self, wait: float) -> bool:
        """A wait of `wait` seconds, and then an attempt, still fit in the call's time."""
        return self.at is None or time.monotonic() + wait < self.at

    def timeouts(self) -> httpx.Timeout:
        """What httpx waits for each operation of an attempt starting now."""
        return httpx.Timeout(self.left())

    def ran_out(self) -> httpx.TimeoutException:
        return httpx.TimeoutException(f"no whole answer within the timeout of {self.seconds:g} s")


_LEAST_WAIT_SECONDS = 0.001


# The deadline of the blocking client's call in progress in this thread (or context).
_CALL_DEADLINE: ContextVar[_Deadline | None] = ContextVar("tickd_client_deadline", default=None)


def _clamped(timeout: float | None) -> float | None:
    """`timeout`, or what is left of the call in progress if that is less."""
    deadline = _CALL_DEADLINE.get()
    left = None if deadline is None else deadline.left()
    if left is None:
        return timeout
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """A connection of the blocking client whose every read and write waits at most what is
    left of the call in progress. httpcore takes one read timeout for all the reads of a status
    line and its headers, and one for all those of a body: a server sending a byte at a time
    never trips it, and a blocking socket cannot be cancelled from outside."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._stream.read(max_bytes, _clamped(timeout))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamped(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        return _DeadlineStream(
            self._stream.start_tls(ssl_context, server_hostname, _clamped(timeout))
        )

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """httpcore's network backend for the blocking client: its connections, each a
    _DeadlineStream."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, **options: Any
    ) -> _DeadlineStream:
        return _DeadlineStream(self._backend.connect_tcp(host, port, _clamped(timeout), **options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, **options: Any
    ) -> _DeadlineStream:
        return _DeadlineStream(
            self._backend.connect_unix_socket(path, _clamped(timeout), **options)
        )

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _blocking_transport() -> httpx.HTTPTransport:
    """httpx's own transport, its connections bounded by the call's deadline. httpx gives no
    way to pass httpcore a network backend, so the pool's is wrapped where httpcore keeps it;
    should a release move it, the body's reads are still bounded between chunks."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None:
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return transport


class _Body:
    """An answer's body as it arrives, decoded here (gzip, deflate or none: what the client
    asks for) so that its decoded size is counted before it is held, and refused past `limit`
    bytes: a few kilobytes of gzip may decode to gigabytes."""

    def __init__(self, response: httpx.Response, limit: int) -> None:
        self.response = response
        self.limit = limit
        self.data = bytearray()
        # A transport may answer from memory (a test's, a proxy setup's), its body decoded.
        self.held = response.is_stream_consumed
        self.decoder = None if self.held else _decoder(response)
        if self.held:
            self._keep(response.content)

    def take(self, raw: bytes) -> None:
        if self.decoder is None:
            self._keep(raw)
            return
        pending = raw
        try:
            while pending:
                # Never more than one byte past the limit at once, however dense the input.
                self._keep(self.decoder.decompress(pending, self.limit - len(self.data) + 1))
                pending = self.decoder.unconsumed_tail
        except zlib.error as exc:
            raise self._undecodable(exc) from None

    def answer(self) -> httpx.Response:
        """The whole answer, its body decoded, as the operations read it."""
        if self.decoder is not None:
            try:
                self._keep(self.decoder.flush())
            except zlib.error as exc:
                raise self._undecodable(exc) from None
        response = self.response
        # As sent, in bytes: a server may send any byte in a header, which would not encode again.
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _FRAMING]
        extensions = {k: v for k, v in response.extensions.items() if k in _KEPT_EXTENSIONS}
        return httpx.Response(
            response.status_code,
            headers=headers,
            content=bytes(self.data),
            request=response.request,
            extensions=extensions,
        )

    def _keep(self, piece: bytes) -> None:
        if len(self.data) + len(piece) > self.limit:
            raise ResponseTooLarge(
                f"{_where(self.response.request)} answered more than {self.limit:,} bytes "
                "(max_response_bytes); the rest was not read"
            )
        self.data += piece

    def _undecodable(self, exc: zlib.error) -> ProtocolError:
        encoding = self.response.headers.get("Content-Encoding")
        where = _where(self.response.request)
        return ProtocolError(f"{where} answered a body that is not valid {encoding}: {exc}")


# Headers about the body as it was sent, no longer true of it decoded.
_FRAMING = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})
_KEPT_EXTENSIONS = frozenset({"http_version", "reason_phrase"})
ACCEPTED_ENCODINGS = "gzip, deflate"


def _decoder(response: httpx.Response) -> Any:
    """A zlib decompressor for the body's Content-Encoding; None for none."""
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or a zlib header, read
    raise ProtocolError(
        f"{_where(response.request)} answered in the Content-Encoding {encoding[:40]!r}, "
        f"which the client does not ask for (it accepts {ACCEPTED_ENCODINGS})"
    )


# -- retries --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How often, and after how long, a call safe to repeat is sent again after a 503 or a
    connection failure: `attempts` in all, waiting `backoff_seconds`, then twice that, and so on
    (or the server's Retry-After), never more than `max_backoff_seconds`."""

    attempts: int = 3
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 10.0

    def delay(
        self, attempt: int, retry_after: str | None = None, *, now: datetime | None = None
    ) -> float:
        """The wait after the `attempt`th try failed (1 for the first): the server's
        Retry-After when it is a delay or a date retry_after_seconds reads, else the backoff."""
        wanted = self.backoff_seconds * 2.0 ** (attempt - 1)
        asked = retry_after_seconds(retry_after, now=now)
        if asked is not None:
            wanted = asked
        return min(wanted, self.max_backoff_seconds)


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """The wait a Retry-After header asks for: delay-seconds (ASCII digits) or an HTTP-date
    (one already past: no wait), at most RETRY_AFTER_LIMIT_SECONDS. None when there is none or
    it is neither (`soon`, `-5`, `1e309`, `²`): the caller's own backoff applies then."""
    if value is None:
        return None
    text = value.strip()
    if _DELAY_SECONDS.fullmatch(text):
        # Twelve digits are past the limit already; thousands of them need not be read.
        return (
            RETRY_AFTER_LIMIT_SECONDS
            if len(text) > 12
            else min(float(text), RETRY_AFTER_LIMIT_SECONDS)
        )
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # `-0000`: UTC, its offset unknown to the sender
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), RETRY_AFTER_LIMIT_SECONDS)


_DELAY_SECONDS = re.compile(r"[0-9]+", re.ASCII)


NO_RETRY = Retry(attempts=1)


# -- requests as data, shared by both clients -----------------------------------------------------

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
I = TypeVar("I")  # noqa: E741
M = TypeVar("M", bound=BaseModel)
Q = TypeVar("Q", bound=BaseModel)
I_co = TypeVar("I_co", covariant=True)


class Page(Protocol[I_co]):
    """What every list answers: some items, and the cursor of the next page (None at the end)."""

    @property
    def items(self) -> Sequence[I_co]: ...

    @property
    def next_cursor(self) -> str | None: ...


@dataclass(frozen=True)
class Request(Generic[T_co]):
    """One call of an operation, and how its answer reads."""

    method: str
    path: str
    read: Callable[[httpx.Response], T_co]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None  # JSON; None: no body
    headers: Mapping[str, str] = field(default_factory=dict)
    # Statuses whose answer is the result; a readiness probe answers 503 with its reasons.
    answers_on: frozenset[int] = frozenset()

    @property
    def repeatable(self) -> bool:
        """Safe to send again: it changes nothing, or only the revision it names."""
        if self.params.get("dry_run") is True:
            return True
        if self.method == "PUT":
            return "If-Match" in self.headers
        return self.method in ("GET", "HEAD", "DELETE")

    def result(self, response: httpx.Response) -> T_co:
        if response.is_redirect:
            raise _not_tickd(response, "a redirect, which the API never sends")
        if response.is_success or response.status_code in self.answers_on:
            return self._read(response)
        raise api_error(response)

    def _read(self, response: httpx.Response) -> T_co:
        try:
            return self.read(response)
        except ValueError:  # pydantic's ValidationError, or no JSON (or no UTF-8) at all
            raise _not_tickd(response, "not as the API answers this operation") from None

    def unavailable(self, response: httpx.Response) -> bool:
        """A 503 that is not this operation's answer: the server may take it later."""
        return response.status_code == 503 and 503 not in self.answers_on


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    def read(response: httpx.Response) -> M:
        return model.model_validate_json(response.content)

    return read


def _nothing(response: httpx.Response) -> None:
    return None


@dataclass(frozen=True)
class _Listing(Generic[T_co]):
    """A list operation with its query: the request of its first page, or of the page at a
    cursor (what an `iter_` method follows)."""

    path: str
    read: Callable[[httpx.Response], T_co]
    query: BaseModel

    def at(self, cursor: str | None = None) -> Request[T_co]:
        return Request("GET", self.path, self.read, _params(_at(self.query, cursor)))


def _text(response: httpx.Response) -> str:
    return response.text


def _document(response: httpx.Response) -> dict[str, Any]:
    document = response.json()
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


def _path(template: str, *values: str) -> str:
    # An id or an address is one path segment, whatever it holds.
    return template.format(*(quote(value, safe="") for value in values))


def _body(model: BaseModel) -> Any:
    # Only what the caller set: a patch changes only the fields it names (null included).
    return model.model_dump(mode="json", exclude_unset=True)


def _params(query: BaseModel | None) -> dict[str, Any]:
    if query is None:
        return {}
    return query.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


def _query(model: type[Q], given: Q | None, fields: Mapping[str, Any]) -> Q:
    """The query model given, with `fields` on top, validated: a bad or unknown field raises
    pydantic's ValidationError naming it before anything is sent."""
    base = {} if given is None else given.model_dump(exclude_unset=True)
    return model.model_validate({**base, **fields})


def _at(query: Q, cursor: str | None) -> Q:
    return query if cursor is None else query.model_copy(update={"cursor": cursor})


def _if_match(revision: int | None) -> dict[str, str]:
    return {} if revision is None else {"If-Match": f'"{revision}"'}


def _dry_run(dry_run: bool) -> dict[str, Any]:
    # Sent only when asked: a write without it is the write itself.
    return {"dry_run": True} if dry_run else {}


JOB = "/v1/jobs/{}"
EXECUTION = "/v1/executions/{}"
DEAD_LETTER = "/v1/dead-letters/{}"
DOMAIN = "/v1/domains/{}"
Fields = Mapping[str, Any]  # a query's fields, as a method's keyword arguments give them


class _Operations:
    """Each operation as a Request (a list operation as a _Listing of them), its query built
    from the query model and the keyword fields a method was given: what both clients send,
    built in one place, so that each method of theirs is one line."""

    @staticmethod
    def jobs(query: JobSearchQuery | None, fields: Fields) -> _Listing[JobListPage]:
        return _Listing("/v1/jobs", _model(JobListPage), _query(JobSearchQuery, query, fields))

    @staticmethod
    def create_job(job: JobCreate, dry_run: bool = False) -> Request[JobOut]:
        return Request("POST", "/v1/jobs", _model(JobOut), _dry_run(dry_run), body=_body(job))

    @staticmethod
    def get_job(job_id: str) -> Request[JobOut]:
        return Request("GET", _path(JOB, job_id), _model(JobOut))

    @staticmethod
    def update_job(
        job_id: str, job: JobCreate, if_match: int | None, dry_run: bool = False
    ) -> Request[JobOut]:
        path, headers, params = _path(JOB, job_id), _if_match(if_match), _dry_run(dry_run)
        return Request("PUT", path, _model(JobOut), params, body=_body(job), headers=headers)

    @staticmethod
    def patch_job(
        job_id: str, patch: JobPatch, if_match: int | None, dry_run: bool = False
    ) -> Request[JobOut]:
        path, headers, params = _path(JOB, job_id), _if_match(if_match), _dry_run(dry_run)
        return Request("PATCH", path, _model(JobOut), params, body=_body(patch), headers=headers)

    @staticmethod
    def delete_job(job_id: str, if_match: int | None) -> Request[None]:
        return Request("DELETE", _path(JOB, job_id), _nothing, headers=_if_match(if_match))

    @staticmethod
    def job_action(job_id: str, action: str, model: type[M]) -> Request[M]:
        return Request("POST", _path(JOB + "/" + action, job_id), _model(model))

    @staticmethod
    def backfill_job(job_id: str, backfill: BackfillRequest) -> Request[BackfillOut]:
        path = _path(JOB + "/backfill", job_id)
        return Request("POST", path, _model(BackfillOut), body=_body(backfill))

    @staticmethod
    def preview_job(
        job_id: str, query: JobPreviewQuery | None, fields: Fields
    ) -> Request[PreviewOut]:
        q = _query(JobPreviewQuery, query, fields)
        return Request("GET", _path(JOB + "/preview", job_id), _model(PreviewOut), _params(q))

    @staticmethod
    def job_history(job_id: str, query: PageQuery | None, fields: Fields) -> _Listing[ChangePage]:
        q = _query(PageQuery, query, fields)
        return _Listing(_path(JOB + "/history", job_id), _model(ChangePage), q)

    @staticmethod
    def job_executions(
        job_id: str, query: JobExecutionQuery | None, fields: Fields
    ) -> _Listing[ExecutionPage]:
        q = _query(JobExecutionQuery, query, fields)
        return _Listing(_path(JOB + "/executions", job_id), _model(ExecutionPage), q)

    @staticmethod
    def executions(query: ExecutionListQuery | None, fields: Fields) -> _Listing[ExecutionPage]:
        q = _query(ExecutionListQuery, query, fields)
        return _Listing("/v1/executions", _model(ExecutionPage), q)

    @staticmethod
    def get_execution(execution_id: str) -> Request[RunOut]:
        return Request("GET", _path(EXECUTION, execution_id), _model(RunOut))

    @staticmethod
    def retry_execution(execution_id: str) -> Request[RunRequestOut]:
        return Request("POST", _path(EXECUTION + "/retry", execution_id), _model(RunRequestOut))

    @staticmethod
    def cancel_execution(execution_id: str, reason: str) -> Request[CancelOut]:
        body = _body(CancelRequestBody(reason=reason)) if reason else None
        path = _path(EXECUTION + "/cancel", execution_id)
        return Request("POST", path, _model(CancelOut), body=body)

    @staticmethod
    def preview_schedule(preview: PreviewRequest) -> Request[PreviewOut]:
        body = _body(preview)
        return Request("POST", "/v1/schedules/preview", _model(PreviewOut), body=body)

    @staticmethod
    def read(path: str, read: Callable[[httpx.Response], T], query: BaseModel | None) -> Request[T]:
        return Request("GET", path, read, _params(query))

    @staticmethod
    def readiness() -> Request[Readiness]:
        return Request("GET", "/readyz", _model(Readiness), answers_on=frozenset({503}))

    @staticmethod
    def clear_bounces(address: str) -> Request[None]:
        return Request("DELETE", _path("/v1/bounces/{}", address), _nothing)

    @staticmethod
    def dead_letters(query: DeadLetterQuery | None, fields: Fields) -> _Listing[ExecutionPage]:
        q = _query(DeadLetterQuery, query, fields)
        return _Listing("/v1/dead-letters", _model(ExecutionPage), q)

    @staticmethod
    def redrive_dead_letters(which: RedriveFilter | None, fields: Fields) -> Request[RedriveOut]:
        body = _body(_query(RedriveFilter, which, fields))
        return Request("POST", "/v1/dead-letters/redrive", _model(RedriveOut), body=body)

    @staticmethod
    def discard_dead_letters(which: DiscardFilter | None, fields: Fields) -> Request[DiscardOut]:
        body = _body(_query(DiscardFilter, which, fields))
        return Request("POST", "/v1/dead-letters/discard", _model(DiscardOut), body=body)

    @staticmethod
    def dead_letter_groups(query: GroupQuery | None, fields: Fields) -> Request[ErrorGroups]:
        q = _query(GroupQuery, query, fields)
        return Request("GET", "/v1/dead-letters/groups", _model(ErrorGroups), _params(q))

    @staticmethod
    def running(domain: str | None) -> Request[RunningPage]:
        return Request(
            "GET", "/v1/running", _model(RunningPage), _params(RunningQuery(domain=domain))
        )

    @staticmethod
    def stats(query: StatsQuery | None, fields: Fields) -> Request[StatsOut]:
        q = _query(StatsQuery, query, fields)
        return Request("GET", "/v1/stats", _model(StatsOut), _params(q))

    @staticmethod
    def dead_letter_action(execution_id: str, action: str, model: type[M]) -> Request[M]:
        return Request("POST", _path(DEAD_LETTER + "/" + action, execution_id), _model(model))

    @staticmethod
    def get_domain(name: str) -> Request[DomainOut]:
        return Request("GET", _path(DOMAIN, name), _model(DomainOut))

    @staticmethod
    def put_domain(
        name: str, settings: DomainSettingsIn | None, fields: Fields
    ) -> Request[DomainOut]:
        body = _body(_query(DomainSettingsIn, settings, fields))
        return Request("PUT", _path(DOMAIN, name), _model(DomainOut), body=body)

    @staticmethod
    def delete_domain(name: str) -> Request[None]:
        return Request("DELETE", _path(DOMAIN, name), _nothing)


_ops = _Operations


# -- the clients ----------------------------------------------------------------------------------


def _headers(token: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "Accept-Encoding": ACCEPTED_ENCODINGS}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _checked_limits(timeout: float | None, max_response_bytes: int) -> None:
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout: {timeout!r} is not a number of seconds above 0 (or None)")
    if max_response_bytes < 1:
        raise ValueError(f"max_response_bytes: {max_response_bytes!r} is not 1 or more")


class _Base:
    retry: Retry
    timeout: float | None
    max_response_bytes: int
    _masking: _Masking

    def _wait_after_failure(
        self, request: Request[Any], attempt: int, exc: httpx.TransportError, deadline: _Deadline
    ) -> float:
        """How long to wait before sending `request` again after no answer came; raises
        TransportFailed when it is not sent again."""
        wait = self.retry.delay(attempt)
        if not self._again(request, attempt) or not deadline.allows(wait):
            if isinstance(exc, httpx.TimeoutException) and deadline.expired():
                exc = deadline.ran_out()
            raise _transport_failed(exc) from None
        return wait

    def _wait_after_answer(
        self, request: Request[Any], attempt: int, response: httpx.Response, deadline: _Deadline
    ) -> float | None:
        """How long to wait before sending `request` again after this answer; None: the
        answer is final."""
        if not request.unavailable(response) or not self._again(request, attempt):
            return None
        wait = self.retry.delay(attempt, response.headers.get("Retry-After"))
        return wait if deadline.allows(wait) else None

    def _again(self, request: Request[Any], attempt: int) -> bool:
        return request.repeatable and attempt < self.retry.attempts

    def _next_cursor(
        self, listing: _Listing[Page[Any]], page: Page[Any], seen: set[str]
    ) -> str | None:
        """The cursor of the page after `page`; ProtocolError when it was given before, since
        following it would go round the same pages for ever."""
        cursor = page.next_cursor
        if cursor is not None and cursor in seen:
            shown = cursor if len(cursor) <= 80 else f"{cursor[:80]}..."
            raise self._masking.error(
                ProtocolError(
                    f"GET {listing.path} gave the cursor {shown!r} a second time: following it "
                    "would never end (the items before it were given once each)"
                )
            )
        if cursor is not None:
            seen.add(cursor)
        return cursor


def _cursors_seen(listing: _Listing[Any]) -> set[str]:
    start = getattr(listing.query, "cursor", None)
    return set() if start is None else {start}


class Client(_Base):
    """The API from blocking code. Use it as a context manager, or call close()."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
        retry: Retry = Retry(),
        transport: httpx.BaseTransport | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        _checked_limits(timeout, max_response_bytes)
        self.retry = retry
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._masking = _Masking.of(token)
        self._http = httpx.Client(
            base_url=checked_url(base_url),
            headers=_headers(token),
            timeout=httpx.Timeout(timeout),
            transport=transport or _blocking_transport(),
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"Client({str(self._http.base_url)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, request: Request[T]) -> T:
        """Send `request`, again after a 503 or a connection failure while it is repeatable,
        all within the client's timeout."""
        deadline = _Deadline.after(self.timeout)
        within = _CALL_DEADLINE.set(deadline)
        try:
            return self._send(request, deadline)
        except ClientError as exc:
            failure = self._masking.error(exc)
        finally:
            _CALL_DEADLINE.reset(within)
        # Raised outside the handler: the unmasked errors are not kept as its context either.
        raise failure from None

    def _send(self, request: Request[T], deadline: _Deadline) -> T:
        attempt = 1
        while True:
            try:
                response = self._exchange(request, deadline)
            except httpx.TransportError as exc:
                wait = self._wait_after_failure(request, attempt, exc, deadline)
            else:
                after = self._wait_after_answer(request, attempt, response, deadline)
                if after is None:
                    return request.result(response)
                wait = after
            time.sleep(wait)
            attempt += 1

    def _exchange(self, request: Request[Any], deadline: _Deadline) -> httpx.Response:
        """One attempt: the answer read whole, each network operation given only what is left
        of the call's time."""
        with self._http.stream(
            request.method,
            request.path,
            params=request.params,
            json=request.body,
            headers=request.headers,
            timeout=deadline.timeouts(),
        ) as response:
            body = _Body(response, self.max_response_bytes)
            for raw in () if body.held else response.iter_raw():
                body.take(raw)
                if deadline.expired():
                    raise deadline.ran_out()
            return body.answer()

    def _items(self, listing: _Listing[Page[I]]) -> Iterator[I]:
        seen = _cursors_seen(listing)
        cursor: str | None = None
        while True:
            page = self.send(listing.at(cursor))
            yield from page.items
            cursor = self._next_cursor(listing, page, seen)
            if cursor is None:
                return

    # -- jobs

    def list_jobs(self, query: JobSearchQuery | None = None, **fields: Any) -> JobListPage:
        """One page of jobs; `fields` are JobSearchQuery's (handler, enabled, q, limit...)."""
        return self.send(_ops.jobs(query, fields).at())

    def iter_jobs(self, query: JobSearchQuery | None = None, **fields: Any) -> Iterator[JobOut]:
        """Every job the query keeps, page after page."""
        return self._items(_ops.jobs(query, fields))

    def create_job(self, job: JobCreate, *, dry_run: bool = False) -> JobOut:
        """Create a job; with `dry_run`, every check of the create and the job as it would be,
        nothing created."""
        return self.send(_ops.create_job(job, dry_run))

    def get_job(self, job_id: str) -> JobOut:
        return self.send(_ops.get_job(job_id))

    def update_job(
        self, job_id: str, job: JobCreate, *, if_match: int | None = None, dry_run: bool = False
    ) -> JobOut:
        """Replace the job's definition; with `if_match` (a revision) only if it is current;
        with `dry_run`, checked and answered as it would be, nothing changed."""
        return self.send(_ops.update_job(job_id, job, if_match, dry_run))

    def patch_job(
        self, job_id: str, patch: JobPatch, *, if_match: int | None = None, dry_run: bool = False
    ) -> JobOut:
        """Change the fields `patch` sets; with `if_match` only if the revision is current;
        with `dry_run`, checked and answered as it would be, nothing changed."""
        return self.send(_ops.patch_job(job_id, patch, if_match, dry_run))

    def delete_job(self, job_id: str, *, if_match: int | None = None) -> None:
        self.send(_ops.delete_job(job_id, if_match))

    def pause_job(self, job_id: str) -> JobOut:
        return self.send(_ops.job_action(job_id, "pause", JobOut))

    def resume_job(self, job_id: str) -> JobOut:
        return self.send(_ops.job_action(job_id, "resume", JobOut))

    def trigger_job(self, job_id: str) -> RunRequestOut:
        return self.send(_ops.job_action(job_id, "trigger", RunRequestOut))

    def backfill_job(self, job_id: str, backfill: BackfillRequest) -> BackfillOut:
        return self.send(_ops.backfill_job(job_id, backfill))

    def preview_job(
        self, job_id: str, query: JobPreviewQuery | None = None, **fields: Any
    ) -> PreviewOut:
        return self.send(_ops.preview_job(job_id, query, fields))

    def job_history(self, job_id: str, query: PageQuery | None = None, **fields: Any) -> ChangePage:
        return self.send(_ops.job_history(job_id, query, fields).at())

    def iter_job_history(
        self, job_id: str, query: PageQuery | None = None, **fields: Any
    ) -> Iterator[ChangeOut]:
        return self._items(_ops.job_history(job_id, query, fields))

    def job_executions(
        self, job_id: str, query: JobExecutionQuery | None = None, **fields: Any
    ) -> ExecutionPage:
        return self.send(_ops.job_executions(job_id, query, fields).at())

    def iter_job_executions(
        self, job_id: str, query: JobExecutionQuery | None = None, **fields: Any
    ) -> Iterator[ExecutionOut]:
        return self._items(_ops.job_executions(job_id, query, fields))

    # -- executions

    def list_executions(
        self, query: ExecutionListQuery | None = None, **fields: Any
    ) -> ExecutionPage:
        return self.send(_ops.executions(query, fields).at())

    def iter_executions(
        self, query: ExecutionListQuery | None = None, **fields: Any
    ) -> Iterator[ExecutionOut]:
        return self._items(_ops.executions(query, fields))

    def get_execution(self, execution_id: str) -> RunOut:
        """The execution in full: its attempts and its error's traceback."""
        return self.send(_ops.get_execution(execution_id))

    def retry_execution(self, execution_id: str) -> RunRequestOut:
        return self.send(_ops.retry_execution(execution_id))

    def running(self, *, domain: str | None = None) -> RunningPage:
        """The executions running now (of the jobs of `domain`, if given), the longest running
        first, with their age."""
        return self.send(_ops.running(domain))

    def cancel_execution(self, execution_id: str, *, reason: str = "") -> CancelOut:
        """Ask for a running (or queued) execution to stop; 409 (Conflict) once it ended."""
        return self.send(_ops.cancel_execution(execution_id, reason))

    def instances(self) -> InstancePage:
        """The instances that beat, by id: each one's version, start, partitions held and runs
        in flight (as its heartbeat said), executions running and last heartbeat."""
        return self.send(_ops.read("/v1/instances", _model(InstancePage), None))

    # -- dead letters

    def list_dead_letters(
        self, query: DeadLetterQuery | None = None, **fields: Any
    ) -> ExecutionPage:
        return self.send(_ops.dead_letters(query, fields).at())

    def iter_dead_letters(
        self, query: DeadLetterQuery | None = None, **fields: Any
    ) -> Iterator[ExecutionOut]:
        return self._items(_ops.dead_letters(query, fields))

    def redrive_dead_letters(self, which: RedriveFilter | None = None, **fields: Any) -> RedriveOut:
        """Re-drive the open dead letters the filter matches (all of them: no filter)."""
        return self.send(_ops.redrive_dead_letters(which, fields))

    def redrive_dead_letter(self, execution_id: str) -> RunRequestOut:
        return self.send(_ops.dead_letter_action(execution_id, "redrive", RunRequestOut))

    def discard_dead_letter(self, execution_id: str) -> ExecutionOut:
        return self.send(_ops.dead_letter_action(execution_id, "discard", ExecutionOut))

    def discard_dead_letters(self, which: DiscardFilter | None = None, **fields: Any) -> DiscardOut:
        """Discard the dead letters listed (`ids`), or the newest open ones the filter matches,
        at most `limit`; `more` says whether more match."""
        return self.send(_ops.discard_dead_letters(which, fields))

    def dead_letter_groups(self, query: GroupQuery | None = None, **fields: Any) -> ErrorGroups:
        """Identical errors of the newest dead letters, counted, the largest group first."""
        return self.send(_ops.dead_letter_groups(query, fields))

    # -- domains

    def list_domains(self) -> DomainList:
        """Every domain jobs are in or settings are stored for: its settings and job count."""
        return self.send(_ops.read("/v1/domains", _model(DomainList), None))

    def get_domain(self, name: str) -> DomainOut:
        """A domain's settings (the defaults when none are stored) and its job count."""
        return self.send(_ops.get_domain(name))

    def put_domain(
        self, name: str, settings: DomainSettingsIn | None = None, **fields: Any
    ) -> DomainOut:
        """Store a domain's settings, whole: `fields` are DomainSettingsIn's (weight,
        max_running, max_jobs, lag_objective_seconds); one left out takes its default."""
        return self.send(_ops.put_domain(name, settings, fields))

    def delete_domain(self, name: str) -> None:
        """Remove a domain's settings (NotFound when it has none): it has the defaults again."""
        self.send(_ops.delete_domain(name))

    # -- schedules, handlers, mail

    def preview_schedule(self, preview: PreviewRequest) -> PreviewOut:
        return self.send(_ops.preview_schedule(preview))

    def list_handlers(self) -> HandlerList:
        return self.send(_ops.read("/v1/handlers", _model(HandlerList), None))

    def list_bounces(self) -> BounceList:
        return self.send(_ops.read("/v1/bounces", _model(BounceList), None))

    def clear_bounces(self, address: str) -> None:
        self.send(_ops.clear_bounces(address))

    # -- operations

    def get_stats(self, query: StatsQuery | None = None, **fields: Any) -> StatsOut:
        return self.send(_ops.stats(query, fields))

    def session(self) -> SessionOut:
        return self.send(_ops.read("/v1/session", _model(SessionOut), None))

    def health(self) -> Health:
        return self.send(_ops.read("/healthz", _model(Health), None))

    def readiness(self) -> Readiness:
        """Ready or not (the API answers 503 with the reasons: they are returned, not raised)."""
        return self.send(_ops.readiness())

    def metrics(self) -> str:
        return self.send(_ops.read("/metrics", _text, None))

    def openapi(self) -> dict[str, Any]:
        return self.send(_ops.read("/openapi.json", _document, None))

    def docs_page(self) -> str:
        return self.send(_ops.read("/docs", _text, None))


class AsyncClient(_Base):
    """The API from asyncio code. Use it as an async context manager, or await aclose()."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
        retry: Retry = Retry(),
        transport: httpx.AsyncBaseTransport | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        _checked_limits(timeout, max_response_bytes)
        self.retry = retry
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._masking = _Masking.of(token)
        self._http = httpx.AsyncClient(
            base_url=checked_url(base_url),
            headers=_headers(token),
            timeout=httpx.Timeout(timeout),
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"AsyncClient({str(self._http.base_url)!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, request: Request[T]) -> T:
        """Send `request`, again after a 503 or a connection failure while it is repeatable,
        all within the client's timeout."""
        try:
            return await self._send(request, _Deadline.after(self.timeout))
        except ClientError as exc:
            failure = self._masking.error(exc)
        # Raised outside the handler: the unmasked errors are not kept as its context either.
        raise failure from None

    async def _send(self, request: Request[T], deadline: _Deadline) -> T:
        attempt = 1
        while True:
            try:
                response = await self._exchange(request, deadline)
            except httpx.TransportError as exc:
                wait = self._wait_after_failure(request, attempt, exc, deadline)
            else:
                after = self._wait_after_answer(request, attempt, response, deadline)
                if after is None:
                    return request.result(response)
                wait = after
            await asyncio.sleep(wait)
            attempt += 1

    async def _exchange(self, request: Request[Any], deadline: _Deadline) -> httpx.Response:
        """One attempt: the answer read whole, cancelled when the call's time runs out."""
        try:
            async with asyncio.timeout(deadline.left()):
                async with self._http.stream(
                    request.method,
                    request.path,
                    params=request.params,
                    json=request.body,
                    headers=request.headers,
                    timeout=deadline.timeouts(),
                ) as response:
                    body = _Body(response, self.max_response_bytes)
                    if not body.held:
                        async for raw in response.aiter_raw():
                            body.take(raw)
                    return body.answer()
        except TimeoutError:
            raise deadline.ran_out() from None

    async def _items(self, listing: _Listing[Page[I]]) -> AsyncIterator[I]:
        seen = _cursors_seen(listing)
        cursor: str | None = None
        while True:
            page = await self.send(listing.at(cursor))
            for item in page.items:
                yield item
            cursor = self._next_cursor(listing, page, seen)
            if cursor is None:
                return

    # -- jobs

    async def list_jobs(self, query: JobSearchQuery | None = None, **fields: Any) -> JobListPage:
        """One page of jobs; `fields` are JobSearchQuery's (handler, enabled, q, limit...)."""
        return await self.send(_ops.jobs(query, fields).at())

    def iter_jobs(
        self, query: JobSearchQuery | None = None, **fields: Any
    ) -> AsyncIterator[JobOut]:
        """Every job the query keeps, page after page."""
        return self._items(_ops.jobs(query, fields))

    async def create_job(self, job: JobCreate, *, dry_run: bool = False) -> JobOut:
        """Create a job; with `dry_run`, every check of the create and the job as it would be,
        nothing created."""
        return await self.send(_ops.create_job(job, dry_run))

    async def get_job(self, job_id: str) -> JobOut:
        return await self.send(_ops.get_job(job_id))

    async def update_job(
        self, job_id: str, job: JobCreate, *, if_match: int | None = None, dry_run: bool = False
    ) -> JobOut:
        """Replace the job's definition; with `if_match` (a revision) only if it is current;
        with `dry_run`, checked and answered as it would be, nothing changed."""
        return await self.send(_ops.update_job(job_id, job, if_match, dry_run))

    async def patch_job(
        self, job_id: str, patch: JobPatch, *, if_match: int | None = None, dry_run: bool = False
    ) -> JobOut:
        """Change the fields `patch` sets; with `if_match` only if the revision is current;
        with `dry_run`, checked and answered as it would be, nothing changed."""
        return await self.send(_ops.patch_job(job_id, patch, if_match, dry_run))

    async def delete_job(self, job_id: str, *, if_match: int | None = None) -> None:
        await self.send(_ops.delete_job(job_id, if_match))

    async def pause_job(self, job_id: str) -> JobOut:
        return await self.send(_ops.job_action(job_id, "pause", JobOut))

    async def resume_job(self, job_id: str) -> JobOut:
        return await self.send(_ops.job_action(job_id, "resume", JobOut))

    async def trigger_job(self, job_id: str) -> RunRequestOut:
        return await self.send(_ops.job_action(job_id, "trigger", RunRequestOut))

    async def backfill_job(self, job_id: str, backfill: BackfillRequest) -> BackfillOut:
        return await self.send(_ops.backfill_job(job_id, backfill))

    async def preview_job(
        self, job_id: str, query: JobPreviewQuery | None = None, **fields: Any
    ) -> PreviewOut:
        return await self.send(_ops.preview_job(job_id, query, fields))

    async def job_history(
        self, job_id: str, query: PageQuery | None = None, **fields: Any
    ) -> ChangePage:
        return await self.send(_ops.job_history(job_id, query, fields).at())

    def iter_job_history(
        self, job_id: str, query: PageQuery | None = None, **fields: Any
    ) -> AsyncIterator[ChangeOut]:
        return self._items(_ops.job_history(job_id, query, fields))

    async def job_executions(
        self, job_id: str, query: JobExecutionQuery | None = None, **fields: Any
    ) -> ExecutionPage:
        return await self.send(_ops.job_executions(job_id, query, fields).at())

    def iter_job_executions(
        self, job_id: str, query: JobExecutionQuery | None = None, **fields: Any
    ) -> AsyncIterator[ExecutionOut]:
        return self._items(_ops.job_executions(job_id, query, fields))

    # -- executions

    async def list_executions(
        self, query: ExecutionListQuery | None = None, **fields: Any
    ) -> ExecutionPage:
        return await self.send(_ops.executions(query, fields).at())

    def iter_executions(
        self, query: ExecutionListQuery | None = None, **fields: Any
    ) -> AsyncIterator[ExecutionOut]:
        return self._items(_ops.executions(query, fields))

    async def get_execution(self, execution_id: str) -> RunOut:
        """The execution in full: its attempts and its error's traceback."""
        return await self.send(_ops.get_execution(execution_id))

    async def retry_execution(self, execution_id: str) -> RunRequestOut:
        return await self.send(_ops.retry_execution(execution_id))

    async def running(self, *, domain: str | None = None) -> RunningPage:
        return await self.send(_ops.running(domain))

    async def cancel_execution(self, execution_id: str, *, reason: str = "") -> CancelOut:
        return await self.send(_ops.cancel_execution(execution_id, reason))

    async def instances(self) -> InstancePage:
        return await self.send(_ops.read("/v1/instances", _model(InstancePage), None))

    # -- dead letters

    async def list_dead_letters(
        self, query: DeadLetterQuery | None = None, **fields: Any
    ) -> ExecutionPage:
        return await self.send(_ops.dead_letters(query, fields).at())

    def iter_dead_letters(
        self, query: DeadLetterQuery | None = None, **fields: Any
    ) -> AsyncIterator[ExecutionOut]:
        return self._items(_ops.dead_letters(query, fields))

    async def redrive_dead_letters(
        self, which: RedriveFilter | None = None, **fields: Any
    ) -> RedriveOut:
        """Re-drive the open dead letters the filter matches (all of them: no filter)."""
        return await self.send(_ops.redrive_dead_letters(which, fields))

    async def redrive_dead_letter(self, execution_id: str) -> RunRequestOut:
        return await self.send(_ops.dead_letter_action(execution_id, "redrive", RunRequestOut))

    async def discard_dead_letter(self, execution_id: str) -> ExecutionOut:
        return await self.send(_ops.dead_letter_action(execution_id, "discard", ExecutionOut))

    async def discard_dead_letters(
        self, which: DiscardFilter | None = None, **fields: Any
    ) -> DiscardOut:
        """Discard the dead letters listed (`ids`), or the newest open ones the filter matches,
        at most `limit`; `more` says whether more match."""
        return await self.send(_ops.discard_dead_letters(which, fields))

    async def dead_letter_groups(
        self, query: GroupQuery | None = None, **fields: Any
    ) -> ErrorGroups:
        """Identical errors of the newest dead letters, counted, the largest group first."""
        return await self.send(_ops.dead_letter_groups(query, fields))

    # -- domains

    async def list_domains(self) -> DomainList:
        """Every domain jobs are in or settings are stored for: its settings and job count."""
        return await self.send(_ops.read("/v1/domains", _model(DomainList), None))

    async def get_domain(self, name: str) -> DomainOut:
        """A domain's settings (the defaults when none are stored) and its job count."""
        return await self.send(_ops.get_domain(name))

    async def put_domain(
        self, name: str, settings: DomainSettingsIn | None = None, **fields: Any
    ) -> DomainOut:
        """Store a domain's settings, whole: `fields` are DomainSettingsIn's (weight,
        max_running, max_jobs, lag_objective_seconds); one left out takes its default."""
        return await self.send(_ops.put_domain(name, settings, fields))

    async def delete_domain(self, name: str) -> None:
        """Remove a domain's settings (NotFound when it has none): it has the defaults again."""
        await self.send(_ops.delete_domain(name))

    # -- schedules, handlers, mail

    async def preview_schedule(self, preview: PreviewRequest) -> PreviewOut:
        return await self.send(_ops.preview_schedule(preview))

    async def list_handlers(self) -> HandlerList:
        return await self.send(_ops.read("/v1/handlers", _model(HandlerList), None))

    async def list_bounces(self) -> BounceList:
        return await self.send(_ops.read("/v1/bounces", _model(BounceList), None))

    async def clear_bounces(self, address: str) -> None:
        await self.send(_ops.clear_bounces(address))

    # -- operations

    async def get_stats(self, query: StatsQuery | None = None, **fields: Any) -> StatsOut:
        return await self.send(_ops.stats(query, fields))

    async def session(self) -> SessionOut:
        return await self.send(_ops.read("/v1/session", _model(SessionOut), None))

    async def health(self) -> Health:
        return await self.send(_ops.read("/healthz", _model(Health), None))

    async def readiness(self) -> Readiness:
        """Ready or not (the API answers 503 with the reasons: they are returned, not raised)."""
        return await self.send(_ops.readiness())

    async def metrics(self) -> str:
        return await self.send(_ops.read("/metrics", _text, None))

    async def openapi(self) -> dict[str, Any]:
        return await self.send(_ops.read("/openapi.json", _document, None))

    async def docs_page(self) -> str:
        return await self.send(_ops.read("/docs", _text, None))
