"""Dead letters in bulk through either client: identical errors counted, several discarded by
their ids or by a filter, with a bad filter refused before anything is sent."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.api.conftest import Api
from tests.client.conftest import Calls
from tests.client.test_runs import failing_job


async def test_groups_are_read_and_dead_letters_discarded_in_bulk(tickd: Calls, api: Api) -> None:
    job = await failing_job(tickd, api, "dead", runs=3)
    groups = await tickd.dead_letter_groups()
    [group] = groups.groups
    assert (group.job_id, group.error_type, group.error, group.count) == (
        job.id,
        "RuntimeError",
        "always fails",
        3,
    )
    assert groups.complete and groups.read == 3

    some = await tickd.discard_dead_letters(ids=group.ids[:2])
    assert (some.discarded, some.count, some.more) == (group.ids[:2], 2, False)
    rest = await tickd.discard_dead_letters(error_type="RuntimeError", job_id=job.id)
    assert rest.discarded == group.ids[2:] and rest.count == 1
    assert (await tickd.dead_letter_groups()).groups == []

    with pytest.raises(ValidationError, match="limit"):
        await tickd.discard_dead_letters(limit=101)
