"""The client commands beyond jobs, runs and jobs as code: `schedules`, `handlers --api`,
`stats`, `bounces`, `whoami`, `probe`, `openapi`; and VERBS, the table of which command runs
each API operation."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tickd.api.models import PreviewRequest
from tickd.cli.connect import UsageError, given
from tickd.cli.output import (
    Json,
    dumped,
    duration_text,
    print_fields,
    print_fire_times,
    print_json,
    print_table,
    seconds_text,
    when,
)

if TYPE_CHECKING:
    from tickd.client import Client

# Each operation of the API (as /openapi.json lists it) and the command that runs it.
VERBS = {
    "GET /v1/jobs": "tickd jobs list",
    "POST /v1/jobs": "tickd jobs create",
    "GET /v1/jobs/{job_id}": "tickd jobs show",
    "PUT /v1/jobs/{job_id}": "tickd jobs replace",
    "PATCH /v1/jobs/{job_id}": "tickd jobs patch",
    "DELETE /v1/jobs/{job_id}": "tickd jobs delete",
    "POST /v1/jobs/{job_id}/pause": "tickd jobs pause",
    "POST /v1/jobs/{job_id}/resume": "tickd jobs resume",
    "POST /v1/jobs/{job_id}/trigger": "tickd jobs trigger",
    "POST /v1/jobs/{job_id}/backfill": "tickd jobs backfill",
    "GET /v1/jobs/{job_id}/preview": "tickd jobs preview",
    "GET /v1/jobs/{job_id}/history": "tickd jobs history",
    "GET /v1/jobs/{job_id}/executions": "tickd jobs executions",
    "GET /v1/executions": "tickd executions list",
    "GET /v1/executions/{execution_id}": "tickd executions show",
    "POST /v1/executions/{execution_id}/retry": "tickd executions retry",
    "GET /v1/running": "tickd runs running",
    "POST /v1/executions/{execution_id}/cancel": "tickd runs cancel",
    "GET /v1/instances": "tickd instances",
    "POST /v1/schedules/preview": "tickd schedules preview",
    "GET /v1/handlers": "tickd handlers --api",
    "GET /v1/bounces": "tickd bounces list",
    "DELETE /v1/bounces/{address}": "tickd bounces clear",
    "GET /healthz": "tickd probe alive",
    "GET /readyz": "tickd probe ready",
    "GET /openapi.json": "tickd openapi",
    "GET /v1/session": "tickd whoami",
    "GET /v1/stats": "tickd stats",
    "GET /v1/dead-letters": "tickd dead-letters list",
    "GET /v1/dead-letters/groups": "tickd dead-letters list --group",
    "POST /v1/dead-letters/discard": "tickd dead-letters discard",
    "POST /v1/dead-letters/redrive": "tickd dead-letters redrive",
    "POST /v1/dead-letters/{execution_id}/redrive": "tickd dead-letters redrive",
    "POST /v1/dead-letters/{execution_id}/discard": "tickd dead-letters discard",
    "GET /v1/domains": "tickd domains list",
    "GET /v1/domains/{name}": "tickd domains show",
    "PUT /v1/domains/{name}": "tickd domains set",
    "DELETE /v1/domains/{name}": "tickd domains delete",
}
# Operations that are not for a shell, and why.
NOT_VERBS = {
    "GET /metrics": "Prometheus text, for a scraper",
    "GET /docs": "an HTML page, for a browser",
}


# -- the rest ------------------------------------------------------------------------------------


def schedules_preview(client: Client, args: argparse.Namespace) -> None:
    if args.timezone is not None and args.cron is None:
        raise UsageError("--timezone goes with --cron")
    if args.cron is not None:
        schedule: Json = given(kind="cron", expr=args.cron, timezone=args.timezone)
    elif args.every is not None:
        schedule = {"kind": "interval", "every_seconds": args.every}
    else:
        schedule = {"kind": "once", "at": args.at}
    request = given(schedule=schedule, name=args.name, count=args.count, after=args.after)
    preview = client.preview_schedule(PreviewRequest.model_validate(request))
    print_fire_times(dumped(preview), args)


def list_handlers(client: Client, args: argparse.Namespace) -> None:
    handlers = dumped(client.list_handlers())
    if args.json:
        print_json(handlers)
        return
    rows = [
        [
            str(h.get("name")),
            str(h.get("origin")),
            ", ".join(h.get("secret_params") or []) or "-",
            str(h.get("max_concurrency") or "-"),
        ]
        for h in handlers.get("items") or []
    ]
    print_table(("NAME", "ORIGIN", "SECRETS", "CONCURRENCY"), rows, empty="No handlers.")


def show_stats(client: Client, args: argparse.Namespace) -> None:
    stats = dumped(client.get_stats(**given(window=args.window)))
    if args.json:
        print_json(stats)
        return
    totals = stats.get("totals") or {}
    attention = stats.get("attention") or {}
    print_fields(
        [
            ("window", seconds_text(stats.get("window_seconds"))),
            ("executions", ", ".join(f"{k} {v}" for k, v in totals.items()) or "none"),
            ("fire lag p50", duration_text(stats.get("lag_p50_seconds"))),
            ("fire lag p99", duration_text(stats.get("lag_p99_seconds"))),
            ("due backlog", str(stats.get("due_backlog"))),
            ("busy workers", f"{stats.get('busy_workers', '-')} of {stats.get('workers')}"),
            ("dead letters", str(stats.get("open_dead_letters"))),
            ("failing jobs", str(attention.get("failing_total", 0))),
            ("late jobs", str(attention.get("late_total", 0))),
        ]
    )


def bounces_list(client: Client, args: argparse.Namespace) -> None:
    bounces = dumped(client.list_bounces())
    if args.json:
        print_json(bounces)
        return
    rows = [
        [
            str(b.get("address")),
            str(b.get("count")),
            "yes" if b.get("blocked") else "no",
            when(b.get("last_at")),
            str(b.get("last_error")),
        ]
        for b in bounces.get("items") or []
    ]
    print_table(("ADDRESS", "COUNT", "BLOCKED", "LAST", "LAST ERROR"), rows, empty="No bounces.")


def bounces_clear(client: Client, args: argparse.Namespace) -> None:
    client.clear_bounces(args.address)
    if not args.json:
        print(f"Cleared the bounces of {args.address}.")


def show_session(client: Client, args: argparse.Namespace) -> None:
    session = client.session()
    if args.json:
        print_json(dumped(session))
    else:
        print(f"{session.actor} ({session.scope})")


def probe_alive(client: Client, args: argparse.Namespace) -> None:
    health = client.health()
    if args.json:
        print_json(dumped(health))
    else:
        print(health.status)


def probe_ready(client: Client, args: argparse.Namespace) -> int:
    """Exit 0 when ready; 1 with the reasons (the API answers them with a 503) when not."""
    readiness = client.readiness()
    if args.json:
        print_json(dumped(readiness))
    elif readiness.ready:
        print("ready")
    else:
        print("tickd: not ready", file=sys.stderr)
        for part, reason in readiness.problems.items():
            print(f"  {part}: {reason}", file=sys.stderr)
    return 0 if readiness.ready else 1


def show_openapi(client: Client, args: argparse.Namespace) -> None:
    print_json(client.openapi())
