"""A small synchronous client of the tickd API, on the standard library alone: what the `tickd
jobs` and `tickd executions` commands talk through.

The token goes in the Authorization header and nowhere else: not in a repr, not in an error
message. Redirects are not followed (urllib would send the header on to wherever they point); an
error of the API comes back as ApiProblem, with its problem details as they were sent, and a
server that cannot be reached as Unreachable.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any

from tickd.api import safejson
from tickd.scheduler.secrets import MASK, scrub_text

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT_SECONDS = 30.0
URL_ENV = "TICKD_URL"
TOKEN_ENV = "TICKD_TOKEN"
PROBLEM_JSON = "application/problem+json"
# What the commands read of a job: without them an answer is not the API's.
JOB_FIELDS = ("id", "name")

Json = dict[str, Any]


class ClientError(Exception):
    """Anything that keeps a call from an answer; the message is safe to print."""


class Unreachable(ClientError):
    """No HTTP answer: refused, timed out, not HTTP."""


class BadUrl(ClientError):
    """A base URL that is not an http:// or https:// URL: a mistake of the caller's."""


class NotTickd(ClientError):
    """An answer, but not one the tickd API gives: some other server, or a proxy's page."""


@dataclass(frozen=True)
class FieldError:
    field: str
    reason: str


class ApiProblem(ClientError):
    """The API answered with an error status; `body` is what it sent (problem details, usually)."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str | None = None,
        errors: tuple[FieldError, ...] = (),
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {title}" + (f": {detail}" if detail else ""))
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors
        self.body = body

    @classmethod
    def from_response(cls, status: int, reason: str, content_type: str, raw: bytes) -> ApiProblem:
        text = raw.decode("utf-8", errors="replace")
        try:
            body = safejson.loads(raw) if "json" in content_type else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            # Not problem details (a proxy's page, say): the status and the start of the text.
            excerpt = " ".join(text.split())[:300] or None
            return cls(status, reason or "Error", excerpt, body=text)
        raw_errors = body.get("errors")
        errors = tuple(
            FieldError(str(e.get("field", "")), plain_reason(str(e.get("reason", ""))))
            for e in (raw_errors if isinstance(raw_errors, list) else [])
            if isinstance(e, dict)
        )
        detail = body.get("detail")
        title = str(body.get("title") or reason or "Error")
        shown = plain_reason(str(detail)) if detail is not None else None
        return cls(status, title, shown, errors, body)


def plain_reason(text: str) -> str:
    """A reason without the "Value error, " pydantic puts before a validator's own words."""
    return _PYDANTIC_PREFIX.sub("", text)


_PYDANTIC_PREFIX = re.compile(r"(?:(?<=^)|(?<=: )|(?<=; ))(?:Value|Assertion) error, ")


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: Any  # the decoded JSON, or None for an empty answer


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx then surfaces as an HTTPError, with the token not sent anywhere


