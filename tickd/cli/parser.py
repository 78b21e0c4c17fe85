"""Every command and option of `tickd`: the parser, and nothing that it runs.

A client command names its action "module:function", a function of a module of tickd.cli
("jobs:jobs_list"), which tickd.cli.connect loads when the command runs. Only then do the API's
client, httpx and the API's models load: `tickd run`, `--help`, `--version` and `completion`
start without them.
"""

from __future__ import annotations

import argparse
from importlib.metadata import version
from typing import Any, TypeAlias

from tickd.cli.domains import add_domain_commands, domain_name
from tickd.cli.running import add_running_commands

# --domain of the lists of runs.
OF_DOMAIN = "only those of the jobs of this domain"

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "TICKD_URL"
TOKEN_ENV = "TICKD_TOKEN"
STATUSES = ("running", "success", "failed", "timeout", "abandoned", "skipped", "cancelled")
DEAD_LETTER_STATES = ("open", "redriving", "redriven", "discarded")
PRIORITIES = ("critical", "high", "normal", "low")
MISFIRE_POLICIES = ("coalesce", "skip", "run_all")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tickd",
        description="A job-scheduling daemon, and the client of its API. --config, --url, "
        "--token, --json and --tz go anywhere on the line.",
        parents=[client_options(anywhere=False)],
    )
    parser.add_argument("--version", action="version", version=f"tickd {version('tickd')}")
    common = client_options(anywhere=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_daemon_commands(commands, common)
    add_job_commands(commands, common)
    add_run_commands(commands, common)
    add_dead_letter_commands(commands, common)
    add_running_commands(commands, common)
    add_domain_commands(commands, common)
    add_apply_commands(commands, common)
    add_read_commands(commands, common)
    add_completion_command(commands)
    return parser


def client_options(*, anywhere: bool) -> argparse.ArgumentParser:
    """--url, --token, --json and --config: on `tickd` itself, and (`anywhere`) again on every
    command below it, with no default there, so that one given before the command is not reset
    by the command's parser."""
    options = argparse.ArgumentParser(add_help=False)
    unset: dict[str, Any] = {"default": argparse.SUPPRESS} if anywhere else {}
    options.add_argument(
        "--url", help=f"the API's base URL (default: ${URL_ENV}, or {DEFAULT_URL})", **unset
    )
    options.add_argument(
        "--token",
        help=f"a bearer token of the API (default: ${TOKEN_ENV}, better: a flag shows in ps)",
        **unset,
    )
    options.add_argument(
        "--json", action="store_true", help="print the API's JSON instead of a table", **unset
    )
    options.add_argument(
        "--config",
        help="a TOML settings file (TICKD_* variables override it); read by run, api, handlers",
        **unset,
    )
    options.add_argument(
        "--tz",
        metavar="ZONE",
        help="print times in this zone: an IANA name (Europe/Paris) or local (default: UTC)",
        **unset,
    )
    return options


def add_daemon_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    """`run`, `api` and `handlers`: the commands that read the settings, not the API; `init`,
    which writes a first settings file."""
    init = commands.add_parser(
        "init", help="write the example configuration to PATH (never over a file that is there)"
    )
    init.add_argument(
        "path", metavar="PATH", nargs="?", default="tickd.toml", help="default: ./tickd.toml"
    )
    commands.add_parser(
        "run", parents=[common], help="run the daemon and its API until SIGTERM or Ctrl-C"
    )
    commands.add_parser(
        "api", parents=[common], help="serve the API alone (no dispatcher) on the same store"
    )
    handlers = commands.add_parser(
        "handlers",
        parents=[common],
        help="list the registered handlers and where they come from (--api: the API's); "
        "run one once, here",
    )
    handlers.add_argument(
        "--api", action="store_true", help="those of the API at --url, not of this install"
    )
    add_handler_run_command(handlers, common)


def add_handler_run_command(handlers: argparse.ArgumentParser, common: Any) -> None:
    """`tickd handlers run NAME`: one run of an installed handler, here, without a daemon."""
    actions = handlers.add_subparsers(dest="action", metavar="ACTION")
    run = actions.add_parser(
        "run",
        parents=[common],
        help="run an installed handler once, here, and print its result, logs and duration",
        description="Runs the handler as the daemon would (its params checked against its "
        "schema first, its result checked as an execution records it) on throwaway backends, "
        "without a daemon. Exit codes: 0 the run succeeded; 1 it failed (its error printed); "
        "2 a usage error or params the handler refuses (the param named).",
    )
    run.add_argument("name", metavar="NAME", help="the handler's name (`tickd handlers`)")
    run.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a param, repeatable; VALUE is read as JSON when it is JSON (0.5, true, [1,2], "
        '"007"), else taken as a string',
    )
    run.add_argument(
        "--params-json", metavar="JSON", help="the params as a JSON object (--param adds to it)"
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="cut the run off after this long (default 60)",
    )


def add_job_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add `tickd jobs` to the `tickd` sub-commands; `common` holds the options every command
    takes."""
    jobs = commands.add_parser(
        "jobs", parents=[common], help="jobs, through the API: list, show, create..."
    )
    actions = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="list jobs, by name")
    listing.add_argument("--handler", help="only the jobs of this handler")
    listing.add_argument(
        "--domain", type=domain_name, metavar="NAME", help="only the jobs of this domain"
    )
    state = listing.add_mutually_exclusive_group()
    state.add_argument(
        "--enabled", dest="enabled", action="store_const", const=True, help="only enabled jobs"
    )
    state.add_argument(
        "--disabled", dest="enabled", action="store_const", const=False, help="only paused jobs"
    )
    listing.add_argument("--prefix", help="only the jobs whose name starts with this")
    listing.add_argument("--limit", type=int, help="jobs per page (API default 50, at most 500)")
    listing.add_argument("--all", action="store_true", help="follow the pages to the last")
    listing.set_defaults(act="jobs:jobs_list")

    show = actions.add_parser("show", parents=[common], help="one job in full")
    show.add_argument("job", metavar="JOB", help="the job's id or name")
    show.set_defaults(act="jobs:jobs_show")

    create = actions.add_parser(
        "create",
        parents=[common],
        help="create a job from a JSON file, or from flags for the common case",
        description="The job as JSON (-f), or from flags; flags given with -f override the "
        "file's fields.",
    )
    create.add_argument(
        "-f", "--file", help="the job as JSON, as POST /v1/jobs takes it; - reads stdin"
    )
    add_job_flags(create)
    create.set_defaults(act="jobs:jobs_create")

    replace = actions.add_parser(
        "replace",
        parents=[common],
        help="replace a job's whole definition (from -f and flags, as create takes them)",
    )
    replace.add_argument("job", metavar="JOB", help="the job's id or name")
    replace.add_argument("-f", "--file", help="the job as JSON; - reads stdin")
    add_job_flags(replace)
    replace.set_defaults(act="jobs:jobs_replace")

    patch = actions.add_parser(
        "patch",
        parents=[common],
        help="change some fields of a job: only those given (--param adds to the params)",
    )
    patch.add_argument("job", metavar="JOB", help="the job's id or name")
    add_job_flags(patch)
    patch.add_argument("--no-redrive", action="store_true", help="remove the re-drive policy")
    patch.set_defaults(act="jobs:jobs_patch")

    preview = actions.add_parser("preview", parents=[common], help="a job's next fire times")
    preview.add_argument("job", metavar="JOB", help="the job's id or name")
    preview.add_argument("--count", type=int, help="how many (default 10, at most 100)")
    preview.add_argument("--after", metavar="ISO", help="from this time on (default: now)")
    preview.set_defaults(act="jobs:jobs_preview")

    backfill = actions.add_parser(
        "backfill",
        parents=[common],
        help="run a job's past occurrences between two times; a dry run unless --run",
    )
    backfill.add_argument("job", metavar="JOB", help="the job's id or name")
    backfill.add_argument("--start", metavar="ISO", required=True)
    backfill.add_argument("--end", metavar="ISO", required=True)
    backfill.add_argument(
        "--run", action="store_true", help="queue the runs (without it: what would run)"
    )
    backfill.add_argument("--per-second", type=float, help="runs a second (default 1)")
    backfill.set_defaults(act="jobs:jobs_backfill")

    history = actions.add_parser(
        "history", parents=[common], help="who changed a job, when, and what"
    )
    history.add_argument("job", metavar="JOB", help="the job's id or name")
    history.add_argument("--limit", type=int, help="how many changes (default 50)")
    history.set_defaults(act="jobs:jobs_history")

    job_runs = actions.add_parser(
        "executions", parents=[common], help="a job's executions, newest first"
    )
    job_runs.add_argument("job", metavar="JOB", help="the job's id or name")
    job_runs.add_argument("--status", choices=STATUSES)
    job_runs.add_argument("--limit", type=int, help="how many (API default 50, at most 500)")
    job_runs.set_defaults(act="jobs:jobs_executions")

    for name, act, what in [
        ("pause", "jobs:jobs_pause", "pause a job: it stops firing"),
        ("resume", "jobs:jobs_resume", "resume a paused job, from now"),
        ("trigger", "jobs:jobs_trigger", "run a job now, once, without moving its schedule"),
        ("delete", "jobs:jobs_delete", "delete a job (its history stays)"),
    ]:
        one = actions.add_parser(name, parents=[common], help=what)
        one.add_argument("job", metavar="JOB", help="the job's id or name")
        one.set_defaults(act=act)


def add_run_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    executions = commands.add_parser(
        "executions", parents=[common], help="executions, through the API: list, show, retry..."
    )
    actions = executions.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="executions, newest first")
    listing.add_argument("--job", metavar="JOB", help="only this job's (id or name)")
    listing.add_argument("--status", choices=STATUSES)
    listing.add_argument("--handler", help="only the executions of this handler")
    listing.add_argument("--domain", type=domain_name, metavar="NAME", help=OF_DOMAIN)
    listing.add_argument("--limit", type=int, help="how many (API default 50, at most 500)")
    listing.set_defaults(act="runs:executions_list")

    show = actions.add_parser("show", parents=[common], help="one execution in full")
    show.add_argument("execution", metavar="ID")
    show.set_defaults(act="runs:executions_show")

    follow = actions.add_parser(
        "follow",
        parents=[common],
        help="print executions as they end, until Ctrl-C",
        description="Polls the API every --interval seconds (0.5 to 60) and prints each "
        "execution that ended since, once.",
    )
    follow.add_argument("--job", metavar="JOB", help="only this job's (id or name)")
    follow.add_argument("--status", choices=STATUSES)
    follow.add_argument("--handler", help="only the executions of this handler")
    follow.add_argument("--domain", type=domain_name, metavar="NAME", help=OF_DOMAIN)
    follow.add_argument("--interval", type=float, default=2.0, metavar="SECONDS")
    follow.add_argument("--recent", action="store_true", help="print those that ended lately first")
    follow.set_defaults(act="runs:executions_follow")

    retry = actions.add_parser(
        "retry", parents=[common], help="run a failed, timed-out or abandoned execution again"
    )
    retry.add_argument("execution", metavar="ID")
    retry.set_defaults(act="runs:executions_retry")


def add_dead_letter_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    dead = commands.add_parser(
        "dead-letters",
        parents=[common],
        help="runs that failed for good, through the API: list, redrive, discard",
    )
    actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--job", metavar="JOB", help="only this job's (id or name)")
    filters.add_argument("--handler", help="only those of this handler")
    filters.add_argument("--domain", type=domain_name, metavar="NAME", help=OF_DOMAIN)
    filters.add_argument("--since", metavar="ISO", help="occurrences scheduled from then on")
    filters.add_argument("--until", metavar="ISO", help="occurrences scheduled before then")
    acting = argparse.ArgumentParser(add_help=False)
    acting.add_argument(
        "--error-type", metavar="TYPE", help="only those whose error is of this type"
    )
    acting.add_argument("--limit", type=int, help="how many at most (default and most: 100)")

    listing = actions.add_parser(
        "list",
        parents=[common, filters],
        help="dead letters, newest first (open ones); --group: identical errors, counted",
    )
    listing.add_argument("--state", choices=DEAD_LETTER_STATES, help="default: open")
    listing.add_argument("--limit", type=int, help="how many at most")
    listing.add_argument(
        "--group",
        action="store_true",
        help="identical errors (same job, error type and first line) with their counts, the "
        "largest first, of the newest 2000",
    )
    listing.set_defaults(act="runs:dead_letters_list")

    redrive = actions.add_parser(
        "redrive",
        parents=[common, filters, acting],
        help="run a dead letter's occurrence again; without ID, every open one the filters match",
    )
    redrive.add_argument("execution", metavar="ID", nargs="?")
    redrive.set_defaults(act="runs:dead_letters_redrive")

    discard = actions.add_parser(
        "discard",
        parents=[common, filters, acting],
        help="give up on dead letters: those named, or with --all every open one the filters match",
        description="Discards the dead letters named by ID, or with --all the newest open ones "
        "the filters match (at most --limit, 100 by default: run it again while it says more "
        "match). A discarded dead letter is no longer counted as unhandled.",
    )
    discard.add_argument("execution", metavar="ID", nargs="*")
    discard.add_argument(
        "--all", action="store_true", help="every open dead letter the filters match"
    )
    discard.set_defaults(act="runs:dead_letters_discard")


def add_read_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    schedules = commands.add_parser("schedules", parents=[common], help="schedules, unsaved")
    actions = schedules.add_subparsers(dest="action", required=True, metavar="ACTION")
    preview = actions.add_parser(
        "preview", parents=[common], help="the fire times of a schedule, DST changes marked"
    )
    kind = preview.add_mutually_exclusive_group(required=True)
    kind.add_argument("--cron", metavar="EXPR")
    kind.add_argument("--every", metavar="SECONDS", type=float)
    kind.add_argument("--at", metavar="ISO")
    preview.add_argument("--timezone", help="of the cron expression (default UTC)")
    preview.add_argument("--name", help="the job name `H` fields hash")
    preview.add_argument("--count", type=int)
    preview.add_argument("--after", metavar="ISO", help="default: now")
    preview.set_defaults(act="reads:schedules_preview")

    stats = commands.add_parser("stats", parents=[common], help="executions of the last window")
    stats.add_argument("--window", type=int, metavar="SECONDS", help="default 3600")
    stats.set_defaults(act="reads:show_stats")

    bounces = commands.add_parser(
        "bounces", parents=[common], help="addresses whose mail servers refuse alert email"
    )
    actions = bounces.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="the latest first")
    listing.set_defaults(act="reads:bounces_list")
    clear = actions.add_parser("clear", parents=[common], help="mail goes to the address again")
    clear.add_argument("address", metavar="ADDRESS")
    clear.set_defaults(act="reads:bounces_clear")

    whoami = commands.add_parser("whoami", parents=[common], help="the token's name and scope")
    whoami.set_defaults(act="reads:show_session")

    probe = commands.add_parser(
        "probe", parents=[common], help="is the API alive; is it ready (exit 1 when not)"
    )
    actions = probe.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("alive", parents=[common]).set_defaults(act="reads:probe_alive")
    actions.add_parser("ready", parents=[common]).set_defaults(act="reads:probe_ready")

    openapi = commands.add_parser("openapi", parents=[common], help="the API's OpenAPI document")
    openapi.set_defaults(act="reads:show_openapi")


def add_apply_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    files = argparse.ArgumentParser(add_help=False)
    files.add_argument(
        "-f",
        "--file",
        action="append",
        required=True,
        metavar="FILE",
        help="jobs as JSON or YAML ({jobs: [...]}) or TOML ([[jobs]]); a folder: every "
        ".json, .yaml, .yml and .toml file under it, any case; repeatable",
    )
    files.add_argument("--prune", action="store_true", help="also delete the jobs it dropped")
    files.add_argument(
        "--owner",
        help="the mark (managed_by) on the jobs it makes; --prune deletes only jobs with this "
        "mark (default: file:PATH, each -f argument's path, relative to the working folder)",
    )
    files.add_argument(
        "--adopt",
        action="store_true",
        help="take over the file's jobs that exist already, made by hand or another owner's "
        "(never a system job); without it, such a job refuses the whole apply",
    )
    codes = (
        "Exit codes: 0 nothing to do, or done; 1 failed; 2 usage error; 3 with --dry-run (and "
        "diff): there are changes to make. Secrets: the API shows them masked, so a file's "
        "secret compares equal to a masked one (a new secret goes with the job's next change, "
        "or by `tickd jobs patch`); `enabled` is compared only when the file sets it."
    )
    apply = commands.add_parser(
        "apply",
        parents=[common, files],
        help="create, update (and --prune) jobs to match files",
        description="Jobs as code: jobs are matched by name; those missing are created, those "
        "that differ updated (refused if changed meanwhile), equal ones left alone. " + codes,
    )
    apply.add_argument(
        "--dry-run", action="store_true", help="print what would change, change nothing"
    )
    apply.set_defaults(act="apply:apply_files")
    diff = commands.add_parser(
        "diff",
        parents=[common, files],
        help="print what `apply` would change, field by field",
        description="What `tickd apply` would do, changing nothing. " + codes,
    )
    diff.set_defaults(act="apply:apply_files", dry_run=True)


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for every field of a job, as POST /v1/jobs and PATCH take them."""
    parser.add_argument("--name")
    parser.add_argument("--handler")
    schedule = parser.add_mutually_exclusive_group()
    schedule.add_argument("--cron", metavar="EXPR", help="six fields, seconds first (or five)")
    schedule.add_argument("--every", metavar="SECONDS", type=float, help="an interval")
    schedule.add_argument("--at", metavar="ISO", help="once, at this time (with an offset)")
    parser.add_argument("--timezone", help="of the cron expression (default UTC)")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a handler param, repeatable; VALUE is read as JSON when it is JSON (0.5, true, "
        '[1,2], "007"), else taken as a string',
    )
    state = parser.add_mutually_exclusive_group()
    state.add_argument("--enabled", dest="enabled", action="store_const", const=True)
    state.add_argument(
        "--disabled", dest="enabled", action="store_const", const=False, help="paused"
    )
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="timeout_seconds")
    parser.add_argument("--retries", type=int, metavar="N", help="max_retries")
    parser.add_argument("--priority", choices=PRIORITIES)
    parser.add_argument("--misfire", choices=MISFIRE_POLICIES, help="what a missed fire time does")
    parser.add_argument(
        "--grace", type=float, metavar="SECONDS", help="how late a fire time may still run"
    )
    parser.add_argument("--jitter", type=float, metavar="SECONDS", help="jitter_seconds")
    parser.add_argument(
        "--redrive",
        metavar="ATTEMPTS:BACKOFF",
        help="re-drive dead letters automatically: at most ATTEMPTS times, the first after "
        "BACKOFF seconds (e.g. 3:60)",
    )
    parser.add_argument(
        "--shards", type=int, metavar="N", help="run each occurrence as N shards (default 1)"
    )
    parser.add_argument(
        "--domain",
        type=domain_name,
        metavar="NAME",
        help="the team or tenant the job belongs to (default: default)",
    )
    parser.add_argument(
        "--concurrency-key",
        metavar="KEY",
        help="at most --concurrency-limit runs of the jobs naming KEY at once, across all "
        "instances (e.g. endpoint:api.vendor.com)",
    )
    parser.add_argument(
        "--concurrency-limit", type=int, metavar="N", help="the limit of --concurrency-key"
    )


def add_completion_command(commands: Subparsers) -> None:
    completion = commands.add_parser(
        "completion",
        help="print a shell completion script",
        description="bash: `source <(tickd completion bash)`; zsh: `source <(tickd completion "
        "zsh)` (through bashcompinit).",
    )
    completion.add_argument("shell", choices=("bash", "zsh"), nargs="?")
    # What the script itself calls for the names of the API's jobs, where a job goes.
    completion.add_argument("--job-names", metavar="PREFIX", help=argparse.SUPPRESS)
    for option in ("--url", "--token"):
        completion.add_argument(option, help=argparse.SUPPRESS, default=argparse.SUPPRESS)
