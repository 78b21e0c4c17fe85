"""`tickd apply -f FILE` and `tickd diff -f FILE`: jobs as code (tickd/cli/jobs_as_code.py).

Exit codes: 0 nothing to do, or done; 1 failed (an API error, a job changed meanwhile, a job
another owner manages); 2 a usage error (a file that is no job definition); 3 (with --dry-run,
and diff) there are changes to make.
"""

from __future__ import annotations

import argparse
import re
import sys

from tickd.api.models import MANAGED_BY_PATTERN
from tickd.cli import jobs_as_code
from tickd.cli.connect import Subparsers, UsageError
from tickd.cli.output import print_json
from tickd.client import Client

EXIT_CHANGES = 3


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
