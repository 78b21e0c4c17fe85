"""Routes declared once, as data: the router, the checks and /openapi.json are all made from them.

Each Route names its models (path, query, body, response) and the scope it needs. The wrapper
authenticates, validates the query and the body against the models before the handler runs (so a
bad request changes nothing), and serialises the handler's model; the OpenAPI document is built
from the same models, so it cannot drift from what the server does.
"""

from __future__ import annotations

import hmac
import math
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from aiohttp import web
from pydantic import BaseModel, ValidationError

from tickd.api import safejson
from tickd.api.problems import ApiError, field_error, from_pydantic
from tickd.scheduler.config.api_tokens import SCOPES, ApiToken

# A route's query and body models; None where it takes no query or no body.
Q = TypeVar("Q", bound=BaseModel | None)
B = TypeVar("B", bound=BaseModel | None)
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Reply:
    body: BaseModel | None
    status: int = 200
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Call(Generic[Q, B]):
    """A request that passed the checks: `query` and `body` are instances of the route's models
    (None where it declares none), so a handler declared `Call[JobListQuery, None]` reads them
    typed."""

    request: web.Request
    actor: str  # the token's name, recorded in the job history
    scope: str
    query: Q
    body: B
    # The only domains the token reaches (api/scoping.py); None: every domain.
    domains: frozenset[str] | None = None

    def path(self, name: str) -> str:
        return self.request.match_info[name]


Handler = Callable[[Call[Q, B]], Awaitable["Reply | web.StreamResponse"]]
# (field, reason) pairs.
FieldErrors = list[tuple[str, str]]
# Given a body as JSON and the top-level fields its model refused, what else is wrong with the
# fields the model accepted, as the route's handler would refuse them.
BodyCheck = Callable[[web.Request, dict[str, Any], frozenset[str]], Awaitable[FieldErrors]]


@dataclass(frozen=True)
class Route(Generic[Q, B]):
    method: str
    path: str
    handler: Handler[Q, B]
    summary: str
    scope: str | None  # None: open to anyone (health, metrics, the document itself)
    response: type[BaseModel] | None
    status: int = 200
    query: type[Q] | None = None
    body: type[B] | None = None
    tag: str = "jobs"
    raw: bool = False  # the handler returns its own web.Response (metrics, docs)
    also: tuple[int, ...] = ()  # other success statuses, with the same response body
    # The route's own checks of what the body's model accepted, when the model refused some of
    # it: the answer names both at once.
    body_check: BodyCheck | None = None
    # The path parameters' model, where a rule holds them (a domain's name): a value that breaks
    # it is a 400 naming `path.<name>` before the handler runs, and the document states the rule.
    path_model: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        # mypy ties a declared model to the handler's Call, but not a model left out (the
        # default None): compare them here, so a route cannot hand its handler a None it does
        # not expect.
        declared = _call_models(self.handler)
        if declared is not None and declared != (self.query, self.body):
            takes = ", ".join(_name(m) for m in declared)
            raise TypeError(
                f"{self.method} {self.path}: {self.handler.__name__} takes Call[{takes}] but the"
                f" route declares query={_name(self.query)}, body={_name(self.body)}"
            )


# A route table holds routes of every query and body type.
Routes = list[Route[Any, Any]]


def _name(model: type | None) -> str:
    return "None" if model is None else model.__name__


def _call_models(handler: Callable[..., object]) -> tuple[type | None, type | None] | None:
    """The (query, body) models of a handler's `Call[Q, B]` parameter, None for each None."""
    hints = typing.get_type_hints(handler)
    call = next(iter(v for k, v in hints.items() if k != "return"), None)
    models = typing.get_args(call)
    if len(models) != 2:
        return None
    query, body = (None if m is type(None) else m for m in models)
    return query, body


TOKENS = web.AppKey("tokens", tuple)
JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Caller:
    actor: str  # the token's name, the actor in the job history
    scope: str
    domains: frozenset[str] | None = None  # the only domains it reaches; None: every one


