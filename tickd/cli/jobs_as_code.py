"""`tickd apply -f FILE` and `tickd diff -f FILE`: jobs as code.

A file holds jobs in the shape POST /v1/jobs takes (JobCreate), as JSON (`{"jobs": [...]}`),
YAML (the same) or TOML (`[[jobs]]` tables), read strictly (tickd/cli/job_files.py); a folder is
every such file under it. Jobs are matched by name (names are unique). A plan holds what
differs: jobs to create, fields to change (a PATCH with the revision read as If-Match, so a
change made meanwhile is refused and reported, never overwritten), and, with prune, the jobs to
delete: only those that apply made with the same owner (`managed_by`: by default the file's or
folder's path), so other files', hand-made and system jobs are never deleted. A job of the file
that exists already but is hand-made or another owner's is a conflict, and refuses the whole
apply, unless --adopt takes it over; a system job is never taken over.

Two rules keep a second apply of the same file a no-op:
- secrets: the API shows them as ***, so a file's params compare equal to the API's when they
  are equal once masked as the API masks them; a new secret alone is no change (it is sent with
  the next change of the job, or set by hand with `tickd jobs patch`);
- `enabled` is compared only when the file sets it: a job paused by hand stays paused;
- so are `concurrency_key` and `concurrency_limit`: a job the file gives no key keeps the one
  its handler gives it (webhook and http_check: the host they call).

A plan shown (`diff`, `apply --dry-run`) is checked by the server first: each create and update
is sent as a dry run (`?dry_run=true`), so a handler or a zone it does not know is refused
there, naming the job and the field, and the plan holds only what apply will do.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tickd.api.models import JobCreate, JobPatch
from tickd.cli import job_files
from tickd.cli.job_files import DefinitionError as DefinitionError
from tickd.cli.output import Json, dumped
from tickd.client import ApiError, Client
from tickd.scheduler.secrets.masking import mask

MAX_OWNER = 100  # the longest mark the API takes (MANAGED_BY_PATTERN)
# The fields of a definition, as JobCreate has them; `managed_by` is the owner mark.
COMPARED = (
    "handler", "schedule", "params", "enabled", "timeout_seconds", "max_retries", "priority",
    "misfire", "jitter_seconds", "redrive", "shards", "domain", "concurrency_key",
    "concurrency_limit",
)  # fmt: skip
# Compared only when the file sets them (see the top).
COMPARED_WHEN_GIVEN = frozenset({"enabled", "concurrency_key", "concurrency_limit"})


@dataclass(frozen=True)
class Definition:
    """A job as a file gives it: its full shape with the defaults, and the fields it set."""

    source: str
    job: Json
    given: frozenset[str]
    # The -f argument it came from (a file or a folder): its owner, unless --owner names one.
    argument: str = ""

    @property
    def name(self) -> str:
        return str(self.job["name"])


@dataclass(frozen=True)
class Change:
    """One step of a plan: `create`, `update` or `delete` a job; `fields` are the differences,
    field -> (as stored, as the file has it), for display."""

    action: str
    name: str
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    body: Json = field(default_factory=dict)
    job_id: str | None = None
    revision: int | None = None


@dataclass(frozen=True)
class Outcome:
    change: Change
    error: str | None = None


# -- reading the files ---------------------------------------------------------------------------


def load_definitions(paths: Sequence[str]) -> list[Definition]:
    """Every job of the files (a folder: its files, by name); a name twice is an error. Every
    mistake of every file is refused at once, a line each, naming the file, line and field."""
    definitions: list[Definition] = []
    errors: list[str] = []
    for argument, path in _files(paths, errors):
        try:
            document = job_files.read_document(path)
        except job_files.Refused as refused:
            errors.append(f"{job_files.at(path, refused.line)}: {refused.message}")
            continue
        definitions += _definitions(path, argument, document, errors)
    errors += _names_twice(definitions)
    if errors:
        raise DefinitionError("\n".join(errors))
    return definitions


def _files(paths: Sequence[str], errors: list[str]) -> Iterator[tuple[str, Path]]:
    """Each file once (a file named twice, or in two folders named, is read once)."""
    seen: set[Path] = set()
    for argument in paths:
        try:
            files = job_files.job_files(argument)
        except DefinitionError as exc:
            errors.append(str(exc))
            continue
        for path in files:
            if path.resolve() not in seen:
                seen.add(path.resolve())
                yield argument, path


def _definitions(
    path: Path, argument: str, document: job_files.Document, errors: list[str]
) -> list[Definition]:
    data = document.data
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        where = job_files.at(path, document.line_of(("jobs",)))
        errors.append(f"{where}: expected a list of jobs under `jobs`")
        return []
    definitions: list[Definition] = []
    for index, job in enumerate(jobs):
        try:
            definitions.append(_definition(path, argument, index, job, document))
        except DefinitionError as exc:
            errors.append(str(exc))
    return definitions


def _names_twice(definitions: Sequence[Definition]) -> list[str]:
    seen: dict[str, str] = {}
    errors: list[str] = []
    for definition in definitions:
        if definition.name in seen:
            first = seen[definition.name]
            errors.append(f"{definition.source}: job {definition.name!r} is also in {first}")
        seen.setdefault(definition.name, definition.source)
    return errors


def _definition(
    path: Path, argument: str, index: int, job: Any, document: job_files.Document
) -> Definition:
    source = f"{path}: jobs[{index}]"
    if not isinstance(job, dict):
        line = document.line_of(("jobs", index))
        raise DefinitionError(
            f"{job_files.at(path, line)}: jobs[{index}]: a job is a table (an object) of fields"
        )
    name = job.get("name")
    label = f"jobs[{index}] ({name})" if isinstance(name, str) else f"jobs[{index}]"

    def refusal(loc: tuple[str | int, ...], message: str) -> DefinitionError:
        line = document.line_of(("jobs", index, *loc))
        return DefinitionError(f"{job_files.at(path, line)}: {label}: {message}")

    if "managed_by" in job:
        raise refusal(("managed_by",), "managed_by: set by apply (--owner), not in the file")
    try:
        # Strict: a file's "off" is no boolean and its "2" no number; JSON text lets the
        # schedule's kind, the priority and times be the strings they are.
        model = JobCreate.model_validate_json(json.dumps(job), strict=True)
    except ValidationError as exc:
        first = exc.errors(include_url=False)
        loc = tuple(first[0]["loc"]) if first else ()
        reasons = "; ".join(_reason(error) for error in first)
        raise refusal(loc, reasons) from None
    job = model.model_dump(mode="json", exclude={"managed_by"})
    return Definition(source, job, frozenset(model.model_fields_set), argument)


def _reason(error: Any) -> str:
    path = ".".join(str(p) for p in error["loc"] if p not in ("cron", "interval", "once"))
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{path}: {message}" if path else message


# -- the plan ------------------------------------------------------------------------------------


def plan(
    client: Client,
    definitions: Sequence[Definition],
    *,
    owner: str | None,
    prune: bool,
    adopt: bool = False,
    files: Sequence[str] = (),
) -> list[Change]:
    """What applying the definitions changes, against the jobs the API has now. `owner` None:
    each job's owner is its -f argument's (owner_of); the jobs of every argument given (and
    `files`, an empty folder's) are this apply's to change and, with prune, to delete."""
    current = {job.name: dumped(job) for job in client.iter_jobs()}
    secrets = _secret_params(client) if definitions else {}
    ours = {owner} if owner else {owner_of(f) for f in (*files, *(d.argument for d in definitions))}
    keeper = Keeper(owner, frozenset(ours), adopt)
    changes = [_change(d, current.get(d.name), keeper, secrets) for d in definitions]
    if prune:
        wanted = {d.name for d in definitions}
        changes += [
            Change("delete", name, job_id=job["id"], revision=job.get("revision"))
            for name, job in sorted(current.items())
            if name not in wanted and job.get("managed_by") in ours and not job.get("system")
        ]
    return [c for c in changes if c.action != "keep"]


def owner_of(argument: str) -> str:
    """The owner (`managed_by`) of the jobs of one -f argument when --owner names none: `file:`
    and its path, relative to the working folder when under it, absolute otherwise; a folder's
    own path for every file in it. Characters a mark cannot hold become `-`; a path too long for
    100 keeps its end, after a digest of the whole."""
    path = Path(argument).resolve()
    try:
        shown = path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        shown = path.as_posix()
    mark = "file:" + re.sub(r"[^A-Za-z0-9._:@/-]", "-", shown)
    if len(mark) <= MAX_OWNER:
        return mark
    digest = hashlib.sha256(shown.encode()).hexdigest()[:12]
    head = f"file:{digest}:"
    return head + mark[len(mark) - (MAX_OWNER - len(head)) :]


@dataclass(frozen=True)
class Keeper:
    """Who this apply is: its own mark (None: each file's), the marks whose jobs it may change,
    and whether it takes over the jobs of others and of no one (--adopt)."""

    owner: str | None
    ours: frozenset[str]
    adopt: bool

    def mark(self, definition: Definition) -> str:
        return self.owner or owner_of(definition.argument)

    def refusal(self, job: Json, mine: str) -> str | None:
        """Why the job is not this apply's to change; None: it is."""
        if job.get("system"):
            return "a system job (tickd's own): never taken over"
        current = job.get("managed_by")
        if current in self.ours or self.adopt:
            return None
        if current is None:
            return "made by hand (no owner): not taken over (--adopt takes it)"
        return (
            f"managed by {current!r}, not {mine!r}: not taken over "
            f"(--adopt takes it, or apply as --owner {current})"
        )


def _secret_params(client: Client) -> dict[str, frozenset[str]]:
    return {h.name: frozenset(h.secret_params) for h in client.list_handlers().items}


def _change(
    definition: Definition, job: Json | None, keeper: Keeper, secrets: dict[str, frozenset[str]]
) -> Change:
    declared = secrets.get(definition.job["handler"], frozenset())
    mine = keeper.mark(definition)
    if job is None:
        body = {**definition.job, "managed_by": mine}
        shown = {k: (None, _shown(k, v, declared)) for k, v in definition.job.items()}
        return Change("create", definition.name, shown, body)
    refusal = keeper.refusal(job, mine)
    if refusal is not None:
        return Change("conflict", definition.name, {"managed_by": (job.get("managed_by"), refusal)})
    fields = {
        key: (job.get(key), _shown(key, definition.job[key], declared))
        for key in COMPARED
        if (key not in COMPARED_WHEN_GIVEN or key in definition.given)
        and not _same(key, definition.job[key], job.get(key), declared)
    }
    if job.get("managed_by") != mine:
        fields["managed_by"] = (job.get("managed_by"), mine)
    if not fields:
        return Change("keep", definition.name)
    body = {key: definition.job[key] for key in fields if key != "managed_by"}
    body["managed_by"] = mine
    return Change("update", definition.name, fields, body, job["id"], job.get("revision"))


def _same(key: str, wanted: Any, stored: Any, declared: frozenset[str]) -> bool:
    if key == "params":
        return bool(mask(wanted, declared) == stored)
    if key == "schedule" and isinstance(wanted, dict) and isinstance(stored, dict):
        return _instants(wanted) == _instants(stored)
    return bool(wanted == stored)


def _instants(schedule: Json) -> Json:
    """A once schedule's `at` as an instant: 09:00Z and 10:00+01:00 are the same time."""
    at = schedule.get("at")
    if isinstance(at, str):
        return {**schedule, "at": datetime.fromisoformat(at.replace("Z", "+00:00"))}
    return schedule


def _shown(key: str, value: Any, declared: frozenset[str]) -> Any:
    return mask(value, declared) if key == "params" else value


# -- checking it on the server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A change the server refuses, and why: (field, reason) for each field it names."""

    change: Change
    reasons: list[tuple[str, str]]


def rehearse(client: Client, changes: Iterable[Change]) -> list[Refusal]:
    """Each create and update sent as a dry run: every check the write gets, nothing written.
    The refusals, in the plan's order."""
    refusals = []
    for change in changes:
        if change.action not in ("create", "update"):
            continue
        try:
            _send(client, change, dry_run=True)
        except ApiError as exc:
            refusals.append(Refusal(change, _reasons(exc)))
    return refusals


def _reasons(problem: ApiError) -> list[tuple[str, str]]:
    if problem.errors and problem.status != 412:
        return [(e.field, e.reason) for e in problem.errors]
    return [("", _problem_text(problem))]


# -- applying it ---------------------------------------------------------------------------------


def apply(client: Client, changes: Iterable[Change]) -> list[Outcome]:
    """Each change, in order; one that fails (a job changed meanwhile: 412) does not stop the
    others."""
    return [_apply_one(client, change) for change in changes]


def _apply_one(client: Client, change: Change) -> Outcome:
    if change.action == "conflict":
        return Outcome(change, change.fields["managed_by"][1])
    try:
        _send(client, change)
    except ApiError as exc:
        return Outcome(change, _problem_text(exc))
    return Outcome(change)


def _send(client: Client, change: Change, *, dry_run: bool = False) -> None:
    if change.action == "create":
        client.create_job(JobCreate.model_validate(change.body), dry_run=dry_run)
    elif change.action == "update":
        assert change.job_id is not None
        patch = JobPatch.model_validate(change.body)
        client.patch_job(change.job_id, patch, if_match=change.revision, dry_run=dry_run)
    elif change.action == "delete" and not dry_run:
        assert change.job_id is not None
        client.delete_job(change.job_id, if_match=change.revision)


def _problem_text(problem: ApiError) -> str:
    if problem.status == 412:
        return (
            "changed meanwhile (its revision moved since it was read): left as it is; apply again"
        )
    if problem.errors:
        return "; ".join(f"{e.field}: {e.reason}" for e in problem.errors)
    return f"{problem.status} {problem.title}" + (f": {problem.detail}" if problem.detail else "")


# -- showing it ----------------------------------------------------------------------------------

SIGNS = {"create": "+", "update": "~", "delete": "-", "conflict": "!"}


def describe(changes: Sequence[Change]) -> list[str]:
    """The plan, a job a line and a field a line below it."""
    lines: list[str] = []
    for change in changes:
        lines.append(f"{SIGNS[change.action]} {change.action} {change.name}")
        if change.action == "conflict":
            lines.append(f"    {change.fields['managed_by'][1]}")
            continue
        for key, (before, after) in change.fields.items():
            if change.action == "create":
                lines.append(f"    {key}: {_value(after)}")
            else:
                lines.append(f"    {key}: {_value(before)} -> {_value(after)}")
    return lines


def summary(changes: Sequence[Change], kept: int, refused: int = 0) -> str:
    counts = {a: sum(c.action == a for c in changes) for a in ("create", "update", "delete")}
    parts = [f"{n} to {a}" for a, n in counts.items() if n]
    shown = ", ".join(parts) if parts else "Nothing to change"
    if refused:
        shown += f", {refused} refused"
    return shown + f"; {kept} unchanged."


def refusal_lines(refusals: Sequence[Refusal]) -> list[str]:
    """A line for each field the server refuses, naming the change's job."""
    return [
        f"{r.change.action} {r.change.name}: " + (f"{field}: {reason}" if field else reason)
        for r in refusals
        for field, reason in r.reasons
    ]


def as_json(change: Change, error: str | None = None) -> Json:
    out: Json = {
        "action": change.action,
        "name": change.name,
        "fields": {k: {"from": b, "to": a} for k, (b, a) in change.fields.items()},
    }
    if error is not None:
        out["error"] = error
    return out


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
