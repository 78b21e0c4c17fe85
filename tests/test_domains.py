"""A job's domain: `default` unless it names one, and only a name that can be a Prometheus label
value and a Kafka topic suffix; any other is refused, naming the field."""

from __future__ import annotations

import pytest

from tests.conftest import make_job
from tickd.scheduler.domains import DEFAULT_DOMAIN
from tickd.scheduler.model import ValidationError

GOOD = ["default", "payments", "team-a", "eu.billing_2", "7th-floor", "a", "x" * 63]
BAD = [
    "",  # empty
    "Payments",  # upper case
    "-team",  # starts with a separator
    ".team",
    "_team",
    "team a",  # a space
    "team/a",  # a slash would split a topic's name
    "équipe",  # non-ASCII
    "x" * 64,  # too long
    "team\n",  # a trailing newline
]


def test_a_job_that_names_no_domain_is_in_the_default_one() -> None:
    assert make_job().domain == DEFAULT_DOMAIN == "default"


@pytest.mark.parametrize("domain", GOOD)
def test_a_job_keeps_the_domain_it_names(domain: str) -> None:
    assert make_job(domain=domain).domain == domain


@pytest.mark.parametrize("domain", BAD)
def test_a_job_with_a_bad_domain_is_refused_naming_the_field(domain: str) -> None:
    with pytest.raises(ValidationError) as refused:
        make_job(domain=domain)
    assert refused.value.field == "domain"
    assert "lowercase letters" in refused.value.reason
