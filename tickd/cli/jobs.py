"""`tickd jobs ...`, `tickd executions ...`, `tickd dead-letters ...`: the API from a shell, for
ops and for scripts.

Readable tables by default, the API's own JSON with `--json`. An error of the API is printed as
it came (title, detail, each field at fault) on stderr, and the command exits with 1; so does a
server that cannot be reached, or that answers but not as the API does. A mistake on the command
line (a malformed URL too) exits with 2; every failure is one line, never a traceback. Jobs are
named by id or by name. The URL comes from --url or TICKD_URL, the token from --token or
TICKD_TOKEN; the token is never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from tickd.api.client import (
    DEFAULT_URL,
    TOKEN_ENV,
    URL_ENV,
    ApiProblem,
    BadUrl,
    Client,
    ClientError,
    Json,
)

PRIORITIES = ("critical", "high", "normal", "low")
MISFIRE_POLICIES = ("coalesce", "skip", "run_all")
# Flags that set a job's field as they are.
FLAG_FIELDS = (
    ("name", "name"),
    ("handler", "handler"),
    ("enabled", "enabled"),
    ("timeout", "timeout_seconds"),
    ("retries", "max_retries"),
    ("priority", "priority"),
    ("jitter", "jitter_seconds"),
    ("shards", "shards"),
)
STATUSES = ("running", "success", "failed", "timeout", "abandoned", "skipped")
DEAD_LETTER_STATES = ("open", "redriving", "redriven", "discarded")
JOB_COLUMNS = ("NAME", "HANDLER", "SCHEDULE", "ENABLED", "NEXT RUN", "LAST STATUS")
EXECUTION_COLUMNS = ("ID", "JOB", "STATUS", "SCHEDULED", "DURATION", "ATTEMPTS")
# `executions follow` polls at this interval, bounded, for the newest this many.
MIN_FOLLOW_SECONDS, MAX_FOLLOW_SECONDS = 0.5, 60.0
FOLLOW_PAGE = 100

Action = Callable[[Client, argparse.Namespace], int | None]


class UsageError(Exception):
    """A mistake on the command line, found after parsing (a file that is not JSON...)."""


# -- the commands --------------------------------------------------------------------------------


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
    return options


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    """Add the client commands to the `tickd` sub-commands (an argparse subparsers action);
    `common` holds the options every command takes."""
    jobs = commands.add_parser(
        "jobs", parents=[common], help="jobs, through the API: list, show, create..."
    )
    actions = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="list jobs, by name")
    listing.add_argument("--handler", help="only the jobs of this handler")
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
    listing.set_defaults(act=jobs_list)

    show = actions.add_parser("show", parents=[common], help="one job in full")
    show.add_argument("job", metavar="JOB", help="the job's id or name")
    show.set_defaults(act=jobs_show)

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
    create.set_defaults(act=jobs_create)

    replace = actions.add_parser(
        "replace",
        parents=[common],
        help="replace a job's whole definition (from -f and flags, as create takes them)",
    )
    replace.add_argument("job", metavar="JOB", help="the job's id or name")
    replace.add_argument("-f", "--file", help="the job as JSON; - reads stdin")
    add_job_flags(replace)
    replace.set_defaults(act=jobs_replace)

    patch = actions.add_parser(
        "patch",
        parents=[common],
        help="change some fields of a job: only those given (--param adds to the params)",
    )
    patch.add_argument("job", metavar="JOB", help="the job's id or name")
    add_job_flags(patch)
    patch.add_argument("--no-redrive", action="store_true", help="remove the re-drive policy")
    patch.set_defaults(act=jobs_patch)

    preview = actions.add_parser("preview", parents=[common], help="a job's next fire times")
    preview.add_argument("job", metavar="JOB", help="the job's id or name")
    preview.add_argument("--count", type=int, help="how many (default 10, at most 100)")
    preview.add_argument("--after", metavar="ISO", help="from this time on (default: now)")
    preview.set_defaults(act=jobs_preview)

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
    backfill.set_defaults(act=jobs_backfill)

    history = actions.add_parser(
        "history", parents=[common], help="who changed a job, when, and what"
    )
    history.add_argument("job", metavar="JOB", help="the job's id or name")
    history.add_argument("--limit", type=int, help="how many changes (default 50)")
    history.set_defaults(act=jobs_history)

    job_runs = actions.add_parser(
        "executions", parents=[common], help="a job's executions, newest first"
    )
    job_runs.add_argument("job", metavar="JOB", help="the job's id or name")
    job_runs.add_argument("--status", choices=STATUSES)
    job_runs.add_argument("--limit", type=int, help="how many (API default 50, at most 500)")
    job_runs.set_defaults(act=jobs_executions)

    for name, act, what in [
        ("pause", jobs_pause, "pause a job: it stops firing"),
        ("resume", jobs_resume, "resume a paused job, from now"),
        ("trigger", jobs_trigger, "run a job now, once, without moving its schedule"),
        ("delete", jobs_delete, "delete a job (its history stays)"),
    ]:
        one = actions.add_parser(name, parents=[common], help=what)
        one.add_argument("job", metavar="JOB", help="the job's id or name")
        one.set_defaults(act=act)

    executions = commands.add_parser(
        "executions", parents=[common], help="executions, through the API: list, show, retry..."
    )
    actions = executions.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="executions, newest first")
    listing.add_argument("--job", metavar="JOB", help="only this job's (id or name)")
    listing.add_argument("--status", choices=STATUSES)
    listing.add_argument("--handler", help="only the executions of this handler")
    listing.add_argument("--limit", type=int, help="how many (API default 50, at most 500)")
    listing.set_defaults(act=executions_list)

    show = actions.add_parser("show", parents=[common], help="one execution in full")
    show.add_argument("execution", metavar="ID")
    show.set_defaults(act=executions_show)

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
    follow.add_argument("--interval", type=float, default=2.0, metavar="SECONDS")
    follow.add_argument("--recent", action="store_true", help="print those that ended lately first")
    follow.set_defaults(act=executions_follow)

    retry = actions.add_parser(
        "retry", parents=[common], help="run a failed, timed-out or abandoned execution again"
    )
    retry.add_argument("execution", metavar="ID")
    retry.set_defaults(act=executions_retry)

    add_dead_letter_commands(commands, common)


def add_dead_letter_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    dead = commands.add_parser(
        "dead-letters",
        parents=[common],
        help="runs that failed for good, through the API: list, redrive, discard",
    )
    actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--job", metavar="JOB", help="only this job's (id or name)")
    filters.add_argument("--handler", help="only those of this handler")
    filters.add_argument("--since", metavar="ISO", help="occurrences scheduled from then on")
    filters.add_argument("--limit", type=int, help="how many at most")

    listing = actions.add_parser(
        "list", parents=[common, filters], help="dead letters, newest first (open ones)"
    )
    listing.add_argument("--state", choices=DEAD_LETTER_STATES, help="default: open")
    listing.set_defaults(act=dead_letters_list)

    redrive = actions.add_parser(
        "redrive",
        parents=[common, filters],
        help="run a dead letter's occurrence again; without ID, every open one the filters match",
    )
    redrive.add_argument("execution", metavar="ID", nargs="?")
    redrive.set_defaults(act=dead_letters_redrive)

    discard = actions.add_parser("discard", parents=[common], help="give up on a dead letter")
    discard.add_argument("execution", metavar="ID")
    discard.set_defaults(act=dead_letters_discard)


def run_client(args: argparse.Namespace, environ: dict[str, str] | None = None) -> int:
    """Run a parsed client command; the exit status (an action may return its own)."""
    env = os.environ if environ is None else environ
    try:
        client = Client(
            base_url=args.url or env.get(URL_ENV) or DEFAULT_URL,
            token=args.token or env.get(TOKEN_ENV) or None,
        )
        act: Action = args.act
        return act(client, args) or 0
    except (UsageError, BadUrl) as exc:
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"tickd {command}: error: {exc}", file=sys.stderr)
        return 2
    except ApiProblem as exc:
        report_problem(exc, as_json=args.json, out=sys.stderr)
        return 1
    except ClientError as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `tickd jobs list | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130


def report_problem(problem: ApiProblem, *, as_json: bool, out: TextIO) -> None:
    """As the API sent it: its JSON with --json; else the title, the detail, each field."""
    if as_json and isinstance(problem.body, dict):
        print(json.dumps(problem.body), file=out)
        return
    head = f"tickd: {problem.status} {problem.title}"
    # The detail of a validation problem is its errors again, joined: each is printed once.
    listed = problem.detail and any(e.reason in problem.detail for e in problem.errors)
    print(f"{head}: {problem.detail}" if problem.detail and not listed else head, file=out)
    for error in problem.errors:
        print(f"  {error.field}: {error.reason}", file=out)


# -- jobs ----------------------------------------------------------------------------------------


def jobs_list(client: Client, args: argparse.Namespace) -> None:
    filters = {
        "handler": args.handler,
        "enabled": args.enabled,
        "name_prefix": args.prefix,
        "limit": args.limit,
    }
    if args.all:
        items = [job for page in client.iter_job_pages(**filters) for job in page["items"]]
        page: Json = {"items": items, "next_cursor": None}
    else:
        page = client.list_jobs(**filters)
    if args.json:
        print_json(page)
        return
    print_table(JOB_COLUMNS, [job_row(job) for job in page["items"]], empty="No jobs.")
    if page.get("next_cursor"):
        print("More jobs: --all lists them all.", file=sys.stderr)


def jobs_show(client: Client, args: argparse.Namespace) -> None:
    show_job(client.find_job(args.job), args)


def jobs_create(client: Client, args: argparse.Namespace) -> None:
    show_job(client.create_job(job_from_args(args)), args)


def jobs_replace(client: Client, args: argparse.Namespace) -> None:
    job = client.find_job(args.job)
    definition = job_from_args(args)
    show_job(client.replace_job(job["id"], definition, revision=job.get("revision")), args)


def jobs_patch(client: Client, args: argparse.Namespace) -> None:
    changes = fields_from_args(args)
    if args.no_redrive:
        if "redrive" in changes:
            raise UsageError("--redrive and --no-redrive: one or the other")
        changes["redrive"] = None
    if not changes:
        raise UsageError("nothing to change: give the fields to change as flags")
    job = client.find_job(args.job)
    if "misfire" in changes:  # one of policy and grace keeps the other as it is
        changes["misfire"] = {**(job.get("misfire") or {}), **changes["misfire"]}
    if "params" in changes:
        # --param adds to the params: the others go back as read, a secret as ***, which the
        # API keeps as stored.
        changes["params"] = {**(job.get("params") or {}), **changes["params"]}
    show_job(client.patch_job(job["id"], changes, revision=job.get("revision")), args)


def jobs_preview(client: Client, args: argparse.Namespace) -> None:
    preview = client.preview_job(
        client.find_job(args.job)["id"], count=args.count, after=args.after
    )
    print_fire_times(preview, args)


def print_fire_times(preview: Json, args: argparse.Namespace) -> None:
    if args.json:
        print_json(preview)
        return
    rows = [
        [when(t.get("at")), str(t.get("local")), "DST change" if t.get("dst_transition") else ""]
        for t in preview.get("times") or []
    ]
    print_table(("AT (UTC)", "LOCAL", ""), rows, empty="No fire times.")


def jobs_backfill(client: Client, args: argparse.Namespace) -> None:
    window: Json = {"start": args.start, "end": args.end, "dry_run": not args.run}
    if args.per_second is not None:
        window["per_second"] = args.per_second
    job = client.find_job(args.job)
    out = client.backfill_job(job["id"], window)
    if args.json:
        print_json(out)
        return
    verb = "Would run" if out.get("dry_run") else "Queued"
    occurrences = out.get("occurrences") or []
    print(f"{verb} {len(occurrences)} occurrences of {job['name']}.")
    for at in occurrences:
        print(f"  {when(at)}")
    if out.get("already_run"):
        print(f"Left out {len(out['already_run'])} that have executions already.")
    if out.get("truncated"):
        print("The window holds more: backfill the rest from the last one.", file=sys.stderr)


def jobs_history(client: Client, args: argparse.Namespace) -> None:
    page = client.job_history(client.find_job(args.job)["id"], limit=args.limit)
    if args.json:
        print_json(page)
        return
    rows = [
        [when(c.get("at")), str(c.get("actor")), str(c.get("action")), changed_fields(c)]
        for c in page.get("items") or []
    ]
    print_table(("AT", "ACTOR", "ACTION", "CHANGED"), rows, empty="No changes.")


def changed_fields(change: Json) -> str:
    return ", ".join(sorted(change.get("changes") or {})) or "-"


def jobs_executions(client: Client, args: argparse.Namespace) -> None:
    job = client.find_job(args.job)
    page = client.job_executions(job["id"], status=args.status, limit=args.limit)
    if args.json:
        print_json(page)
        return
    print_executions(page["items"], empty="No executions.")


def show_job(job: Json, args: argparse.Namespace) -> None:
    if args.json:
        print_json(job)
    else:
        print_fields(job_fields(job))


def jobs_pause(client: Client, args: argparse.Namespace) -> None:
    job = client.pause_job(client.find_job(args.job)["id"])
    if args.json:
        print_json(job)
    else:
        print(f"Paused {job['name']} ({job['id']}).")


def jobs_resume(client: Client, args: argparse.Namespace) -> None:
    job = client.resume_job(client.find_job(args.job)["id"])
    if args.json:
        print_json(job)
    else:
        print(f"Resumed {job['name']} ({job['id']}); next run {when(job.get('next_run_at'))}.")


def jobs_trigger(client: Client, args: argparse.Namespace) -> None:
    job = client.find_job(args.job)
    request = client.trigger_job(job["id"])
    if args.json:
        print_json(request)
    else:
        print(f"Queued a run of {job['name']} now (run request {request['id']}).")


def jobs_delete(client: Client, args: argparse.Namespace) -> None:
    job = client.find_job(args.job)
    client.delete_job(job["id"])
    if not args.json:  # 204: the API sends no JSON to print
        print(f"Deleted {job['name']} ({job['id']}).")


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


def job_from_args(args: argparse.Namespace) -> Json:
    job = read_job_file(args.file) if args.file else {}
    job |= fields_from_args(args, job.get("params"))
    if not args.file:
        missing = [f"--{key}" for key in ("name", "handler") if key not in job]
        if "schedule" not in job:
            missing.append("one of --cron, --every, --at")
        if missing:
            raise UsageError(f"the job needs {', '.join(missing)} (or -f FILE)")
    return job


def fields_from_args(args: argparse.Namespace, params: Any = None) -> Json:
    """The job's fields the flags give; `params` are the file's, which --param adds to."""
    job: Json = {}
    for flag, key in FLAG_FIELDS:
        if getattr(args, flag) is not None:
            job[key] = getattr(args, flag)
    if args.timezone is not None and args.cron is None:
        raise UsageError("--timezone goes with --cron")
    if args.cron is not None:
        job["schedule"] = {"kind": "cron", "expr": args.cron}
        if args.timezone is not None:
            job["schedule"]["timezone"] = args.timezone
    elif args.every is not None:
        job["schedule"] = {"kind": "interval", "every_seconds": args.every}
    elif args.at is not None:
        job["schedule"] = {"kind": "once", "at": args.at}
    if args.param:
        if params is not None and not isinstance(params, dict):
            raise UsageError("--param: the file's params are not an object")
        job["params"] = {**(params or {}), **dict(parse_param(p) for p in args.param)}
    if args.misfire is not None or args.grace is not None:
        job["misfire"] = {
            k: v
            for k, v in (("policy", args.misfire), ("grace_seconds", args.grace))
            if v is not None
        }
    if args.redrive is not None:
        job["redrive"] = parse_redrive(args.redrive)
    return job


def parse_redrive(text: str) -> Json:
    attempts, sep, backoff = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return {"max_attempts": int(attempts), "backoff_seconds": float(backoff)}
    except ValueError:
        raise UsageError(f"--redrive {text!r}: expected ATTEMPTS:BACKOFF, e.g. 3:60") from None


def read_job_file(name: str) -> Json:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"-f {name}: {exc.strerror or exc}") from None
    try:
        job = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"-f {name}: not JSON: {exc}") from None
    if not isinstance(job, dict):
        raise UsageError(f"-f {name}: the job must be a JSON object")
    return job


def parse_param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise UsageError(f"--param {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


# -- executions ----------------------------------------------------------------------------------


def executions_list(client: Client, args: argparse.Namespace) -> None:
    job_id = client.find_job(args.job)["id"] if args.job else None
    page = client.list_executions(
        job_id=job_id, status=args.status, handler=args.handler, limit=args.limit
    )
    if args.json:
        print_json(page)
        return
    print_executions(page["items"], empty="No executions.")


def executions_show(client: Client, args: argparse.Namespace) -> None:
    execution = client.get_execution(args.execution)
    if args.json:
        print_json(execution)
        return
    print_fields(execution_fields(execution))
    for attempt in execution.get("attempt_log") or []:
        print(attempt_text(attempt))
    traceback = (execution.get("error") or {}).get("traceback")
    if traceback:
        print("traceback:")
        print(traceback.rstrip())


def attempt_text(attempt: Json) -> str:
    error = attempt.get("error")
    outcome = f"{error.get('type')}: {error.get('message')}" if error else "succeeded"
    backoff = attempt.get("backoff_seconds")
    then = f", retried after {seconds_text(backoff)}" if backoff is not None else ""
    return (
        f"attempt {attempt.get('number')}: {when(attempt.get('started_at'))} to "
        f"{when(attempt.get('finished_at'))}, {outcome}{then}"
    )


def executions_follow(client: Client, args: argparse.Namespace) -> None:
    """Print executions as they end, oldest first, until Ctrl-C; each once."""
    job_id = client.find_job(args.job)["id"] if args.job else None
    seen: set[str] = set()
    first = True
    interval = max(MIN_FOLLOW_SECONDS, min(args.interval, MAX_FOLLOW_SECONDS))
    while True:
        page = client.list_executions(
            job_id=job_id, status=args.status, handler=args.handler, limit=FOLLOW_PAGE
        )
        ended = [e for e in reversed(page["items"]) if e.get("finished_at") and e["id"] not in seen]
        seen.update(e["id"] for e in ended)
        if not first or args.recent:
            for execution in ended:
                line = json.dumps(execution) if args.json else "  ".join(execution_row(execution))
                print(line, flush=True)
        first = False
        time.sleep(interval)


def executions_retry(client: Client, args: argparse.Namespace) -> None:
    request = client.retry_execution(args.execution)
    if args.json:
        print_json(request)
    else:
        print(
            f"Queued a retry of execution {args.execution} "
            f"(occurrence {when(request.get('scheduled_at'))}, run request {request['id']})."
        )


# -- dead letters --------------------------------------------------------------------------------


def dead_letters_list(client: Client, args: argparse.Namespace) -> None:
    job_id = client.find_job(args.job)["id"] if args.job else None
    page = client.list_dead_letters(
        state=args.state, job_id=job_id, handler=args.handler, since=args.since, limit=args.limit
    )
    if args.json:
        print_json(page)
        return
    print_executions(page["items"], empty="No dead letters.")


def dead_letters_redrive(client: Client, args: argparse.Namespace) -> None:
    if args.execution is not None:
        if args.job or args.handler or args.since or args.limit is not None:
            raise UsageError("give an ID or filters, not both")
        request = client.redrive_dead_letter(args.execution)
        if args.json:
            print_json(request)
        else:
            print(f"Queued a re-drive of {args.execution} (run request {request['id']}).")
        return
    dead_filter = {
        "job_id": client.find_job(args.job)["id"] if args.job else None,
        "handler": args.handler,
        "since": args.since,
        "limit": args.limit,
    }
    out = client.redrive_dead_letters({k: v for k, v in dead_filter.items() if v is not None})
    if args.json:
        print_json(out)
        return
    print(f"Queued {len(out['requests'])} re-drives.")
    for skipped in out.get("skipped") or []:
        print(f"  skipped {skipped.get('id')}: {skipped.get('reason')}")
    if out.get("more"):
        print("More open dead letters match: run it again.", file=sys.stderr)


def dead_letters_discard(client: Client, args: argparse.Namespace) -> None:
    execution = client.discard_dead_letter(args.execution)
    if args.json:
        print_json(execution)
    else:
        print(f"Discarded dead letter {execution['id']} ({execution.get('job_name')}).")


# -- views ---------------------------------------------------------------------------------------


def job_row(job: Json) -> list[str]:
    last = job.get("last_execution") or {}
    return [
        str(job.get("name", "")),
        str(job.get("handler", "")),
        schedule_text(job.get("schedule") or {}),
        "yes" if job.get("enabled") else "no",
        when(job.get("next_run_at")),
        str(last.get("status") or "-"),
    ]


def job_fields(job: Json) -> list[tuple[str, str]]:
    misfire = job.get("misfire") or {}
    last = job.get("last_execution")
    fields = [
        ("id", str(job.get("id"))),
        ("name", str(job.get("name"))),
        ("handler", str(job.get("handler"))),
        ("schedule", schedule_text(job.get("schedule") or {})),
        ("enabled", "yes" if job.get("enabled") else "no"),
    ]
    if job.get("paused_reason"):
        fields.append(("paused", str(job["paused_reason"])))
    fields += [
        ("next run", when(job.get("next_run_at"))),
        ("params", json.dumps(job.get("params", {}), ensure_ascii=False)),
        ("timeout", seconds_text(job.get("timeout_seconds"))),
        ("retries", str(job.get("max_retries"))),
        ("priority", str(job.get("priority"))),
        (
            "misfire",
            f"{misfire.get('policy')}, grace {seconds_text(misfire.get('grace_seconds'))}",
        ),
        ("jitter", seconds_text(job.get("jitter_seconds"))),
        ("shards", str(job.get("shards", 1))),
        (
            "last run",
            f"{last['status']} at {when(last.get('finished_at'))} ({last['execution_id']})"
            if last
            else "-",
        ),
        ("failures", str(job.get("consecutive_failures", 0))),
        ("system", "yes" if job.get("system") else "no"),
        ("revision", str(job.get("revision"))),
        ("created", when(job.get("created_at"))),
        ("updated", when(job.get("updated_at"))),
    ]
    return fields


def print_executions(executions: Sequence[Json], *, empty: str) -> None:
    """A table of executions; with a SHARD column (shard/shards, from 0) when any is a shard."""
    rows = [execution_row(e) for e in executions]
    if not any((e.get("shards") or 1) > 1 for e in executions):
        print_table(EXECUTION_COLUMNS, rows, empty=empty)
        return
    shards = [shard_text(e) for e in executions]
    print_table(
        (*EXECUTION_COLUMNS, "SHARD"),
        [[*row, shard] for row, shard in zip(rows, shards, strict=True)],
        empty=empty,
    )


def shard_text(execution: Json) -> str:
    shards = execution.get("shards") or 1
    return "-" if shards == 1 else f"{execution.get('shard')}/{shards}"


def execution_row(execution: Json) -> list[str]:
    return [
        str(execution.get("id", "")),
        str(execution.get("job_name", "")),
        str(execution.get("status", "")),
        when(execution.get("scheduled_at")),
        millis_text(execution.get("duration_ms")),
        str(execution.get("attempts", "")),
    ]


def execution_fields(execution: Json) -> list[tuple[str, str]]:
    error = execution.get("error")
    result = execution.get("result")
    return [
        ("id", str(execution.get("id"))),
        ("job", f"{execution.get('job_name')} ({execution.get('job_id')})"),
        ("handler", str(execution.get("handler"))),
        ("status", str(execution.get("status"))),
        ("scheduled", when(execution.get("scheduled_at"))),
        ("started", when(execution.get("started_at"))),
        ("finished", when(execution.get("finished_at"))),
        ("duration", millis_text(execution.get("duration_ms"))),
        ("attempts", str(execution.get("attempts"))),
        ("shard", shard_text(execution)),
        ("error", f"{error.get('type')}: {error.get('message')}" if error else "-"),
        ("result", json.dumps(result, ensure_ascii=False) if result is not None else "-"),
        ("owner", str(execution.get("owner") or "-")),
        ("idempotency key", str(execution.get("idempotency_key"))),
    ]


def schedule_text(schedule: Json) -> str:
    kind = schedule.get("kind")
    if kind == "cron":
        zone = schedule.get("timezone") or "UTC"
        return f"cron {schedule.get('expr')}" + ("" if zone == "UTC" else f" ({zone})")
    if kind == "interval":
        return f"every {seconds_text(schedule.get('every_seconds'))}"
    if kind == "once":
        return f"once {when(schedule.get('at'))}"
    return json.dumps(schedule)


def seconds_text(seconds: Any) -> str:
    """60 -> 1m, 5400 -> 1h30m, 0.5 -> 0.5s."""
    if not isinstance(seconds, int | float):
        return "-"
    if seconds < 60:
        return f"{seconds:g}s"
    rest = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def millis_text(millis: Any) -> str:
    if not isinstance(millis, int | float):
        return "-"
    if millis < 1000:
        return f"{millis:.0f}ms"
    if millis < 60_000:
        return f"{millis / 1000:.2f}s"
    return seconds_text(millis / 1000)


_FRACTION = re.compile(r"\.\d+(?=Z|[+-]\d\d:\d\d$)")


def when(value: Any) -> str:
    """An API time without its fraction of a second: 2026-03-03T01:30:00Z."""
    return _FRACTION.sub("", value) if isinstance(value, str) and value else "-"


# -- output --------------------------------------------------------------------------------------


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, empty: str) -> None:
    if not rows:
        print(empty)
        return
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def print_fields(fields: Sequence[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {value}")
