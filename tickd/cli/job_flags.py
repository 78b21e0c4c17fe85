"""The job that the flags of `tickd jobs create`, `replace` and `patch` make (tickd.cli.parser
declares them): a JSON file (-f) with the flags on top."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tickd.cli.connect import UsageError
from tickd.cli.output import Json

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
    ("domain", "domain"),
    ("concurrency_key", "concurrency_key"),
    ("concurrency_limit", "concurrency_limit"),
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
