"""`tickd runs ...`: the work running now, and stopping a run, through the API.

The parser's part (add_running_commands) imports nothing but argparse, as the rest of
tickd.cli.parser does: the client loads only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tickd.client import Client

RUNNING_COLUMNS = ("ID", "JOB", "HANDLER", "INSTANCE", "ATTEMPTS", "STARTED", "AGE", "CANCEL")


def add_running_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    runs = commands.add_parser(
        "runs", parents=[common], help="the work running now: list it, cancel a run"
    )
    actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")

    running = actions.add_parser(
        "running", parents=[common], help="the executions running now, the longest first"
    )
    running.set_defaults(act="running:runs_running")

    instances = actions.add_parser(
        "instances", parents=[common], help="the instances, their last beat and runs held"
    )
    instances.set_defaults(act="running:runs_instances")

    cancel = actions.add_parser(
        "cancel",
        parents=[common],
        help="stop a running or queued execution",
        description="An async handler is cancelled within a tick; a sync handler's run is "
        "recorded cancelled when it returns or reaches its deadline. Not retried.",
    )
    cancel.add_argument("execution", metavar="ID")
    cancel.add_argument("--reason", default="", metavar="TEXT", help="kept with the record")
    cancel.set_defaults(act="running:runs_cancel")


def runs_running(client: Client, args: argparse.Namespace) -> None:
    from tickd.cli.output import dumped, print_json, print_table, seconds_text, when

    page = dumped(client.running())
    if args.json:
        print_json(page)
        return
    rows = [
        [
            run["id"],
            run["job_name"],
            run["handler"],
            run.get("instance") or "-",
            str(run["attempts"]),
            when(run.get("started_at") or run["scheduled_at"]),
            seconds_text(run["age_seconds"]),
            f"asked by {run['cancel_requested_by']}" if run.get("cancel_requested_by") else "",
        ]
        for run in page["items"]
    ]
    print_table(RUNNING_COLUMNS, rows, empty="Nothing is running.")


def runs_instances(client: Client, args: argparse.Namespace) -> None:
    from tickd.cli.output import dumped, print_json, print_table, when

    page = dumped(client.instances())
    if args.json:
        print_json(page)
        return
    rows = [[i["id"], when(i["last_beat_at"]), str(i["running"])] for i in page["items"]]
    print_table(("INSTANCE", "LAST BEAT", "RUNNING"), rows, empty="No instance has beat.")


def runs_cancel(client: Client, args: argparse.Namespace) -> None:
    from tickd.cli.output import dumped, print_json

    answer = dumped(client.cancel_execution(args.execution, reason=args.reason))
    if args.json:
        print_json(answer)
        return
    print(
        f"Asked execution {args.execution} to stop (as {answer['requested_by']}): "
        f"{answer['interrupts']}."
    )
