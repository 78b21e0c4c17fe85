"""From a validated request to a Job: the request models turned into a JobSpec or a changed Job,
checked by scheduler/jobspec.py's JobRules (as the seeds are), secrets a client sent back masked
kept, the history entry of a change, and who may touch system jobs. And the jobs list's query:
what GET /v1/jobs asks the store for (ports.JobSearch).

Every check runs before anything is written; each failure names its field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from pydantic import BaseModel, Field
from pydantic import ValidationError as ModelError

from tickd.api.models import (
    CronScheduleIn,
    IntervalScheduleIn,
    JobCreate,
    JobListQuery,
    JobPage,
    JobPatch,
    MisfireIn,
    OnceScheduleIn,
    RedriveIn,
)
from tickd.api.problems import ApiError, field_error, validation_problems
from tickd.scheduler.codec import job_to_doc, schedule_from_doc, to_json_ready
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.jobspec import JobRules, JobSpec
from tickd.scheduler.model import (
    Job,
    Misfire,
    OnceSchedule,
    Priority,
    RedrivePolicy,
    Schedule,
    Status,
    ValidationError,
    new_id,
)
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import JobChange, JobOrder, JobSearch
from tickd.scheduler.schedule.schedules import first_fire, next_fire
from tickd.scheduler.secrets.masking import MASK, is_secret_name, mask, restore_masked

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

# Fields whose change is recorded in the history (the engine's own fields are not).
TRACKED = [
    "name", "handler", "schedule", "params", "enabled", "timeout_seconds", "max_retries",
    "priority", "misfire", "jitter_seconds", "paused_reason", "redrive", "shards", "managed_by",
    "domain", "concurrency_key", "concurrency_limit",
]  # fmt: skip


def to_schedule(schedule: CronScheduleIn | IntervalScheduleIn | OnceScheduleIn) -> Schedule:
    with validation_problems():
        return schedule_from_doc(schedule.model_dump())


def secret_names(registry: HandlerRegistry, handler: str) -> frozenset[str]:
    registered = registry.get(handler)
    return registered.handler.secret_params if registered else frozenset()


def masked_params(job: Job, registry: HandlerRegistry) -> dict[str, Any]:
    masked: dict[str, Any] = mask(job.params, secret_names(registry, job.handler))
    return masked


def keep_masked_secrets(
    new: Mapping[str, Any], old: Mapping[str, Any], declared: frozenset[str], where: str = "params"
) -> dict[str, Any]:
    """A client that read a job (secrets shown as ***) and sends it back must not overwrite the
    secrets with ***: a masked value, or a masked part of a string (`user:***@`, `?token=***`),
    means "unchanged"."""
    kept: dict[str, Any] = {}
    for key, value in new.items():
        if value == MASK and is_secret_name(key, declared) and key in old:
            kept[key] = old[key]
        else:
            kept[key] = _kept(value, old.get(key), declared, f"{where}.{key}")
    return kept


def _kept(new: Any, old: Any, declared: frozenset[str], where: str) -> Any:
    if isinstance(new, Mapping):
        return keep_masked_secrets(new, old if isinstance(old, Mapping) else {}, declared, where)
    if isinstance(new, list):
        olds = old if isinstance(old, list) else []
        return [
            _kept(item, olds[i] if i < len(olds) else None, declared, f"{where}.{i}")
            for i, item in enumerate(new)
        ]
    if isinstance(new, str):
        restored = restore_masked(new, old if isinstance(old, str) else None)
        if restored is None:
            # Kept as sent, the stored secret would become "***"; put back into another URL,
            # it would go to another host.
            raise field_error(
                where,
                f"holds a masked secret ({MASK}) that can only be kept unchanged, in a value "
                "otherwise as stored: send the secret itself",
            )
        return restored
    return new


class JobBuilder:
    """From the API's request models to a Job, through the checks every job passes
    (scheduler/jobspec.py): the seeds go through the same ones."""

    def __init__(self, registry: HandlerRegistry, settings: Settings) -> None:
        self.registry = registry
        self.rules = JobRules(registry, settings)
        self.lookahead = timedelta(seconds=settings.lookahead_seconds)

    def create(self, body: JobCreate, now: datetime) -> Job:
        spec = JobSpec(
            name=body.name,
            handler=body.handler,
            schedule=to_schedule(body.schedule),
            params=body.params,
            enabled=body.enabled,
            timeout_seconds=body.timeout_seconds,
            max_retries=body.max_retries,
            priority=Priority.parse(body.priority),
            misfire=_misfire(body.misfire),
            jitter_seconds=body.jitter_seconds,
            redrive=_redrive(body.redrive),
            shards=body.shards,
            managed_by=body.managed_by,
            domain=body.domain,
            concurrency_key=body.concurrency_key,
            concurrency_limit=body.concurrency_limit,
        )
        with validation_problems():
            return self.rules.build(spec, now)

    def replace(self, job: Job, body: JobCreate, now: datetime) -> Job:
        """PUT: the whole definition, as for a create."""
        return self.patch(job, JobPatch.model_validate(body.model_dump()), now)

    def patch(self, job: Job, body: JobPatch, now: datetime) -> Job:
        fields = body.model_dump(exclude_unset=True)
        handler = body.handler or job.handler
        params = job.params
        if body.params is not None:
            params = keep_masked_secrets(
                body.params, job.params, secret_names(self.registry, handler)
            )
        with validation_problems():  # the model checks a key and its limit together
            changed = self._changed(job, body, fields, params, now)
        # A key or limit given by hand is kept as given (null: the handler's default again).
        by_hand = fields.keys() & {"concurrency_key", "concurrency_limit"}
        changed = self.rules.with_default_key(changed, before=None if by_hand else job)
        with validation_problems():
            self.rules.check(changed, now, new_schedule="schedule" in fields)
            _check_not_spent(job, changed)
            _check_system_unowned(job, changed)
            # Resumed, a schedule checked when it was stored may fire no more (NoFireTime).
            return self._rescheduled(job, changed, now)

    def _changed(
        self,
        job: Job,
        body: JobPatch,
        fields: dict[str, Any],
        params: dict[str, Any],
        now: datetime,
    ) -> Job:
        handler = body.handler or job.handler
        return replace(
            job,
            name=body.name or job.name,
            handler=handler,
            schedule=to_schedule(body.schedule) if body.schedule is not None else job.schedule,
            params=params,
            enabled=_given(body.enabled, job.enabled),
            timeout_seconds=body.timeout_seconds or job.timeout_seconds,
            max_retries=_given(body.max_retries, job.max_retries),
            priority=Priority.parse(body.priority) if body.priority else job.priority,
            misfire=_misfire(body.misfire) if body.misfire else job.misfire,
            jitter_seconds=_given(body.jitter_seconds, job.jitter_seconds),
            redrive=_redrive(body.redrive) if "redrive" in fields else job.redrive,
            shards=_given(body.shards, job.shards),
            managed_by=_given(body.managed_by, job.managed_by),
            domain=_given(body.domain, job.domain),
            # null removes the key (and its limit with it, or the model refuses the pair).
            concurrency_key=_set(fields, "concurrency_key", job.concurrency_key),
            concurrency_limit=_set(fields, "concurrency_limit", job.concurrency_limit),
            updated_at=now,
        )

    def _rescheduled(self, before: Job, after: Job, now: datetime) -> Job:
        """A new schedule, or a job coming back to life, fires from now on; otherwise the next
        fire time stands."""
        if after.schedule != before.schedule or (after.enabled and not before.enabled):
            next_run = first_fire(after.schedule, now, job_name=after.name)
            if next_run is not None and self._claimed_already(before, after, next_run, now):
                next_run = next_fire(after.schedule, next_run, job_name=after.name)
            return replace(after, next_run_at=next_run, paused_reason=None, consecutive_failures=0)
        if not after.enabled:
            return after
        return replace(after, paused_reason=None)

    def _claimed_already(self, before: Job, after: Job, next_run: datetime, now: datetime) -> bool:
        """The new schedule's first time is the one a run has claimed already, ahead of it
        (the lease of an enabled job due within the lookahead is that claim's, not a trigger's:
        one running for a job due later does not claim its time). That run fires it; written
        as the next time, it would also let the run's end move the job on by the old
        schedule, since the job would look as that run claimed it (ports.Advance)."""
        due = before.next_run_at
        return (
            due is not None
            and next_run == due
            and before.lease is not None
            and before.enabled
            and due <= now + self.lookahead
            and not isinstance(after.schedule, OnceSchedule)
        )

    def check_schedule(self, schedule: Schedule, name: str) -> None:
        with validation_problems():
            self.rules.check_schedule(schedule, name)


# -- a body the model refused in part --------------------------------------------------------------

# A value for each field a definition needs, standing in for one the model refused, so that the
# rules can check the others; what the rules find on a stand-in is not reported.
STAND_INS: dict[str, Any] = {
    "name": "stand-in",
    "handler": "stand-in",
    "schedule": {"kind": "interval", "every_seconds": 60},
}
# Findings on a field that rest on another one too: the params and the shards are checked
# against the handler, the jitter against the schedule.
RESTS_ON = {"params": "handler", "shards": "handler", "jitter_seconds": "schedule"}


def accepted_part(model: type[M], doc: Mapping[str, Any], refused: frozenset[str]) -> M | None:
    """The fields of a body that its model accepted, read as the model reads a body, with
    stand-ins for the refused ones it needs; None if even that is refused."""
    kept = {name: value for name, value in doc.items() if name not in refused}
    needed = {
        name: value
        for name, value in STAND_INS.items()
        if name in refused and model.model_fields[name].is_required()
    }
    try:
        return model.model_validate_json(json.dumps({**needed, **kept}), strict=True)
    except ModelError:
        return None


def refusals_beside(build: Callable[[], Job], refused: frozenset[str]) -> list[tuple[str, str]]:
    """The fields at fault `build` names (a job built from the accepted part of a body), but
    for those its model refused and what rests on them: the model's reasons name those."""
    try:
        build()
    except ApiError as refusal:
        if refusal.status != 422:
            return []
        return [
            (error["field"], error["reason"])
            for error in refusal.errors
            if not _rests_on_refused(error["field"], refused)
        ]
    return []


