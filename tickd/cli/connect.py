"""How a client command reaches the API: the action the command names, the one typed client
(tickd.client.Client) made from the options that say where (--url, --token: tickd.cli.parser),
and each way a call can fail as one line on stderr with the exit status scripts rely on.

A mistake on the command line (a malformed URL too) exits with 2; an error of the API (problem
details, printed once naming each field), a server that cannot be reached, or one that answers
but not as the API does, with 1; never a traceback. The URL comes from --url or TICKD_URL, the
token from --token or TICKD_TOKEN; the token is never printed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from tickd.api.models import JobOut, Problem
from tickd.cli.output import UnknownZone, plain_reason, report_problem, show_times_in
from tickd.cli.parser import DEFAULT_URL, TOKEN_ENV, URL_ENV
from tickd.client import (
    ApiError,
    BadUrl,
    Client,
    ClientError,
    InvalidRequest,
    NotFound,
    TransportFailed,
    shown_url,
)

# The tags pydantic puts in the location of a discriminated union's field (`schedule.cron.expr`).
UNION_TAGS = ("cron", "interval", "once")

Action = Callable[[Client, argparse.Namespace], int | None]


class UsageError(Exception):
    """A mistake on the command line, found after parsing (a file that is not JSON...)."""


def run_client(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    """Run a parsed client command; the exit status (an action may return its own)."""
    env = os.environ if environ is None else environ
    url = args.url or env.get(URL_ENV) or DEFAULT_URL
    act = action_named(args.act)
    try:
        show_times_in(getattr(args, "tz", None))
    except UnknownZone as exc:
        return report_failure(UsageError(str(exc)), args, shown_url(url))
    try:
        with Client(url, token=args.token or env.get(TOKEN_ENV) or None) as client:
            return act(client, args) or 0
    except (UsageError, ClientError, ValidationError) as exc:
        return report_failure(exc, args, shown_url(url))
    except BrokenPipeError:  # `tickd jobs list | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130


def action_named(reference: str) -> Action:
    """The function a command names, "module:function" in tickd.cli (tickd.cli.parser)."""
    module, _, name = reference.partition(":")
    act: Action = getattr(importlib.import_module(f"tickd.cli.{module}"), name)
    return act


def report_failure(
    exc: UsageError | ClientError | ValidationError, args: argparse.Namespace, url: str
) -> int:
    """Why the command failed, on stderr (the API's problem details as `report_problem` prints
    them, anything else in one line); the exit status."""
    if isinstance(exc, UsageError | BadUrl):
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        hint = f" (set --url or {URL_ENV}, the token with --token or {TOKEN_ENV})"
        shown = f"{exc}{hint}" if isinstance(exc, BadUrl) else str(exc)
        print(f"tickd {command}: error: {shown}", file=sys.stderr)
        return 2
    if isinstance(exc, ValidationError):
        exc = refused_here(exc)
    where = f" (set --url or {URL_ENV})"
    if isinstance(exc, ApiError):
        report_problem(exc, as_json=args.json)
    elif isinstance(exc, TransportFailed):
        print(f"tickd: cannot reach the tickd API at {url}: {exc}{where}", file=sys.stderr)
    else:  # NotTickd
        print(f"tickd: {exc}{where}", file=sys.stderr)
    return 1


def refused_here(exc: ValidationError) -> InvalidRequest:
    """A field the API's own model refused before anything was sent, reported as the API reports
    it (422, each field named as the API names it): the same words either way."""
    errors = [
        {"field": _field(error["loc"]), "reason": plain_reason(error["msg"])}
        for error in exc.errors(include_url=False, include_input=False)
    ]
    detail = "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
    return InvalidRequest(
        Problem(title="Invalid request", status=422, detail=detail, errors=errors)
    )


def _field(location: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in location if part not in UNION_TAGS) or "body"


def find_job(client: Client, ref: str) -> JobOut:
    """A job by id or, failing that, by name: ops think in names."""
    try:
        return client.get_job(ref)
    except NotFound:
        named = [j for j in client.list_jobs(name_prefix=ref, limit=1).items if j.name == ref]
        if not named:
            missing = Problem(
                title="Not Found", status=404, detail=f"no job with id or name {ref!r}"
            )
            raise NotFound(missing) from None
        return named[0]


def given(**fields: Any) -> dict[str, Any]:
    """The options given (not None): a query model's defaults stand for the others."""
    return {name: value for name, value in fields.items() if value is not None}
