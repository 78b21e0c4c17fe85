"""A domain's settings (scheduler/domains.py names the domains): its fair share of runs, its caps
and its fire-lag objective, kept in the store (ports.DomainStore) and managed over the API and
the command line.

A domain without a record has the defaults, `DomainSettings(name=...)`: weight 1, no caps, no
objective. The API checks `max_jobs` when a job is written into a domain. `weight` and
`max_running` are applied by the dispatcher's fetch (scheduler/admission/fair_share.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from tickd.scheduler.domains import DOMAIN_RULE, is_domain_name
from tickd.scheduler.model import ValidationError, require_utc

DEFAULT_WEIGHT = 1
MAX_WEIGHT = 1000
MAX_RUNNING_CAP = 100_000
MAX_JOBS_CAP = 10_000_000
MAX_LAG_OBJECTIVE_SECONDS = 86_400.0  # a day


@dataclass(frozen=True, kw_only=True, slots=True)
class DomainSettings:
    """One domain's settings; each value is checked when the settings are made, so a stored
    record always holds values the rules allow."""

    name: str
    # The domain's fair share of runs under saturation, relative to the other domains' weights
    # (1 to MAX_WEIGHT): a domain of weight 2 gets twice the runs of one of weight 1.
    weight: int = DEFAULT_WEIGHT
    # At most this many of the domain's runs in flight at once (1 to MAX_RUNNING_CAP); None: no
    # cap.
    max_running: int | None = None
    # At most this many jobs in the domain (1 to MAX_JOBS_CAP); None: no cap.
    max_jobs: int | None = None
    # The domain's p99 fire-lag objective in seconds, for alerts (over 0, up to a day); None:
    # none.
    lag_objective_seconds: float | None = None
    # When the record was last written; None for the defaults of a domain without a record.
    updated_at: datetime | None = None

    def __post_init__(self) -> None:
        if not is_domain_name(self.name):
            raise ValidationError("name", f"must be {DOMAIN_RULE}")
        check_count("weight", self.weight, MAX_WEIGHT)
        if self.max_running is not None:
            check_count("max_running", self.max_running, MAX_RUNNING_CAP)
        if self.max_jobs is not None:
            check_count("max_jobs", self.max_jobs, MAX_JOBS_CAP)
        if self.lag_objective_seconds is not None:
            check_objective(self.lag_objective_seconds)
        require_utc("updated_at", self.updated_at)


def check_count(field: str, value: object, most: int) -> None:
    """A whole number from 1 to `most` (a bool is not one, though Python counts it an int)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValidationError(field, f"must be a whole number from 1 to {most:,}")


def check_objective(value: object) -> None:
    """Seconds over 0, up to a day."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_LAG_OBJECTIVE_SECONDS
    ):
        raise ValidationError(
            "lag_objective_seconds",
            f"must be a number of seconds over 0, up to {MAX_LAG_OBJECTIVE_SECONDS:g} (a day)",
        )


def settings_of(name: str, records: Mapping[str, DomainSettings]) -> DomainSettings:
    """The settings of domain `name`, given the records by name: its record, or the defaults
    when it has none."""
    return records.get(name) or DomainSettings(name=name)
