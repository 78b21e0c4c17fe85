"""The flags that give a job's fields (`tickd jobs create`, `replace`, `patch`), and the job
they make: a JSON file (-f) with the flags on top."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tickd.cli.connect import UsageError
from tickd.cli.output import Json

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
