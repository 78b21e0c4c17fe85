"""`tickd apply -f FILE` and `tickd diff -f FILE`: jobs as code (tickd/cli/jobs_as_code.py).

Exit codes: 0 nothing to do, or done; 1 failed (an API error, a job changed meanwhile; with
--dry-run and diff, a change the server refuses), or refused whole, nothing applied (a job of
the file is hand-made, another owner's or a system job: --adopt takes over the first two, never
a system job); 2 a usage error (a file that is no job definition); 3 (with --dry-run, and diff)
there are changes to make.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from tickd.api.models import MANAGED_BY_PATTERN
from tickd.cli import jobs_as_code
from tickd.cli.connect import UsageError
from tickd.cli.output import print_json

if TYPE_CHECKING:
    from tickd.client import Client

EXIT_CHANGES = 3


def apply_files(client: Client, args: argparse.Namespace) -> int:
    if args.owner is not None and not re.fullmatch(MANAGED_BY_PATTERN, args.owner):
        raise UsageError(
            f"--owner {args.owner!r}: up to 100 letters, digits and . _ : @ / -, "
            "starting with a letter or digit"
        )
    try:
        definitions = jobs_as_code.load_definitions(args.file)
    except jobs_as_code.DefinitionError as exc:
        raise UsageError(str(exc)) from None
    changes = jobs_as_code.plan(
        client,
        definitions,
        owner=args.owner,
        prune=args.prune,
        adopt=args.adopt,
        files=args.file,
    )
    kept = len(definitions) - sum(c.action != "delete" for c in changes)
    if args.dry_run:
        return _show_plan(changes, jobs_as_code.rehearse(client, changes), kept, args)
    conflicts = [c for c in changes if c.action == "conflict"]
    if conflicts:
        return _refuse(conflicts, kept, args)
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


def _show_plan(
    changes: list[jobs_as_code.Change],
    refusals: list[jobs_as_code.Refusal],
    kept: int,
    args: argparse.Namespace,
) -> int:
    """The server's refusals first (a line per field), then the plan of what apply will do:
    the refused changes are not in it."""
    refused = [r.change for r in refusals]
    planned = [c for c in changes if c not in refused]
    if args.json:
        shown: dict[str, object] = {"changes": [jobs_as_code.as_json(c) for c in planned]}
        if refusals:
            shown["refused"] = [_refusal_json(r) for r in refusals]
        print_json({**shown, "unchanged": kept})
    else:
        for line in jobs_as_code.refusal_lines(refusals):
            print(f"tickd: refused: {line}", file=sys.stderr)
        for line in jobs_as_code.describe(planned):
            print(line)
        print(jobs_as_code.summary(planned, kept, len(refusals)))
    if refusals or any(c.action == "conflict" for c in changes):
        return 1
    return EXIT_CHANGES if changes else 0


def _refusal_json(refusal: jobs_as_code.Refusal) -> dict[str, object]:
    return {
        "action": refusal.change.action,
        "name": refusal.change.name,
        "errors": [{"field": f, "reason": r} for f, r in refusal.reasons],
    }


def _refuse(conflicts: list[jobs_as_code.Change], kept: int, args: argparse.Namespace) -> int:
    """Jobs that are not this apply's to change refuse it whole: nothing is applied."""
    reasons = [c.fields["managed_by"][1] for c in conflicts]
    if args.json:
        print_json(
            {
                "changes": [
                    jobs_as_code.as_json(c, r) for c, r in zip(conflicts, reasons, strict=True)
                ],
                "unchanged": kept,
                "applied": False,
            }
        )
        return 1
    for change, reason in zip(conflicts, reasons, strict=True):
        print(f"tickd: conflict {change.name}: {reason}", file=sys.stderr)
    count = "1 job is" if len(conflicts) == 1 else f"{len(conflicts)} jobs are"
    print(f"tickd: nothing applied: {count} not this file's to change", file=sys.stderr)
    return 1


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