def _rests_on_refused(field: str, refused: frozenset[str]) -> bool:
    top = field.split(".")[0]
    return top in refused or RESTS_ON.get(top) in refused


def _check_not_spent(before: Job, after: Job) -> None:
    """A once job whose time has been run (or skipped) has no next run. Brought back to life
    as it is, it would fire at its past time at once: that run again."""
    spent = before.next_run_at is None and not before.enabled
    resumed = after.enabled and after.schedule == before.schedule
    if spent and resumed and isinstance(after.schedule, OnceSchedule):
        raise ValidationError(
            "enabled", "this once job has had its run: give it a new schedule.at to run it again"
        )


def _check_system_unowned(before: Job, after: Job) -> None:
    """A system job is tickd's own: no client takes it over, so none prunes it."""
    if before.system and after.managed_by != before.managed_by:
        raise ValidationError("managed_by", "a system job is tickd's own: it takes no owner")


def _given(value: T | None, current: T) -> T:
    return current if value is None else value


def _set(fields: dict[str, Any], name: str, current: T | None) -> T | None:
    """A field the body sets, null included; `current` when it leaves it out."""
    return cast(T | None, fields[name]) if name in fields else current


def _misfire(body: MisfireIn) -> Misfire:
    return Misfire(policy=body.policy, grace_seconds=body.grace_seconds)


