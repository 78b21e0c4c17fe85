"""`tickd domains ...`: the domains' settings through the API (list, show, set, delete), and
`domain_name`, the check of a domain named on the command line (here and by `--domain`).

The parser's part (add_domain_commands) imports nothing but argparse and the domain rule, as the
rest of tickd.cli.parser does: the client loads only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tickd.scheduler.domains import DOMAIN_RULE, is_domain_name

if TYPE_CHECKING:
    from tickd.cli.output import Json
    from tickd.client import Client

DOMAIN_COLUMNS = (
    "DOMAIN", "JOBS", "WEIGHT", "MAX RUNNING", "MAX JOBS", "LAG OBJECTIVE", "SETTINGS",
)  # fmt: skip
# Each flag of `domains set` and the setting it gives.
SETTING_FLAGS = (
    ("weight", "weight"),
    ("max_running", "max_running"),
    ("max_jobs", "max_jobs"),
    ("lag_objective", "lag_objective_seconds"),
)
APPLIED = "the dispatchers read it again within 10 seconds"


def domain_name(text: str) -> str:
    """A domain's name given on the line, checked by the rule the API applies: a mistake is a
    usage error before anything is sent."""
    if not is_domain_name(text):
        raise argparse.ArgumentTypeError(f"{text!r}: a domain is {DOMAIN_RULE}")
    return text


def add_domain_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    domains = commands.add_parser(
        "domains",
        parents=[common],
        help="the domains' settings, through the API: list, show, set, delete",
    )
    actions = domains.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list",
        parents=[common],
        help="every domain jobs are in or settings are stored for: its settings and jobs",
    )
    listing.set_defaults(act="domains:domains_list")

    show = actions.add_parser(
        "show", parents=[common], help="a domain's settings (the defaults if none are stored)"
    )
    show.add_argument("name", metavar="NAME", type=domain_name)
    show.set_defaults(act="domains:domains_show")

    setting = actions.add_parser(
        "set",
        parents=[common],
        help="store a domain's settings, whole: a setting not given takes its default",
        description="Stores the domain's whole record, as PUT /v1/domains/NAME does: a setting "
        "not given takes its default (weight 1, no cap, no objective), so give every setting "
        "the domain is to keep.",
    )
    setting.add_argument("name", metavar="NAME", type=domain_name)
    setting.add_argument(
        "--weight",
        type=int,
        metavar="N",
        help=f"its fair share of runs under saturation, 1 to 1000 (default 1); {APPLIED}",
    )
    setting.add_argument(
        "--max-running",
        type=int,
        metavar="N",
        help=f"at most N of its runs in flight, 1 to 100000 (default: no cap); {APPLIED}",
    )
    setting.add_argument(
        "--max-jobs",
        type=int,
        metavar="N",
        help="at most N jobs in it, 1 to 10000000 (default: no cap); a job write over it is "
        "refused",
    )
    setting.add_argument(
        "--lag-objective",
        type=float,
        metavar="SECONDS",
        help="its p99 fire-lag objective, for alerts: over 0, up to 86400 (default: none)",
    )
    setting.set_defaults(act="domains:domains_set")

    delete = actions.add_parser(
        "delete",
        parents=[common],
        help="remove a domain's settings: it has the defaults again, its jobs stay",
    )
    delete.add_argument("name", metavar="NAME", type=domain_name)
    delete.set_defaults(act="domains:domains_delete")


def domains_list(client: Client, args: argparse.Namespace) -> None:
    from tickd.cli.output import dumped, print_json, print_table

    page = dumped(client.list_domains())
    if args.json:
        print_json(page)
        return
    rows = [domain_row(domain) for domain in page["items"]]
    print_table(DOMAIN_COLUMNS, rows, empty="No job is in a domain and no settings are stored.")


def domains_show(client: Client, args: argparse.Namespace) -> None:
    from tickd.cli.output import dumped

    show_domain(dumped(client.get_domain(args.name)), args)


def domains_set(client: Client, args: argparse.Namespace) -> None:
    from tickd.cli.output import dumped

    settings = {
        field: value
        for flag, field in SETTING_FLAGS
        if (value := getattr(args, flag)) is not None  # not given: the API's default
    }
    show_domain(dumped(client.put_domain(args.name, **settings)), args)


def domains_delete(client: Client, args: argparse.Namespace) -> None:
    client.delete_domain(args.name)
    if not args.json:  # 204: the API sends no JSON to print
        print(f"Removed the settings of domain {args.name}: it has the defaults again.")


# -- views ---------------------------------------------------------------------------------------


def show_domain(domain: Json, args: argparse.Namespace) -> None:
    from tickd.cli.output import print_fields, print_json, when

    if args.json:
        print_json(domain)
        return
    stored = when(domain.get("updated_at")) if domain.get("has_record") else "none: the defaults"
    print_fields(
        [
            ("name", str(domain.get("name"))),
            ("jobs", str(domain.get("job_count"))),
            ("weight", str(domain.get("weight"))),
            ("max_running", cap_text(domain.get("max_running"))),
            ("max_jobs", cap_text(domain.get("max_jobs"))),
            ("lag_objective", objective_text(domain.get("lag_objective_seconds"))),
            ("settings", stored),
        ]
    )


def domain_row(domain: Json) -> list[str]:
    return [
        str(domain.get("name")),
        str(domain.get("job_count")),
        str(domain.get("weight")),
        cap_text(domain.get("max_running")),
        cap_text(domain.get("max_jobs")),
        objective_text(domain.get("lag_objective_seconds")),
        "stored" if domain.get("has_record") else "defaults",
    ]


def cap_text(value: Any) -> str:
    return "no cap" if value is None else str(value)


def objective_text(value: Any) -> str:
    from tickd.cli.output import seconds_text

    return "none" if value is None else seconds_text(value)