@dataclass(frozen=True)
class Client:
    base_url: str = DEFAULT_URL
    token: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        try:
            parts = urllib.parse.urlsplit(self.base_url)
            parts.port  # noqa: B018 - read for its ValueError: a port that is no number
        except ValueError as exc:
            raise BadUrl(self._not_a_url(str(exc))) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadUrl(self._not_a_url("not an http:// or https:// URL with a host"))
        if "@" in parts.netloc:
            # urllib would dial `user:pw@host` as a host name; the API reads a bearer token only.
            raise BadUrl(
                f"{self._shown_url()!r}: credentials in the URL are not sent; set --url or "
                f"{URL_ENV} without them, and the API token with --token or {TOKEN_ENV}"
            )

    def _not_a_url(self, why: str) -> str:
        return f"{self._shown_url()!r}: {why} (set --url or {URL_ENV})"

    def _shown_url(self) -> str:
        """The base URL as messages show it: whatever comes before `@` in it masked, a user name
        as well as a password (a token pasted as the user name is a secret too)."""
        return scrub_text(_USERINFO.sub(rf"\g<scheme>{MASK}@", self.base_url))

    # -- HTTP ----------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        url = self.base_url.rstrip("/") + path
        params = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", f"application/json, {PROBLEM_JSON}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        opener = urllib.request.build_opener(_NoRedirects)
        try:
            with opener.open(request, timeout=self.timeout) as answer:
                raw = answer.read()
                body = self._decode(raw, answer.status)
                return Response(answer.status, dict(answer.headers.items()), body)
        except urllib.error.HTTPError as exc:
            with exc:
                raw = exc.read()
                content_type = exc.headers.get("Content-Type", "") if exc.headers else ""
            if 300 <= exc.code < 400:
                why = f"answered {exc.code}, a redirect, which the API never sends"
                raise self.not_tickd(why) from None
            raise ApiProblem.from_response(exc.code, exc.reason, content_type, raw) from None
        except (urllib.error.URLError, OSError, HTTPException, ValueError) as exc:
            raise Unreachable(self._unreachable(exc)) from None

    def _decode(self, raw: bytes, status: int) -> Any:
        if not raw:
            return None
        try:
            return safejson.loads(raw)
        except ValueError:
            raise self.not_tickd(f"answered {status} with something that is not JSON") from None

    def not_tickd(self, what: str) -> NotTickd:
        where = self._shown_url()
        return NotTickd(
            f"the server at {where} {what}: is it the tickd API? (set --url or {URL_ENV})"
        )

    def _object(self, response: Response, *required: str) -> Json:
        """The answer as the JSON object an operation returns, with the fields the commands
        read; anything else is some other server's answer."""
        body = response.body
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in required):
            fields = ", ".join(required)
            raise self.not_tickd(f"answered {response.status} without a JSON object of {fields}")
        return body

    def _page(self, response: Response) -> Json:
        page = self._object(response)
        items = page.get("items")
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("id"), str) for i in items
        ):
            raise self.not_tickd(f"answered {response.status} without a page of items")
        return page

    def _unreachable(self, exc: BaseException) -> str:
        reason: Any = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError):
            why = f"no answer within {self.timeout:g} s"
        elif isinstance(reason, BaseException):
            why = str(reason.strerror or reason) if isinstance(reason, OSError) else str(reason)
            why = why or type(reason).__name__
        else:
            why = str(reason)
        where = self._shown_url()
        return f"cannot reach the tickd API at {where}: {why} (set --url or {URL_ENV})"

    # -- jobs ----------------------------------------------------------------------------------

    def list_jobs(
        self,
        *,
        handler: str | None = None,
        enabled: bool | None = None,
        name_prefix: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Json:
        query = {
            "handler": handler,
            "enabled": enabled,
            "name_prefix": name_prefix,
            "limit": limit,
            "cursor": cursor,
        }
        return self._page(self.request("GET", "/v1/jobs", query=query))

    def iter_job_pages(self, **filters: Any) -> Iterator[Json]:
        """Every page, following next_cursor."""
        cursor = None
        while True:
            page = self.list_jobs(**filters, cursor=cursor)
            yield page
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def get_job(self, job_id: str) -> Json:
        return self._object(self.request("GET", f"/v1/jobs/{_segment(job_id)}"), *JOB_FIELDS)

    def find_job(self, ref: str) -> Json:
        """A job by id or, failing that, by name: ops think in names."""
        try:
            return self.get_job(ref)
        except ApiProblem as exc:
            if exc.status != 404:
                raise
            page = self.list_jobs(name_prefix=ref, limit=1)
            named: list[Json] = [j for j in page["items"] if j.get("name") == ref]
            if not named:
                raise ApiProblem(404, "Not Found", f"no job with id or name {ref!r}") from None
            return named[0]

    def create_job(self, job: Json) -> Json:
        return self._object(self.request("POST", "/v1/jobs", body=job), *JOB_FIELDS)

    def pause_job(self, job_id: str) -> Json:
        return self._object(self.request("POST", f"/v1/jobs/{_segment(job_id)}/pause"), *JOB_FIELDS)

    def resume_job(self, job_id: str) -> Json:
        return self._object(
            self.request("POST", f"/v1/jobs/{_segment(job_id)}/resume"), *JOB_FIELDS
        )

    def trigger_job(self, job_id: str) -> Json:
        return self._object(self.request("POST", f"/v1/jobs/{_segment(job_id)}/trigger"), "id")

    def replace_job(self, job_id: str, job: Json, *, revision: int | None = None) -> Json:
        """The whole definition; with `revision`, only if the job is still at it (else a 412)."""
        response = self.request(
            "PUT", f"/v1/jobs/{_segment(job_id)}", body=job, headers=_if_match(revision)
        )
        return self._object(response, *JOB_FIELDS)

    def patch_job(self, job_id: str, changes: Json, *, revision: int | None = None) -> Json:
        """Change some fields; with `revision`, only if the job is still at it (else a 412)."""
        response = self.request(
            "PATCH", f"/v1/jobs/{_segment(job_id)}", body=changes, headers=_if_match(revision)
        )
        return self._object(response, *JOB_FIELDS)

    def delete_job(self, job_id: str, *, revision: int | None = None) -> None:
        self.request("DELETE", f"/v1/jobs/{_segment(job_id)}", headers=_if_match(revision))

    def preview_job(
        self, job_id: str, *, count: int | None = None, after: str | None = None
    ) -> Json:
        query = {"count": count, "after": after}
        return self._object(
            self.request("GET", f"/v1/jobs/{_segment(job_id)}/preview", query=query)
        )

    def backfill_job(self, job_id: str, window: Json) -> Json:
        path = f"/v1/jobs/{_segment(job_id)}/backfill"
        return self._object(self.request("POST", path, body=window))

    def job_history(self, job_id: str, *, limit: int | None = None) -> Json:
        path = f"/v1/jobs/{_segment(job_id)}/history"
        return self._object(self.request("GET", path, query={"limit": limit}))

    def job_executions(self, job_id: str, **query: Any) -> Json:
        path = f"/v1/jobs/{_segment(job_id)}/executions"
        return self._page(self.request("GET", path, query=query))

    def preview_schedule(self, request: Json) -> Json:
        return self._object(self.request("POST", "/v1/schedules/preview", body=request))

    # -- the rest: handlers, stats, bounces, the session, the probes ---------------------------

    def get(self, path: str, **query: Any) -> Json:
        """A read of the API's, as the JSON object it answers."""
        return self._object(self.request("GET", path, query=query))

    def clear_bounces(self, address: str) -> None:
        self.request("DELETE", f"/v1/bounces/{_segment(address)}")

    # -- executions ----------------------------------------------------------------------------

    def list_executions(
        self,
        *,
        job_id: str | None = None,
        status: str | None = None,
        handler: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Json:
        query = {
            "job_id": job_id,
            "status": status,
            "handler": handler,
            "limit": limit,
            "cursor": cursor,
        }
        return self._page(self.request("GET", "/v1/executions", query=query))

    def get_execution(self, execution_id: str) -> Json:
        return self._object(self.request("GET", f"/v1/executions/{_segment(execution_id)}"), "id")

    def retry_execution(self, execution_id: str) -> Json:
        return self._object(
            self.request("POST", f"/v1/executions/{_segment(execution_id)}/retry"), "id"
        )

    # -- dead letters --------------------------------------------------------------------------

    def list_dead_letters(
        self,
        *,
        state: str | None = None,
        job_id: str | None = None,
        handler: str | None = None,
        since: str | None = None,
        limit: int | None = None,
    ) -> Json:
        query = {
            "state": state,
            "job_id": job_id,
            "handler": handler,
            "since": since,
            "limit": limit,
        }
        return self._page(self.request("GET", "/v1/dead-letters", query=query))

    def redrive_dead_letter(self, execution_id: str) -> Json:
        path = f"/v1/dead-letters/{_segment(execution_id)}/redrive"
        return self._object(self.request("POST", path), "id")

    def redrive_dead_letters(self, dead_filter: Json) -> Json:
        response = self.request("POST", "/v1/dead-letters/redrive", body=dead_filter)
        out = self._object(response)
        if not isinstance(out.get("requests"), list):
            raise self.not_tickd(f"answered {response.status} without the requests queued")
        return out

    def discard_dead_letter(self, execution_id: str) -> Json:
        path = f"/v1/dead-letters/{_segment(execution_id)}/discard"
        return self._object(self.request("POST", path), "id")


# The user information of a URL: from `://` to the last `@` before the path, query or fragment.
_USERINFO = re.compile(r"(?P<scheme>://)[^/?#]*@")


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _if_match(revision: int | None) -> dict[str, str]:
    return {} if revision is None else {"If-Match": f'"{revision}"'}


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