def _redrive(body: RedriveIn | None) -> RedrivePolicy | None:
    if body is None:
        return None
    return RedrivePolicy(max_attempts=body.max_attempts, backoff_seconds=body.backoff_seconds)


def change_entry(
    action: str,
    before: Job | None,
    after: Job | None,
    actor: str,
    now: datetime,
    registry: HandlerRegistry,
) -> JobChange:
    """The history entry of a change: only the fields that moved, secrets masked."""
    job = after or before
    assert job is not None
    old = _tracked(before, registry)
    new = _tracked(after, registry)
    changes = {
        k: {"from": old.get(k), "to": new.get(k)} for k in TRACKED if old.get(k) != new.get(k)
    }
    return JobChange(
        id=new_id(),
        job_id=job.id,
        job_name=job.name,
        at=now,
        actor=actor,
        action=action,
        changes=changes,
    )


def _tracked(job: Job | None, registry: HandlerRegistry) -> dict[str, Any]:
    if job is None:
        return {}
    doc = to_json_ready(job_to_doc(job))
    doc["params"] = masked_params(job, registry)
    doc["priority"] = Priority(job.priority).name.lower()
    return {k: doc[k] for k in TRACKED}


def definition_changed(before: Job, after: Job) -> bool:
    """Whether a tracked field moved, secrets compared as stored (the history masks them)."""
    return any(getattr(before, name) != getattr(after, name) for name in TRACKED)


