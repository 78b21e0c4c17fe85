"""`tickd`: the command line.

`run`, `api` and `handlers` read the settings (`--config`, TICKD_* variables); the other commands
are clients of a running API and read neither settings nor handlers. They talk to it through
tickd.client, as any application does (connect.py: where, and how a failure is printed), one
module per family of commands: jobs.py, runs.py (executions, dead letters), apply.py (jobs as
code), reads.py (the rest), completion.py.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from importlib.metadata import version

from tickd.cli.apply import add_apply_commands
from tickd.cli.completion import add_completion_command, run_completion
from tickd.cli.connect import client_options, run_client
from tickd.cli.jobs import add_job_commands
from tickd.cli.reads import add_read_commands, list_handlers
from tickd.cli.runs import add_dead_letter_commands, add_run_commands
from tickd.scheduler.config import ConfigError, Settings, load_settings
from tickd.scheduler.logs import configure_logging


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "completion":
        return run_completion(parser, args)
    if args.command == "handlers" and args.api:
        args.act = list_handlers
    if hasattr(args, "act"):
        return run_client(args)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 2
    configure_logging(level=settings.log_level, json_lines=settings.log_format == "json")
    if args.command == "handlers":
        return _list_handlers()
    return _run(settings, dispatcher=args.command == "run")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tickd",
        description="A job-scheduling daemon, and the client of its API. --config, --url, "
        "--token and --json go anywhere on the line.",
        parents=[client_options(anywhere=False)],
    )
    parser.add_argument("--version", action="version", version=f"tickd {version('tickd')}")
    common = client_options(anywhere=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "run", parents=[common], help="run the daemon and its API until SIGTERM or Ctrl-C"
    )
    commands.add_parser(
        "api", parents=[common], help="serve the API alone (no dispatcher) on the same store"
    )
    handlers = commands.add_parser(
        "handlers",
        parents=[common],
        help="list the registered handlers and where they come from (--api: the API's)",
    )
    handlers.add_argument(
        "--api", action="store_true", help="those of the API at --url, not of this install"
    )
    add_job_commands(commands, common)
    add_run_commands(commands, common)
    add_dead_letter_commands(commands, common)
    add_apply_commands(commands, common)
    add_read_commands(commands, common)
    add_completion_command(commands)
    return parser


def _run(settings: Settings, *, dispatcher: bool) -> int:
    # The daemon's imports (aiohttp, the backends' drivers) only for the commands that need them.
    from tickd.app import check_against_handlers, load_registry
    from tickd.daemon import run_daemon, stop_on_signals
    from tickd.scheduler.registry import RegistryError
    from tickd.seed.jobs import SeedError

    try:
        registry = load_registry()
        check_against_handlers(settings, registry)
    except (RegistryError, ConfigError) as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 2

    async def daemon() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop)
        await run_daemon(settings, stop, registry, dispatcher=dispatcher)

    try:
        asyncio.run(daemon())
    except (ConfigError, SeedError) as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 2
    return 0


def _list_handlers() -> int:
    from tickd.app import load_registry
    from tickd.scheduler.registry import RegistryError

    try:
        registry = load_registry()
    except RegistryError as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 2
    for registered in registry:
        print(f"{registered.name}\t{registered.origin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
