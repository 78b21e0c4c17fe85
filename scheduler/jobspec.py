"""A job's definition, checked the same way wherever it comes from: the API (api/jobs.py turns
its request models into a JobSpec) and the seeds (the system jobs handlers declare, the demo jobs).

`JobRules.build` checks what needs the registry, the settings or the clock (a schedule that
parses and fires, a registered handler, params its schema and its own checks accept, a timeout
under the ceiling, jitter under the period, a once schedule in the future) and the bounds the
API's models also state. Each failure is a ValidationError naming the field; a definition with
several is refused with all of them at once (Refusals), so a user fixes them in one go.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import jsonschema

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.domains import DEFAULT_DOMAIN
from tickd.scheduler.keys import is_key
from tickd.scheduler.model import (
    CronSchedule,
    IntervalSchedule,
    Job,
    Misfire,
    OnceSchedule,
    Priority,
    RedrivePolicy,
    Schedule,
    ValidationError,
)
from tickd.scheduler.plugin.api import ParamsCheck
from tickd.scheduler.plugin.http import DestinationPolicy
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.schedule.cron import parse
from tickd.scheduler.schedule.schedules import (
    checked_zone,
    first_fire,
    next_fire,
    shortest_gap,
    six_fields,
)
from tickd.scheduler.secrets.masking import is_secret_name, scrub_text, scrub_values, secret_values

# The bounds of a definition (api/models.py states the same ones in the OpenAPI document).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"
# A run's deadline: below a second, the lock, the lease and the dispatcher's tick (one second)
# leave no time for the handler itself.
MIN_TIMEOUT_SECONDS = 1.0
MAX_RETRIES = 100
MIN_INTERVAL_SECONDS = 1
MAX_INTERVAL_SECONDS = 366 * 86400
MAX_JITTER_SECONDS = 86400
MAX_GRACE_SECONDS = 7 * 86400
# Where a cron expression is first evaluated, to refuse one that never fires.
NEVER_FIRES_CHECK_FROM = datetime(2000, 1, 1, tzinfo=UTC)

_NAME = re.compile(NAME_PATTERN)


class Refusals(ValidationError):
    """Every field a definition gets wrong; as a ValidationError, the first of them."""

    def __init__(self, errors: Sequence[ValidationError]) -> None:
        super().__init__(errors[0].field, errors[0].reason)
        self.args = ("; ".join(f"{e.field}: {e.reason}" for e in errors),)
        self.errors = list(errors)


class Findings:
    """The ValidationErrors of independent checks, gathered: one check failing does not hide
    the next one's."""

    def __init__(self) -> None:
        self.errors: list[ValidationError] = []

    @contextmanager
    def check(self) -> Iterator[None]:
        try:
            yield
        except Refusals as refusals:
            self.errors += refusals.errors
        except ValidationError as error:
            self.errors.append(error)

    def raise_any(self) -> None:
        """One error as itself, several as Refusals."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise Refusals(self.errors)


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What a job is to be; `JobRules.build` turns it into a checked Job."""

    name: str
    handler: str
    schedule: Schedule
    params: Mapping[str, Any] = field(default_factory=dict)
    enabled: bool = True
    timeout_seconds: float = 60.0
    max_retries: int = 0
    priority: Priority = Priority.NORMAL
    misfire: Misfire = field(default_factory=Misfire)
    jitter_seconds: float = 0.0
    # Dead letters re-driven automatically (None: by hand only).
    redrive: RedrivePolicy | None = None
    # Each occurrence runs as this many executions (scheduler/schedule/shards.py).
    shards: int = 1
    system: bool = False
    managed_by: str | None = None
    # The team or tenant the job belongs to (scheduler/domains.py).
    domain: str = DEFAULT_DOMAIN
    # Runs of the jobs naming the key, at most the limit in flight at once (scheduler/keys.py).
    concurrency_key: str | None = None
    concurrency_limit: int | None = None