def is_system_handler(registry: HandlerRegistry, handler: str) -> bool:
    """A handler that declares a system job (the alert scanner, which mails customers)."""
    registered = registry.get(handler)
    return registered is not None and registered.handler.system_job is not None


def guard_system(job: Job, scope: str, registry: HandlerRegistry) -> None:
    """System jobs (seeded, `system`) and every job on a system handler are created, changed,
    run and deleted with an admin token only."""
    if scope == "admin":
        return
    if job.system:
        raise ApiError(403, "Forbidden", "a system job: this needs a token with the admin scope")
    if is_system_handler(registry, job.handler):
        raise ApiError(
            403,
            "Forbidden",
            f"{job.handler!r} is a system handler: its jobs need a token with the admin scope",
        )


# -- the jobs list --------------------------------------------------------------------------------


# What a run ends as: the statuses a job's last run may have.
ENDED_STATUSES = [str(s) for s in Status if s is not Status.RUNNING]
ENDED = "|".join(ENDED_STATUSES)


class JobSearchQuery(JobListQuery):
    q: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Part of the job's name or id, anywhere in it (ASCII case ignored)",
    )
    last_status: str | None = Field(
        default=None,
        max_length=200,
        pattern=rf"^({ENDED})(,({ENDED}))*$",
        description="The status of the job's last run, one of a comma-separated list: "
        + ", ".join(ENDED_STATUSES),
    )
    sort: JobOrder = Field(
        default=JobOrder.NAME,
        description="`name`, or `next_run`: the soonest first, jobs with no next run last",
    )
    total: bool = Field(default=False, description="Count the jobs the filters keep, every page")


def last_statuses(value: str | None) -> frozenset[Status]:
    """The statuses of a `last_status` its pattern let through."""
    return frozenset() if value is None else frozenset(Status(name) for name in value.split(","))


class JobListPage(JobPage):
    total: int | None = Field(
        default=None, description="How many jobs the filters keep in all (with `total=true`)"
    )


def job_search(
    q: JobSearchQuery, after_name: str | None, after_next_run_at: datetime | None
) -> JobSearch:
    """The store's search for a page of the list, one more than asked: whether there is more."""
    return JobSearch(
        text=q.q,
        handler=q.handler,
        domain=q.domain,
        enabled=q.enabled,
        name_prefix=q.name_prefix,
        next_run_from=q.next_run_from,
        next_run_to=q.next_run_to,
        last_status=last_statuses(q.last_status),
        order=q.sort,
        after_name=after_name,
        after_next_run_at=after_next_run_at,
        limit=q.limit + 1,
    )
