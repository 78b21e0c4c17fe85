"""`tickd runs ...`: the work running now, and stopping a run, through the API; and
`tickd instances` (also `tickd runs instances`): the instances and how each one is.

The parser's part (add_running_commands) imports nothing but argparse, as the rest of
tickd.cli.parser does: the client loads only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tickd.cli.domains import domain_name

if TYPE_CHECKING:
    from tickd.client import Client

RUNNING_COLUMNS = ("ID", "JOB", "HANDLER", "INSTANCE", "ATTEMPTS", "STARTED", "AGE", "CANCEL")
INSTANCE_COLUMNS = (
    "INSTANCE",
    "VERSION",
    "STARTED",
    "PARTITIONS",
    "IN FLIGHT",
    "RUNNING",
    "LAST BEAT",
)
INSTANCES_HELP = "the instances: version, start, partitions held, runs in flight, last beat"


def add_running_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    runs = commands.add_parser(
        "runs", parents=[common], help="the work running now: list it, cancel a run"
    )
    actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")

    running = actions.add_parser(
        "running", parents=[common], help="the executions running now, the longest first"
    )
    running.add_argument(
        "--domain", type=domain_name, metavar="NAME", help="only those of the jobs of this domain"
    )
    running.set_defaults(act="running:runs_running")

    instances = actions.add_parser("instances", parents=[common], help=INSTANCES_HELP)
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

    # Also a command of its own: ops look at the instances apart from the runs.
    alone = commands.add_parser("instances", parents=[common], help=INSTANCES_HELP)
    alone.set_defaults(act="running:runs_instances")


def runs_running(client: Client, args: argparse.Namespace) -> None:
    from tickd.cli.output import dumped, print_json, print_table, seconds_text, when

    page = dumped(client.running(domain=args.domain))
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
    rows = [
        [
            one["id"],
            one.get("version") or "-",
            when(one.get("started_at")),
            count_text(one.get("partitions")),
            count_text(one.get("runs_in_flight")),
            str(one["running"]),
            when(one["last_beat_at"]),
        ]
        for one in page["items"]
    ]
    print_table(INSTANCE_COLUMNS, rows, empty="No instance has beat.")


def count_text(value: Any) -> str:
    """A count an instance says of itself; "-" from one that has not said."""
    return "-" if value is None else str(value)


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