class JobRules:
    """The checks every job passes before it is stored, with the registry and settings they
    need."""

    def __init__(self, registry: HandlerRegistry, settings: Settings) -> None:
        self.registry = registry
        self.settings = settings

    def build(self, spec: JobSpec, now: datetime) -> Job:
        """A new job, checked, its first fire time computed from `now`."""
        job = Job(
            name=spec.name,
            handler=spec.handler,
            schedule=spec.schedule,
            params=dict(spec.params),
            enabled=spec.enabled,
            timeout_seconds=spec.timeout_seconds,
            max_retries=spec.max_retries,
            priority=spec.priority,
            misfire=spec.misfire,
            jitter_seconds=spec.jitter_seconds,
            redrive=spec.redrive,
            shards=spec.shards,
            system=spec.system,
            managed_by=spec.managed_by,
            domain=spec.domain,
            concurrency_key=spec.concurrency_key,
            concurrency_limit=spec.concurrency_limit,
            created_at=now,
            updated_at=now,
        )
        job = self.with_default_key(job)
        found = Findings()
        with found.check():
            check_bounds(job)
        with found.check():
            self.check(job, now, new_schedule=True)
        found.raise_any()
        return replace(job, next_run_at=first_fire(job.schedule, now, job_name=job.name))

    def with_default_key(self, job: Job, before: Job | None = None) -> Job:
        """A job that names no concurrency key gets its handler's default (webhook, http_check:
        the host they call) with the default_concurrency_limit. A key so given follows the
        params when they change (`before`: the job as stored, for a change that sets no key or
        limit); one named by hand, or whose limit was changed by hand, stays."""
        if before is not None and self._has_default_key(before):
            job = replace(job, concurrency_key=None, concurrency_limit=None)  # derived again
        limit = self.settings.default_concurrency_limit
        if job.concurrency_key is not None or job.shards != 1 or not limit:
            return job
        key = self._default_key(job.handler, job.params)
        return job if key is None else replace(job, concurrency_key=key, concurrency_limit=limit)

    def _default_key(self, handler: str, params: Mapping[str, Any]) -> str | None:
        """The handler's key for `params`, read before their checks: a plug-in's function that
        fails on them, or gives what is no key, gives none (the params' checks report them)."""
        registered = self.registry.get(handler)
        if registered is None or registered.handler.default_key is None:
            return None
        try:
            key = registered.handler.default_key(params)
        except Exception:
            return None
        return key if is_key(key) else None

    def _has_default_key(self, job: Job) -> bool:
        """Whether the job's key and limit are those its handler gives it, not set by hand."""
        return (
            job.concurrency_key is not None
            and job.concurrency_key == self._default_key(job.handler, job.params)
            and job.concurrency_limit == self.settings.default_concurrency_limit
        )

    def check(self, job: Job, now: datetime, *, new_schedule: bool) -> None:
        """A new or changed definition; `new_schedule`: a once schedule must lie ahead. Every
        failing check is reported (Refusals); those that need a valid schedule run only on one."""
        found = Findings()
        with found.check():
            self.check_schedule(job.schedule, job.name)
        schedule_valid = not found.errors
        with found.check():
            self.check_handler(job.handler, job.params)
        with found.check():
            self._check_shards(job)
        with found.check():
            self._check_timeout(job)
        if schedule_valid:
            with found.check():
                _check_ahead(job, now, new_schedule=new_schedule)
            with found.check():
                _check_jitter(job.schedule, job.jitter_seconds, job.name, now)
        found.raise_any()

    def _check_timeout(self, job: Job) -> None:
        if job.timeout_seconds > self.settings.max_timeout_seconds:
            limit = f"{self.settings.max_timeout_seconds:g}"
            raise ValidationError(
                "timeout_seconds", f"must not exceed {limit} (max_timeout_seconds)"
            )

    def check_schedule(self, schedule: Schedule, name: str) -> None:
        """A cron schedule's zone and expression, each checked (both reported when both are
        wrong); then whether it ever fires."""
        if not isinstance(schedule, CronSchedule):
            return
        found = Findings()
        with found.check():
            checked_zone(schedule.timezone)
        with found.check():
            parse(six_fields(schedule.expr), name)
        found.raise_any()
        # It parses, but does it ever fire? `0 0 0 30 2 *` (February 30th) does not
        # (NoFireTime).
        next_fire(schedule, NEVER_FIRES_CHECK_FROM, job_name=name)

    def check_handler(self, handler: str, params: Mapping[str, Any]) -> None:
        registered = self.registry.get(handler)
        if registered is None:
            known = ", ".join(r.name for r in self.registry) or "none"
            raise ValidationError("handler", f"no handler named {handler!r} (registered: {known})")
        schema = registered.handler.params_schema
        if schema is None:
            return
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(dict(schema)).iter_errors(dict(params))
        )
        if error is not None:
            path = ".".join(str(p) for p in error.absolute_path)
            message = _safe_message(error, params, registered.handler.secret_params)
            raise ValidationError(f"params.{path}" if path else "params", message)
        if registered.handler.check_params is not None:
            self._check_params(registered.handler.check_params, params)

    def _check_shards(self, job: Job) -> None:
        """Every shard of an occurrence runs at once: more than the handler may run at once
        could never start together."""
        limit = self.settings.handler_concurrency.get(job.handler)
        registered = self.registry.get(job.handler)
        if limit is None and registered is not None:
            limit = registered.handler.max_concurrency
        if limit is not None and job.shards > limit:
            raise ValidationError(
                "shards", f"must not exceed the handler's concurrency limit ({limit})"
            )

    def _check_params(self, check: ParamsCheck, params: Mapping[str, Any]) -> None:
        """The handler's own checks, against the same HTTP policy its runs get."""
        destinations = DestinationPolicy.build(
            self.settings.http_allow, self.settings.http_allowed_ports
        )
        try:
            check(params, destinations)
        except ValidationError:
            raise
        except ValueError:
            # Not an InvalidParams: nothing says the message leaves the values (secrets) out.
            raise ValidationError("params", "refused by the handler's own checks") from None


