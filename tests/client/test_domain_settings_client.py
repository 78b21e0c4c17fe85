"""The domains' settings through either client: stored whole from keyword fields or a model, read
back one at a time or as the list with each domain's job count, removed; a bad value is refused
before anything is sent, a bad name by the API naming it, a missing record is NotFound."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.api.conftest import Api
from tests.client.conftest import Calls
from tests.conftest import make_job
from tickd.api.domains import DomainSettingsIn
from tickd.client import InvalidRequest, NotFound


async def test_settings_are_stored_read_listed_and_removed(tickd: Calls, api: Api) -> None:
    await api.store.insert_missing_jobs([make_job("sync", "ping", domain="payments")])

    stored = await tickd.put_domain("payments", weight=4, max_jobs=100)
    assert (stored.name, stored.weight, stored.max_jobs, stored.max_running) == (
        "payments",
        4,
        100,
        None,
    )
    assert (stored.job_count, stored.has_record) == (1, True)
    assert await tickd.get_domain("payments") == stored

    replaced = await tickd.put_domain("payments", DomainSettingsIn(lag_objective_seconds=1.5))
    assert (replaced.weight, replaced.max_jobs, replaced.lag_objective_seconds) == (1, None, 1.5)
    listed = await tickd.list_domains()
    assert [(d.name, d.job_count, d.has_record) for d in listed.items] == [("payments", 1, True)]

    await tickd.delete_domain("payments")
    assert (await tickd.get_domain("payments")).has_record is False
    with pytest.raises(NotFound):
        await tickd.delete_domain("payments")


async def test_a_bad_value_is_refused_before_anything_is_sent(tickd: Calls, api: Api) -> None:
    with pytest.raises(ValidationError, match="weight"):
        await tickd.put_domain("payments", weight=0)
    with pytest.raises(ValidationError, match="unknown"):
        await tickd.put_domain("payments", unknown=1)
    assert await api.store.list_domains() == []


async def test_a_bad_name_is_refused_by_the_api_naming_it(tickd: Calls, api: Api) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await tickd.put_domain("Payments/EU", weight=2)
    assert refused.value.status == 400 and refused.value.fields == ["path.name"]
    assert await api.store.list_domains() == []
