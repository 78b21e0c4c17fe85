"""A domain's settings: the defaults for a domain without a record (weight 1, no caps, no
objective), and only values the rules allow; any other is refused, naming the field."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pytest

from tests.conftest import T0
from tickd.scheduler.domain_settings import DomainSettings, settings_of
from tickd.scheduler.model import ValidationError

BAD: list[tuple[str, Any]] = [
    ("name", "Payments"),
    ("name", ""),
    ("name", "team/a"),
    ("weight", 0),
    ("weight", 1001),
    ("weight", -1),
    ("weight", True),
    ("weight", 1.5),
    ("max_running", 0),
    ("max_running", 100_001),
    ("max_jobs", 0),
    ("max_jobs", 10_000_001),
    ("max_jobs", "10"),
    ("lag_objective_seconds", 0),
    ("lag_objective_seconds", -0.5),
    ("lag_objective_seconds", 86_400.5),
    ("lag_objective_seconds", math.inf),
    ("lag_objective_seconds", math.nan),
    ("lag_objective_seconds", False),
    ("updated_at", datetime(2026, 1, 1)),  # naive
]


def test_a_domain_without_a_record_has_the_defaults() -> None:
    payments = DomainSettings(name="payments")
    assert (payments.weight, payments.max_running, payments.max_jobs) == (1, None, None)
    assert payments.lag_objective_seconds is None and payments.updated_at is None
    assert settings_of("payments", {}) == payments


def test_settings_of_a_domain_with_a_record_are_its_record() -> None:
    record = DomainSettings(name="search", weight=3, max_jobs=50, updated_at=T0)
    assert settings_of("search", {"search": record}) is record
    assert settings_of("payments", {"search": record}) == DomainSettings(name="payments")


def test_the_limits_of_each_setting_are_allowed() -> None:
    lowest = DomainSettings(
        name="a", weight=1, max_running=1, max_jobs=1, lag_objective_seconds=0.001
    )
    highest = DomainSettings(
        name="a",
        weight=1000,
        max_running=100_000,
        max_jobs=10_000_000,
        lag_objective_seconds=86_400,
    )
    assert (lowest.weight, highest.weight) == (1, 1000)
    assert (lowest.max_jobs, highest.max_jobs) == (1, 10_000_000)


@pytest.mark.parametrize(("field", "value"), BAD)
def test_a_setting_out_of_its_range_is_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        DomainSettings(**{"name": "payments", field: value})
    assert refused.value.field == field