def check_bounds(job: Job) -> None:
    """What the API's models refuse before anything else, for definitions that come another
    way (the seeds); every bound crossed is reported."""
    found = Findings()
    found.errors += [ValidationError(name, reason) for name, reason in _bounds_crossed(job)]
    found.raise_any()


def _bounds_crossed(job: Job) -> Iterator[tuple[str, str]]:
    if not _NAME.fullmatch(job.name):
        yield "name", f"must match {NAME_PATTERN}"
    if job.timeout_seconds < MIN_TIMEOUT_SECONDS:
        yield "timeout_seconds", f"must be at least {MIN_TIMEOUT_SECONDS:g}"
    if job.max_retries > MAX_RETRIES:
        yield "max_retries", f"must be at most {MAX_RETRIES}"
    if job.jitter_seconds > MAX_JITTER_SECONDS:
        yield "jitter_seconds", f"must be at most {MAX_JITTER_SECONDS}"
    if job.misfire.grace_seconds > MAX_GRACE_SECONDS:
        yield "misfire.grace_seconds", f"must be at most {MAX_GRACE_SECONDS}"
    if isinstance(job.schedule, IntervalSchedule):
        every = job.schedule.every_seconds
        if not MIN_INTERVAL_SECONDS <= every <= MAX_INTERVAL_SECONDS:
            yield (
                "schedule.every_seconds",
                f"must be from {MIN_INTERVAL_SECONDS} to {MAX_INTERVAL_SECONDS}",
            )


def _safe_message(
    error: jsonschema.ValidationError, params: Mapping[str, Any], declared: frozenset[str]
) -> str:
    """The schema's message, which quotes the offending value: a secret must not come back in
    an error, not even one stored masked that the client sent back as `***` (put back before
    the check). A secret field's value, or a whole object or list, is not quoted; in what is,
    every secret the params hold is masked (a list's extra items are quoted one by one), and
    credentials in text (a URL's password)."""
    refused = f"fails the handler's schema ({error.validator})"
    if any(is_secret_name(str(p), declared) for p in error.absolute_path):
        return refused
    message = str(error.message)
    if isinstance(error.instance, dict | list) and repr(error.instance) in message:
        return refused
    secrets = secret_values(params, declared)
    # Quoted as Python quotes them (repr): a backslash or a quote comes back escaped.
    quoted = [escaped for s in secrets if (escaped := repr(s)[1:-1]) != s]
    every_form = sorted({*secrets, *quoted}, key=len, reverse=True)
    masked: str = scrub_values(scrub_text(message), every_form)
    return masked[:300]


def _check_ahead(job: Job, now: datetime, *, new_schedule: bool) -> None:
    schedule = job.schedule
    if new_schedule and isinstance(schedule, OnceSchedule) and schedule.at <= now:
        raise ValidationError("schedule.at", "must be in the future")
    if new_schedule and isinstance(schedule, CronSchedule):
        # It fired once, but will it again? Not if its zone's clocks now skip its time
        # every year (NoFireTime).
        next_fire(schedule, now, job_name=job.name)


def _check_jitter(schedule: Schedule, jitter: float, name: str, now: datetime) -> None:
    """Jitter must stay below the shortest time between two fire times, or one occurrence's
    delay would swallow the next. Not the first gap after `now`: `0 0 9,17 * * *` has gaps of
    8 and 16 hours, and 12 hours of jitter created at 10:00 lost a run in five."""
    if not jitter:
        return
    if isinstance(schedule, IntervalSchedule):
        period = schedule.every_seconds
    elif isinstance(schedule, CronSchedule):
        gap = shortest_gap(schedule, now, job_name=name)
        period = gap.total_seconds() if gap is not None else float("inf")
    else:
        return
    if jitter >= period:
        raise ValidationError(
            "jitter_seconds",
            f"must be below the schedule's shortest time between two fire times ({period:g} s)",
        )
