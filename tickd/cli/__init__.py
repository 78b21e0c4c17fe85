"""`tickd`: the command line.

`run`, `api` and `handlers` read the settings (`--config`, TICKD_* variables); the other commands
are clients of a running API and read neither settings nor handlers. parser.py defines every
command and option; the client commands talk to the API through tickd.client, as any
application does (connect.py: where, and how a failure is printed), one module of actions per
family of commands: jobs.py, runs.py (executions, dead letters), domains.py (the domains'
settings), apply.py (jobs as code), reads.py (the rest); only a client command loads them.
handlers.py: `tickd handlers` (and `handlers run`); completion.py: `tickd completion`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading

from tickd.cli.completion import run_completion
from tickd.cli.parser import build_parser
from tickd.scheduler.config.settings import ConfigError, Settings, load_settings
from tickd.scheduler.logs import configure_logging


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "completion":
        return run_completion(parser, args)
    if args.command == "init":
        from tickd.cli.init import write_example_config

        return write_example_config(args.path)
    if args.command == "handlers" and args.api:
        args.act = "reads:list_handlers"
    if hasattr(args, "act"):
        return _run_client(args)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 2
    configure_logging(level=settings.log_level, json_lines=settings.log_format == "json")
    if args.command == "handlers":
        from tickd.cli.handlers import handlers_command

        return handlers_command(args, settings)
    return _run(settings, dispatcher=args.command == "run")


def _run_client(args: argparse.Namespace) -> int:
    # The API's client, httpx and the API's models only for the commands that talk to the API.
    from tickd.cli.connect import run_client
    from tickd.cli.output import encodable_output

    encodable_output()
    return run_client(args)


def _run(settings: Settings, *, dispatcher: bool) -> int:
    # The daemon's imports (aiohttp, the backends' drivers) only for the commands that need them.
    from tickd.app import check_against_handlers, load_registry
    from tickd.daemon import daemon_loop, end_past_leftover_threads, run_daemon, stop_on_signals
    from tickd.scheduler.plugin.registry import RegistryError
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

    threads_before = set(threading.enumerate())
    try:
        with asyncio.Runner(loop_factory=daemon_loop) as runner:
            runner.run(daemon())
    except (ConfigError, SeedError) as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 2
    end_past_leftover_threads(threads_before, code=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