def authenticate(request: web.Request, scope: str | None) -> Caller:
    """Who presents the token: its name, scope and domains; 401 without a valid token, 403 when
    its scope is too low. With no tokens configured (the API then listens on loopback only)
    every caller is `anonymous` with every right."""
    tokens: tuple[ApiToken, ...] = request.app[TOKENS]
    if not tokens:
        return Caller("anonymous", "admin")
    if scope is None:
        return Caller("anonymous", "none")
    presented = _bearer(request)
    # Compare against every token, in constant time each, so timing tells nothing.
    matches = [t for t in tokens if hmac.compare_digest(t.token.encode(), presented)]
    if not presented or not matches:
        raise ApiError(
            401,
            "Unauthorized",
            "a valid bearer token is required",
            headers={"WWW-Authenticate": 'Bearer realm="tickd"'},
        )
    token = matches[0]
    if SCOPES.index(token.scope) < SCOPES.index(scope):
        raise ApiError(403, "Forbidden", f"this needs a token with the {scope} scope")
    return Caller(token.name, token.scope, token.domains)


def _bearer(request: web.Request) -> bytes:
    header = request.headers.get("Authorization", "")
    kind, _, value = header.partition(" ")
    if kind.lower() != "bearer":
        return b""
    # Header bytes that are not UTF-8 arrive as lone surrogates, which no codec encodes as they
    # are; escaped, they match no token (tokens are printable ASCII) and fail nothing.
    return value.strip().encode("utf-8", "backslashreplace")


def check_content_type(request: web.Request, *, takes_body: bool) -> None:
    """415 for a write whose body is not declared application/json: no HTML form can send that,
    nor a page of another origin without a CORS preflight (which the API never allows). A write
    that takes no body (pause, trigger...) may come without Content-Type, as `curl -X POST`
    sends it, or as application/octet-stream, as aiohttp's client does: no form sends either."""
    if request.method not in WRITES:
        return
    given = request.headers.get("Content-Type")
    accepted = {JSON} if takes_body else {JSON, OCTET_STREAM, None}
    if (given if given is None else media_type(given)) not in accepted:
        reason = "must be application/json"
        raise ApiError(
            415,
            "Unsupported Media Type",
            f"Content-Type: {reason}",
            [("Content-Type", reason)],
            headers={"Accept": JSON},
        )


def media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


# No store keeps a NUL character in a text column (PostgreSQL refuses it outright), and no
# name, id, filter or reason of tickd's means one: a request holding one is refused, naming
# where, before anything reads or writes. A job's params are kept as JSON text, where a NUL is
# escaped like any character, so they may hold one (a webhook's body may).
NUL = "\x00"
NUL_REASON = "holds a NUL character (\\u0000), which this field may not"
KEPT_AS_JSON = frozenset({"params"})


def refuse_nul_in_url(request: web.Request) -> None:
    """400 for a NUL in the path's parameters or in the query's names or values."""
    places = [(f"path.{name}", value) for name, value in request.match_info.items()]
    places += [(f"query.{name}", name + value) for name, value in request.query.items()]
    for field, text in places:
        if NUL in text:
            raise field_error(field.replace(NUL, "\\u0000")[:100], NUL_REASON, 400)


def refuse_nul_in_body(doc: Any, field: str = "") -> None:
    """422 for a NUL in a string or key of a JSON body (params aside), naming its field."""
    if isinstance(doc, str) and NUL in doc:
        raise field_error(field or "body", NUL_REASON)
    if isinstance(doc, dict):
        for key, value in doc.items():
            inner = f"{field}.{key}" if field else key
            if NUL in key:
                raise field_error(inner.replace(NUL, "\\u0000")[:100], NUL_REASON)
            if not (field == "" and key in KEPT_AS_JSON):
                refuse_nul_in_body(value, inner)
    if isinstance(doc, list):
        for index, value in enumerate(doc):
            refuse_nul_in_body(value, f"{field}[{index}]")


def check_path(request: web.Request, model: type[BaseModel] | None) -> None:
    """400 naming each path parameter that breaks its rule (the route's path model)."""
    if model is None:
        return
    try:
        model.model_validate(dict(request.match_info), strict=True)
    except ValidationError as exc:
        raise from_pydantic(exc, "path.", status=400) from None


def parse_query(request: web.Request, model: type[M] | None) -> M | None:
    if model is None:
        if request.query:
            name = next(iter(request.query))
            raise ApiError(
                400,
                "Invalid request",
                f"query.{name}: unknown parameter",
                [(f"query.{name}", "unknown parameter")],
            )
        return None
    repeated = sorted({name for name in request.query if len(request.query.getall(name)) > 1})
    if repeated:
        # Taking the first or the last would silently ignore what the caller also asked for.
        fields = [(f"query.{name}", "given more than once") for name in repeated]
        raise ApiError(400, "Invalid request", f"{fields[0][0]}: given more than once", fields)
    try:
        return model.model_validate(dict(request.query))
    except ValidationError as exc:
        raise from_pydantic(exc, "query.", status=400) from None


