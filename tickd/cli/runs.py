"""`tickd executions ...` and `tickd dead-letters ...`: runs, through the API."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tickd.cli.connect import UsageError, find_job, given
from tickd.cli.output import (
    Json,
    dumped,
    error_text,
    millis_text,
    print_fields,
    print_json,
    print_table,
    seconds_text,
    terminal_lines,
    terminal_text,
    when,
)

if TYPE_CHECKING:
    from tickd.client import Client

EXECUTION_COLUMNS = ("ID", "JOB", "STATUS", "SCHEDULED", "DURATION", "ATTEMPTS")
# The most ids one call discards (the API's bound): more are sent this many a call.
DISCARD_BATCH = 100
# `executions follow` polls at this interval, bounded, for the newest this many.
MIN_FOLLOW_SECONDS, MAX_FOLLOW_SECONDS = 0.5, 60.0
FOLLOW_PAGE = 100


# -- executions ----------------------------------------------------------------------------------


def job_id_of(client: Client, args: argparse.Namespace) -> str | None:
    """The id of the job --job names (by id or name), if it names one."""
    return find_job(client, args.job).id if args.job else None


def executions_list(client: Client, args: argparse.Namespace) -> None:
    query = given(
        job_id=job_id_of(client, args),
        status=args.status,
        handler=args.handler,
        domain=args.domain,
        limit=args.limit,
    )
    page = dumped(client.list_executions(**query))
    if args.json:
        print_json(page)
        return
    print_executions(page["items"], empty="No executions.")


def executions_show(client: Client, args: argparse.Namespace) -> None:
    execution = dumped(client.get_execution(args.execution))
    if args.json:
        print_json(execution)
        return
    print_fields(execution_fields(execution))
    for attempt in execution.get("attempt_log") or []:
        print(attempt_text(attempt))
    traceback = (execution.get("error") or {}).get("traceback")
    if traceback:
        print("traceback:")
        print(terminal_lines(traceback.rstrip()))


def attempt_text(attempt: Json) -> str:
    error = attempt.get("error")
    outcome = f"{error.get('type')}: {error.get('message')}" if error else "succeeded"
    backoff = attempt.get("backoff_seconds")
    then = f", retried after {seconds_text(backoff)}" if backoff is not None else ""
    return terminal_text(
        f"attempt {attempt.get('number')}: {when(attempt.get('started_at'))} to "
        f"{when(attempt.get('finished_at'))}, {outcome}{then}"
    )


def executions_follow(client: Client, args: argparse.Namespace) -> None:
    """Print executions as they end, oldest first, until Ctrl-C; each once."""
    query = given(
        job_id=job_id_of(client, args),
        status=args.status,
        handler=args.handler,
        domain=args.domain,
        limit=FOLLOW_PAGE,
    )
    seen: set[str] = set()
    first = True
    interval = max(MIN_FOLLOW_SECONDS, min(args.interval, MAX_FOLLOW_SECONDS))
    while True:
        items = [dumped(e) for e in client.list_executions(**query).items]
        ended = [e for e in reversed(items) if e.get("finished_at") and e["id"] not in seen]
        seen.update(e["id"] for e in ended)
        if not first or args.recent:
            for execution in ended:
                print(follow_line(execution, as_json=args.json), flush=True)
        first = False
        time.sleep(interval)


def follow_line(execution: Json, *, as_json: bool) -> str:
    """An ended execution as `follow` prints it: its row and its error, or its JSON."""
    if as_json:
        return json.dumps(execution)
    cells = [*execution_row(execution), error_text(execution.get("error"))]
    return terminal_text("  ".join(cells))


def executions_retry(client: Client, args: argparse.Namespace) -> None:
    request = dumped(client.retry_execution(args.execution))
    if args.json:
        print_json(request)
    else:
        print(
            f"Queued a retry of execution {args.execution} "
            f"(occurrence {when(request.get('scheduled_at'))}, run request {request['id']})."
        )


# -- dead letters --------------------------------------------------------------------------------


def dead_letters_list(client: Client, args: argparse.Namespace) -> None:
    if args.group:
        dead_letter_groups(client, args)
        return
    query = given(
        state=args.state,
        job_id=job_id_of(client, args),
        handler=args.handler,
        domain=args.domain,
        since=args.since,
        until=args.until,
        limit=args.limit,
    )
    page = dumped(client.list_dead_letters(**query))
    if args.json:
        print_json(page)
        return
    print_executions(page["items"], empty="No dead letters.")


def dead_letter_groups(client: Client, args: argparse.Namespace) -> None:
    """Identical errors with their counts, the largest group first."""
    if args.limit is not None:
        raise UsageError("--limit goes with a list of dead letters, not with --group")
    query = given(
        state=args.state,
        job_id=job_id_of(client, args),
        handler=args.handler,
        domain=args.domain,
        since=args.since,
        until=args.until,
    )
    groups = dumped(client.dead_letter_groups(**query))
    if args.json:
        print_json(groups)
        return
    rows = [
        [
            str(g.get("count")),
            str(g.get("job_name")),
            when(g.get("newest_at")),
            error_text({"type": g.get("error_type"), "message": g.get("error")}, width=100),
        ]
        for g in groups.get("groups") or []
    ]
    print_table(("COUNT", "JOB", "NEWEST", "ERROR"), rows, empty="No dead letters.")
    if not groups.get("complete"):
        print(f"Only the newest {groups.get('read')} dead letters are counted.", file=sys.stderr)


def filtered(args: argparse.Namespace) -> bool:
    return any(
        getattr(args, name, None) is not None
        for name in ("job", "handler", "domain", "since", "until", "error_type", "limit")
    )


def dead_letters_redrive(client: Client, args: argparse.Namespace) -> None:
    if args.execution is not None:
        if filtered(args):
            raise UsageError("give an ID or filters, not both")
        request = client.redrive_dead_letter(args.execution)
        if args.json:
            print_json(dumped(request))
        else:
            print(f"Queued a re-drive of {args.execution} (run request {request.id}).")
        return
    out = dumped(client.redrive_dead_letters(**filters_of(client, args)))
    if args.json:
        print_json(out)
        return
    print(f"Queued {len(out['requests'])} re-drives.")
    print_skipped(out)
    if out.get("more"):
        print("More open dead letters match: run it again.", file=sys.stderr)


def filters_of(client: Client, args: argparse.Namespace) -> Json:
    return given(
        job_id=job_id_of(client, args),
        handler=args.handler,
        domain=args.domain,
        since=args.since,
        until=args.until,
        error_type=args.error_type,
        limit=args.limit,
    )


def print_skipped(out: Json) -> None:
    for skipped in out.get("skipped") or []:
        print(terminal_text(f"  skipped {skipped.get('id')}: {skipped.get('reason')}"))


def dead_letters_discard(client: Client, args: argparse.Namespace) -> None:
    """One dead letter, several (DISCARD_BATCH a call), or with --all the newest open ones the
    filters match (at most --limit, 100 by default)."""
    ids: list[str] = args.execution
    if args.all == bool(ids):
        raise UsageError(
            "give IDs, or --all to discard every open dead letter the filters match"
            if not ids
            else "give IDs or --all, not both"
        )
    if ids and filtered(args):
        raise UsageError("give IDs or filters, not both")
    if len(ids) == 1:
        execution = dumped(client.discard_dead_letter(ids[0]))
        if args.json:
            print_json(execution)
        else:
            print(f"Discarded dead letter {execution['id']} ({execution.get('job_name')}).")
        return
    if ids:
        outs = [
            dumped(client.discard_dead_letters(ids=ids[start : start + DISCARD_BATCH]))
            for start in range(0, len(ids), DISCARD_BATCH)
        ]
    else:
        outs = [dumped(client.discard_dead_letters(**filters_of(client, args)))]
    out: Json = {
        "discarded": [i for o in outs for i in o["discarded"]],
        "count": sum(o["count"] for o in outs),
        "skipped": [s for o in outs for s in o["skipped"]],
        "more": any(o["more"] for o in outs),
    }
    if args.json:
        print_json(out)
        return
    print(f"Discarded {out['count']} dead {'letter' if out['count'] == 1 else 'letters'}.")
    print_skipped(out)
    if out["more"]:
        print("More open dead letters match: run it again.", file=sys.stderr)


# -- views ---------------------------------------------------------------------------------------


def print_executions(executions: Sequence[Json], *, empty: str) -> None:
    """A table of executions; with a SHARD column (shard/shards, from 0) when any is a shard."""
    rows = [execution_row(e) for e in executions]
    errors = [error_text(e.get("error")) for e in executions]
    if not any((e.get("shards") or 1) > 1 for e in executions):
        print_table(
            (*EXECUTION_COLUMNS, "ERROR"),
            [[*row, error] for row, error in zip(rows, errors, strict=True)],
            empty=empty,
        )
        return
    shards = [shard_text(e) for e in executions]
    print_table(
        (*EXECUTION_COLUMNS, "SHARD", "ERROR"),
        [[*row, shard, error] for row, shard, error in zip(rows, shards, errors, strict=True)],
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
