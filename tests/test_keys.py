"""A job's concurrency key and limit: the rules (scheduler/keys.py) the model checks, and the
key of the endpoint a URL calls."""

from __future__ import annotations

import pytest

from tests.conftest import make_job
from tickd.scheduler.keys import MAX_CONCURRENCY_LIMIT, MAX_KEY_LENGTH, is_key
from tickd.scheduler.model import ValidationError
from tickd.scheduler.plugin.api import endpoint_key


@pytest.mark.parametrize(
    "key",
    ["endpoint:api.vendor.com", "k", "tenant/42:https://x.example/a?b=c", "x" * MAX_KEY_LENGTH],
)
def test_a_key_is_any_printable_text_without_spaces(key: str) -> None:
    assert is_key(key)
    assert make_job(concurrency_key=key, concurrency_limit=5).concurrency_key == key


@pytest.mark.parametrize("key", ["", "a b", "tab\there", "é", "x" * (MAX_KEY_LENGTH + 1), "nul\0"])
def test_a_key_outside_the_rule_is_refused_naming_the_field(key: str) -> None:
    with pytest.raises(ValidationError) as refused:
        make_job(concurrency_key=key, concurrency_limit=5)
    assert refused.value.field == "concurrency_key"


@pytest.mark.parametrize("limit", [0, -1, MAX_CONCURRENCY_LIMIT + 1, True, 2.5, None])
def test_a_limit_outside_its_range_or_missing_is_refused_naming_the_field(limit: object) -> None:
    with pytest.raises(ValidationError) as refused:
        make_job(concurrency_key="endpoint:x", concurrency_limit=limit)
    assert refused.value.field == "concurrency_limit"


def test_a_limit_without_a_key_is_refused_naming_the_key() -> None:
    with pytest.raises(ValidationError) as refused:
        make_job(concurrency_limit=3)
    assert refused.value.field == "concurrency_key"


def test_a_sharded_job_cannot_name_a_key() -> None:
    with pytest.raises(ValidationError) as refused:
        make_job(concurrency_key="endpoint:x", concurrency_limit=3, shards=4)
    assert refused.value.field == "concurrency_key"


def test_a_job_without_a_key_has_no_limit() -> None:
    job = make_job()
    assert (job.concurrency_key, job.concurrency_limit) == (None, None)


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"url": "https://API.Vendor.com/path?q=1"}, "endpoint:api.vendor.com"),
        ({"url": "http://api.vendor.com:8080/"}, "endpoint:api.vendor.com:8080"),
        ({"url": "http://api.vendor.com:80/"}, "endpoint:api.vendor.com"),
        ({"url": "https://user:secret@api.vendor.com/"}, "endpoint:api.vendor.com"),
        ({"url": "https://bücher.example/"}, "endpoint:xn--bcher-kva.example"),
        ({"url": "http://[2001:db8::1]/"}, "endpoint:2001:db8::1"),
        ({"url": "https://" + "a" * 250 + ".example/"}, None),  # longer than a key may be
        ({"url": "not a url"}, None),
        ({"url": "http://[::1/"}, None),
        ({"url": 7}, None),
        ({}, None),
    ],
)
def test_a_url_s_endpoint_key_is_its_host_as_dialled(params: dict[str, object], key: str) -> None:
    assert endpoint_key(params) == key
    assert key is None or is_key(key)