async def parse_body(
    request: web.Request, model: type[M] | None, check: BodyCheck | None = None
) -> M | None:
    """The body as the route's model; refused, with every field at fault, `check`'s too."""
    if model is None:
        return None
    raw = await read_body(request)
    if not raw:
        raise ApiError(400, "Invalid request", "a JSON body is required", [("body", "missing")])
    try:
        doc = safejson.loads(
            raw,
            parse_constant=_not_json,
            parse_float=_finite_float,
            parse_int=_int64,
            object_pairs_hook=_unique_keys,
        )
    except DuplicateKey as exc:
        raise field_error(exc.key[:100], "given more than once in one object", 400) from None
    except safejson.TooDeep as exc:
        raise ApiError(400, "Invalid request", f"body: {exc}", [("body", str(exc))]) from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise invalid_json(str(exc)) from None
    refuse_nul_in_body(doc)
    try:
        # Strict, as JSON: a number is not taken for a string, nor `false` or "5" for a number.
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        # What Python's json reads but JSON parsers need not: a lone surrogate (\ud800).
        unreadable = [e["msg"] for e in exc.errors() if e["type"] == "json_invalid"]
        if unreadable:
            raise invalid_json(unreadable[0]) from None
        refusal = from_pydantic(exc, "")
        if check is not None and isinstance(doc, dict):
            refusal = with_errors(refusal, await check(request, doc, refused_fields(exc)))
        raise refusal from None


def refused_fields(exc: ValidationError) -> frozenset[str]:
    """The top-level fields of a body its model refused (`schedule` for `schedule.expr`)."""
    return frozenset(str(error["loc"][0]) for error in exc.errors() if error["loc"])


def with_errors(refusal: ApiError, more: FieldErrors) -> ApiError:
    """A refusal that also names `more` fields at fault."""
    if not more:
        return refusal
    errors = [(e["field"], e["reason"]) for e in refusal.errors] + more
    detail = "; ".join(f"{field}: {reason}" for field, reason in errors)
    return ApiError(refusal.status, refusal.title, detail, errors, refusal.headers)


async def read_body(request: web.Request) -> bytes:
    try:
        return await request.read()  # over client_max_size: 413, before anything is parsed
    except ConnectionError:
        # The client went away before sending the Content-Length it announced: nobody reads
        # the answer, and nothing failed here.
        reason = "ended before its Content-Length"
        raise ApiError(400, "Invalid request", f"body: {reason}", [("body", reason)]) from None


def invalid_json(detail: str) -> ApiError:
    return ApiError(400, "Invalid JSON", detail, [("body", "not valid JSON")])


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f"{key!r} given more than once in one object")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON parsers disagree on which of two equal keys wins; whichever tickd took, the client
    # may have meant the other.
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen


def _not_json(constant: str) -> None:
    # Python's json reads NaN and Infinity, which JSON does not have.
    raise ValueError(f"{constant} is not a JSON value")


def _finite_float(text: str) -> float:
    # 1e400 is valid JSON but no double: Python would read it as infinity and store that.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large (beyond a 64-bit float)")
    return value


def _int64(text: str) -> int:
    # MongoDB stores at most 64-bit integers: a longer one would fail deep in the store.
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"the number {text[:40]} is too large (beyond a 64-bit integer)")
    return value


def wrap(route: Route[Q, B]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        caller = authenticate(request, route.scope)
        check_content_type(request, takes_body=route.body is not None)
        refuse_nul_in_url(request)
        check_path(request, route.path_model)
        query = parse_query(request, _model(route.query))
        body = await parse_body(request, _model(route.body), route.body_check)
        # None exactly where the route declares no model, as its handler's Call says (checked
        # when the route is declared).
        call = Call(
            request, caller.actor, caller.scope, cast(Q, query), cast(B, body), caller.domains
        )
        reply = await route.handler(call)
        if isinstance(reply, web.StreamResponse):
            return reply
        if reply.body is None:
            return web.Response(status=reply.status, headers=reply.headers)
        text = safejson.model_json(reply.body)
        return web.Response(
            status=reply.status, text=text, content_type="application/json", headers=reply.headers
        )

    return handle


def _model(model: object) -> type[BaseModel] | None:
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def add_routes(app: web.Application, routes: Routes) -> None:
    app[TOKENS] = app.get(TOKENS, ())
    for route in routes:
        app.router.add_route(route.method, route.path, wrap(route))
