"""The client commands beyond jobs, executions and dead letters: `apply` and `diff` (jobs as
code, api/apply.py), `schedules`, `handlers --api`, `stats`, `bounces`, `whoami`, `probe`,
`openapi`; `completion`; and VERBS, the table of which command runs each API operation.

Exit codes of apply and diff: 0 nothing to do, or done; 1 failed (an API error, a job changed
meanwhile, a job another owner manages); 2 a usage error (a file that is no job definition);
3 (with --dry-run, and diff) there are changes to make.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from typing import Any, TypeAlias

from tickd.api import apply as jobs_as_code
from tickd.api.cli import (
    UsageError,
    print_fields,
    print_fire_times,
    print_json,
    print_table,
    seconds_text,
    when,
)
from tickd.api.client import Client, Json
from tickd.api.models import MANAGED_BY_PATTERN

# Each operation of the API (as /openapi.json lists it) and the command that runs it.
VERBS = {
    "GET /v1/jobs": "tickd jobs list",
    "POST /v1/jobs": "tickd jobs create",
    "GET /v1/jobs/{job_id}": "tickd jobs show",
    "PUT /v1/jobs/{job_id}": "tickd jobs replace",
    "PATCH /v1/jobs/{job_id}": "tickd jobs patch",
    "DELETE /v1/jobs/{job_id}": "tickd jobs delete",
    "POST /v1/jobs/{job_id}/pause": "tickd jobs pause",
    "POST /v1/jobs/{job_id}/resume": "tickd jobs resume",
    "POST /v1/jobs/{job_id}/trigger": "tickd jobs trigger",
    "POST /v1/jobs/{job_id}/backfill": "tickd jobs backfill",
    "GET /v1/jobs/{job_id}/preview": "tickd jobs preview",
    "GET /v1/jobs/{job_id}/history": "tickd jobs history",
    "GET /v1/jobs/{job_id}/executions": "tickd jobs executions",
    "GET /v1/executions": "tickd executions list",
    "GET /v1/executions/{execution_id}": "tickd executions show",
    "POST /v1/executions/{execution_id}/retry": "tickd executions retry",
    "POST /v1/schedules/preview": "tickd schedules preview",
    "GET /v1/handlers": "tickd handlers --api",
    "GET /v1/bounces": "tickd bounces list",
    "DELETE /v1/bounces/{address}": "tickd bounces clear",
    "GET /healthz": "tickd probe alive",
    "GET /readyz": "tickd probe ready",
    "GET /openapi.json": "tickd openapi",
    "GET /v1/session": "tickd whoami",
    "GET /v1/stats": "tickd stats",
    "GET /v1/dead-letters": "tickd dead-letters list",
    "POST /v1/dead-letters/redrive": "tickd dead-letters redrive",
    "POST /v1/dead-letters/{execution_id}/redrive": "tickd dead-letters redrive",
    "POST /v1/dead-letters/{execution_id}/discard": "tickd dead-letters discard",
}
# Operations that are not for a shell, and why.
NOT_VERBS = {
    "GET /metrics": "Prometheus text, for a scraper",
    "GET /docs": "an HTML page, for a browser",
}
EXIT_CHANGES = 3

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_more_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    add_apply_commands(commands, common)

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
    preview.set_defaults(act=schedules_preview)

    stats = commands.add_parser("stats", parents=[common], help="executions of the last window")
    stats.add_argument("--window", type=int, metavar="SECONDS", help="default 3600")
    stats.set_defaults(act=show_stats)

    bounces = commands.add_parser(
        "bounces", parents=[common], help="addresses whose mail servers refuse alert email"
    )
    actions = bounces.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="the latest first")
    listing.set_defaults(act=bounces_list)
    clear = actions.add_parser("clear", parents=[common], help="mail goes to the address again")
    clear.add_argument("address", metavar="ADDRESS")
    clear.set_defaults(act=bounces_clear)

    whoami = commands.add_parser("whoami", parents=[common], help="the token's name and scope")
    whoami.set_defaults(act=show_session)

    probe = commands.add_parser(
        "probe", parents=[common], help="is the API alive; is it ready (exit 1 when not)"
    )
    actions = probe.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("alive", parents=[common]).set_defaults(act=probe_alive)
    actions.add_parser("ready", parents=[common]).set_defaults(act=probe_ready)

    openapi = commands.add_parser("openapi", parents=[common], help="the API's OpenAPI document")
    openapi.set_defaults(act=show_openapi)

    completion = commands.add_parser(
        "completion",
        help="print a shell completion script",
        description="bash: `source <(tickd completion bash)`; zsh: `source <(tickd completion "
        "zsh)` (through bashcompinit).",
    )
    completion.add_argument("shell", choices=("bash", "zsh"))


def add_apply_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    files = argparse.ArgumentParser(add_help=False)
    files.add_argument(
        "-f",
        "--file",
        action="append",
        required=True,
        metavar="FILE",
        help="jobs as JSON or YAML ({jobs: [...]}) or TOML ([[jobs]]); a folder: its "
        ".json, .yaml, .yml and .toml files; repeatable",
    )
    files.add_argument("--prune", action="store_true", help="also delete the jobs it dropped")
    files.add_argument(
        "--owner",
        default=jobs_as_code.DEFAULT_OWNER,
        help="the mark (managed_by) on the jobs it makes; --prune deletes only jobs with this "
        f"mark (default {jobs_as_code.DEFAULT_OWNER!r})",
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
    apply.set_defaults(act=apply_files)
    diff = commands.add_parser(
        "diff",
        parents=[common, files],
        help="print what `apply` would change, field by field",
        description="What `tickd apply` would do, changing nothing. " + codes,
    )
    diff.set_defaults(act=apply_files, dry_run=True)


# -- apply, diff ---------------------------------------------------------------------------------


def apply_files(client: Client, args: argparse.Namespace) -> int:
    if not re.fullmatch(MANAGED_BY_PATTERN, args.owner):
        raise UsageError(
            f"--owner {args.owner!r}: up to 100 letters, digits and . _ : @ / -, "
            "starting with a letter or digit"
        )
    try:
        definitions = jobs_as_code.load_definitions(args.file)
    except jobs_as_code.DefinitionError as exc:
        raise UsageError(str(exc)) from None
    changes = jobs_as_code.plan(client, definitions, owner=args.owner, prune=args.prune)
    kept = len(definitions) - sum(c.action != "delete" for c in changes)
    if args.dry_run:
        return _show_plan(changes, kept, args)
    outcomes = jobs_as_code.apply(client, changes)
    if args.json:
        print_json(
            {
                "changes": [jobs_as_code.as_json(o.change, o.error) for o in outcomes],
                "unchanged": kept,
            }
        )
    else:
        _print_outcomes(outcomes, kept)
    return 1 if any(o.error for o in outcomes) else 0


def _show_plan(changes: list[jobs_as_code.Change], kept: int, args: argparse.Namespace) -> int:
    if args.json:
        print_json({"changes": [jobs_as_code.as_json(c) for c in changes], "unchanged": kept})
    else:
        for line in jobs_as_code.describe(changes):
            print(line)
        print(jobs_as_code.summary(changes, kept))
    if any(c.action == "conflict" for c in changes):
        return 1
    return EXIT_CHANGES if changes else 0


DONE = {"create": "created", "update": "updated", "delete": "deleted"}


def _print_outcomes(outcomes: list[jobs_as_code.Outcome], kept: int) -> None:
    for outcome in outcomes:
        change = outcome.change
        if outcome.error:
            print(f"tickd: {change.action} {change.name}: {outcome.error}", file=sys.stderr)
            continue
        fields = f" ({', '.join(change.fields)})" if change.action == "update" else ""
        print(f"{DONE[change.action]} {change.name}{fields}")
    done = sum(o.error is None for o in outcomes)
    failed = len(outcomes) - done
    print(f"{done} changed, {failed} failed, {kept} unchanged.")


# -- the rest ------------------------------------------------------------------------------------


def schedules_preview(client: Client, args: argparse.Namespace) -> None:
    if args.timezone is not None and args.cron is None:
        raise UsageError("--timezone goes with --cron")
    if args.cron is not None:
        schedule: Json = {"kind": "cron", "expr": args.cron}
        if args.timezone is not None:
            schedule["timezone"] = args.timezone
    elif args.every is not None:
        schedule = {"kind": "interval", "every_seconds": args.every}
    else:
        schedule = {"kind": "once", "at": args.at}
    request = {"schedule": schedule, "name": args.name, "count": args.count, "after": args.after}
    preview = client.preview_schedule({k: v for k, v in request.items() if v is not None})
    print_fire_times(preview, args)


def list_handlers(client: Client, args: argparse.Namespace) -> None:
    handlers = client.get("/v1/handlers")
    if args.json:
        print_json(handlers)
        return
    rows = [
        [
            str(h.get("name")),
            str(h.get("origin")),
            ", ".join(h.get("secret_params") or []) or "-",
            str(h.get("max_concurrency") or "-"),
        ]
        for h in handlers.get("items") or []
    ]
    print_table(("NAME", "ORIGIN", "SECRETS", "CONCURRENCY"), rows, empty="No handlers.")


def show_stats(client: Client, args: argparse.Namespace) -> None:
    stats = client.get("/v1/stats", window=args.window)
    if args.json:
        print_json(stats)
        return
    totals = stats.get("totals") or {}
    attention = stats.get("attention") or {}
    print_fields(
        [
            ("window", seconds_text(stats.get("window_seconds"))),
            ("executions", ", ".join(f"{k} {v}" for k, v in totals.items()) or "none"),
            ("fire lag p50", seconds_text(stats.get("lag_p50_seconds"))),
            ("fire lag p99", seconds_text(stats.get("lag_p99_seconds"))),
            ("due backlog", str(stats.get("due_backlog"))),
            ("busy workers", f"{stats.get('busy_workers', '-')} of {stats.get('workers')}"),
            ("dead letters", str(stats.get("open_dead_letters"))),
            ("failing jobs", str(attention.get("failing_total", 0))),
            ("late jobs", str(attention.get("late_total", 0))),
        ]
    )


def bounces_list(client: Client, args: argparse.Namespace) -> None:
    bounces = client.get("/v1/bounces")
    if args.json:
        print_json(bounces)
        return
    rows = [
        [
            str(b.get("address")),
            str(b.get("count")),
            "yes" if b.get("blocked") else "no",
            when(b.get("last_at")),
            str(b.get("last_error")),
        ]
        for b in bounces.get("items") or []
    ]
    print_table(("ADDRESS", "COUNT", "BLOCKED", "LAST", "LAST ERROR"), rows, empty="No bounces.")


def bounces_clear(client: Client, args: argparse.Namespace) -> None:
    client.clear_bounces(args.address)
    if not args.json:
        print(f"Cleared the bounces of {args.address}.")


def show_session(client: Client, args: argparse.Namespace) -> None:
    session = client.get("/v1/session")
    if args.json:
        print_json(session)
    else:
        print(f"{session.get('actor')} ({session.get('scope')})")


def probe_alive(client: Client, args: argparse.Namespace) -> None:
    health = client.get("/healthz")
    if args.json:
        print_json(health)
    else:
        print(health.get("status"))


def probe_ready(client: Client, args: argparse.Namespace) -> None:
    # Not ready is a 503 with the reasons, which run_client prints, exiting with 1.
    readiness = client.get("/readyz")
    if args.json:
        print_json(readiness)
    else:
        print("ready")


def show_openapi(client: Client, args: argparse.Namespace) -> None:
    print_json(client.get("/openapi.json"))


# -- completion ----------------------------------------------------------------------------------


def command_words(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, list[str]]]:
    """For each command path (`""`, `" jobs"`, `" jobs list"`...), the words that may follow:
    its sub-commands and its options."""
    words: list[str] = []
    below: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append(name)
                below.append((f"{path} {name}", sub))
        else:
            words += [o for o in action.option_strings if o.startswith("--")]
            if action.choices and not action.option_strings:
                words += [str(c) for c in action.choices]
    yield path, words
    for sub_path, sub in below:
        yield from command_words(sub, sub_path)


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    table = "\n".join(
        f'    ["{path}"]="{" ".join(words)}"' for path, words in command_words(parser)
    )
    script = f"""# tickd {shell} completion: source <(tickd completion {shell})
declare -gA _tickd_words=(
{table}
)
_tickd() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" word
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        [[ -n "${{_tickd_words["$path $word"]+set}}" ]] && path="$path $word"
    done
    COMPREPLY=($(compgen -W "${{_tickd_words["$path"]}}" -- "$cur"))
}}
complete -o default -F _tickd tickd
"""
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def run_completion(parser: argparse.ArgumentParser, args: Any) -> int:
    sys.stdout.write(completion_script(parser, args.shell))
    return 0
