"""`tickd jobs ...`: jobs, through the API, named by id or by name; readable tables by default,
the API's own JSON with `--json`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from tickd.api.models import BackfillRequest, JobCreate, JobPatch
from tickd.cli.connect import UsageError, find_job, given
from tickd.cli.job_flags import fields_from_args, job_from_args
from tickd.cli.output import (
    Json,
    dumped,
    print_fields,
    print_fire_times,
    print_json,
    print_table,
    schedule_text,
    seconds_text,
    when,
)
from tickd.cli.runs import print_executions

if TYPE_CHECKING:
    from tickd.client import Client

JOB_COLUMNS = ("NAME", "HANDLER", "SCHEDULE", "ENABLED", "NEXT RUN", "LAST STATUS")


def jobs_list(client: Client, args: argparse.Namespace) -> None:
    filters = given(
        handler=args.handler,
        domain=args.domain,
        enabled=args.enabled,
        name_prefix=args.prefix,
        limit=args.limit,
    )
    if args.all:
        page: Json = {
            "items": [dumped(j) for j in client.iter_jobs(**filters)],
            "next_cursor": None,
        }
    else:
        page = dumped(client.list_jobs(**filters))
    if args.json:
        print_json(page)
        return
    print_table(JOB_COLUMNS, [job_row(job) for job in page["items"]], empty="No jobs.")
    if page.get("next_cursor"):
        print("More jobs: --all lists them all.", file=sys.stderr)


def jobs_show(client: Client, args: argparse.Namespace) -> None:
    show_job(dumped(find_job(client, args.job)), args)


def jobs_create(client: Client, args: argparse.Namespace) -> None:
    job = JobCreate.model_validate(job_from_args(args))
    show_job(dumped(client.create_job(job)), args)


def jobs_replace(client: Client, args: argparse.Namespace) -> None:
    job = find_job(client, args.job)
    definition = JobCreate.model_validate(job_from_args(args))
    show_job(dumped(client.update_job(job.id, definition, if_match=job.revision)), args)


def jobs_patch(client: Client, args: argparse.Namespace) -> None:
    changes = fields_from_args(args)
    if args.no_redrive:
        if "redrive" in changes:
            raise UsageError("--redrive and --no-redrive: one or the other")
        changes["redrive"] = None
    if not changes:
        raise UsageError("nothing to change: give the fields to change as flags")
    job = find_job(client, args.job)
    stored = dumped(job)
    if "misfire" in changes:  # one of policy and grace keeps the other as it is
        changes["misfire"] = {**(stored.get("misfire") or {}), **changes["misfire"]}
    if "params" in changes:
        # --param adds to the params: the others go back as read, a secret as ***, which the
        # API keeps as stored.
        changes["params"] = {**(stored.get("params") or {}), **changes["params"]}
    patch = JobPatch.model_validate(changes)
    show_job(dumped(client.patch_job(job.id, patch, if_match=job.revision)), args)


def jobs_preview(client: Client, args: argparse.Namespace) -> None:
    job = find_job(client, args.job)
    preview = client.preview_job(job.id, **given(count=args.count, after=args.after))
    print_fire_times(dumped(preview), args)


def jobs_backfill(client: Client, args: argparse.Namespace) -> None:
    window = given(start=args.start, end=args.end, dry_run=not args.run, per_second=args.per_second)
    job = find_job(client, args.job)
    out = dumped(client.backfill_job(job.id, BackfillRequest.model_validate(window)))
    if args.json:
        print_json(out)
        return
    verb = "Would run" if out.get("dry_run") else "Queued"
    occurrences = out.get("occurrences") or []
    print(f"{verb} {len(occurrences)} occurrences of {job.name}.")
    for at in occurrences:
        print(f"  {when(at)}")
    if out.get("already_run"):
        print(f"Left out {len(out['already_run'])} that have executions already.")
    if out.get("truncated"):
        print("The window holds more: backfill the rest from the last one.", file=sys.stderr)


def jobs_history(client: Client, args: argparse.Namespace) -> None:
    job = find_job(client, args.job)
    page = dumped(client.job_history(job.id, **given(limit=args.limit)))
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
    job = find_job(client, args.job)
    page = client.job_executions(job.id, **given(status=args.status, limit=args.limit))
    if args.json:
        print_json(dumped(page))
        return
    print_executions([dumped(e) for e in page.items], empty="No executions.")


def show_job(job: Json, args: argparse.Namespace) -> None:
    if args.json:
        print_json(job)
    else:
        print_fields(job_fields(job))


def jobs_pause(client: Client, args: argparse.Namespace) -> None:
    job = client.pause_job(find_job(client, args.job).id)
    if args.json:
        print_json(dumped(job))
    else:
        print(f"Paused {job.name} ({job.id}).")


def jobs_resume(client: Client, args: argparse.Namespace) -> None:
    job = dumped(client.resume_job(find_job(client, args.job).id))
    if args.json:
        print_json(job)
    else:
        print(f"Resumed {job['name']} ({job['id']}); next run {when(job.get('next_run_at'))}.")


def jobs_trigger(client: Client, args: argparse.Namespace) -> None:
    job = find_job(client, args.job)
    request = client.trigger_job(job.id)
    if args.json:
        print_json(dumped(request))
    else:
        print(f"Queued a run of {job.name} now (run request {request.id}).")


def jobs_delete(client: Client, args: argparse.Namespace) -> None:
    job = find_job(client, args.job)
    client.delete_job(job.id)
    if not args.json:  # 204: the API sends no JSON to print
        print(f"Deleted {job.name} ({job.id}).")


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
        ("domain", str(job.get("domain"))),
        ("schedule", schedule_text(job.get("schedule") or {})),
    ]
    if job.get("concurrency_key"):
        limit = job.get("concurrency_limit")
        fields.append(("concurrency", f"{job['concurrency_key']}, at most {limit} at once"))
    fields.append(("enabled", "yes" if job.get("enabled") else "no"))
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
