"""Creating, reading, listing, changing and deleting jobs through either client."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from tests.api.conftest import Api
from tests.client.conftest import Calls
from tickd.api.models import (
    BackfillRequest,
    CronScheduleIn,
    IntervalScheduleIn,
    JobCreate,
    JobPatch,
    PreviewRequest,
)
from tickd.client import Conflict, InvalidRequest, NotFound, PreconditionFailed

EVERY_MINUTE = IntervalScheduleIn(kind="interval", every_seconds=60)


def ping_job(name: str, **fields: Any) -> JobCreate:
    return JobCreate(
        name=name,
        handler="ping",
        schedule=EVERY_MINUTE,
        params={"url": "https://example.com"},
        **fields,
    )


async def test_a_job_is_created_read_listed_page_by_page_and_deleted(tickd: Calls) -> None:
    created = [await tickd.create_job(ping_job(f"job-{n}")) for n in range(5)]
    assert await tickd.get_job(created[0].id) == created[0]

    first = await tickd.list_jobs(limit=2)
    assert [j.name for j in first.items] == ["job-0", "job-1"] and first.next_cursor
    second = await tickd.list_jobs(limit=2, cursor=first.next_cursor)
    assert [j.name for j in second.items] == ["job-2", "job-3"]
    every = await tickd.all("iter_jobs", limit=2)
    assert [j.name for j in every] == [f"job-{n}" for n in range(5)]
    assert [j.name for j in await tickd.all("iter_jobs", name_prefix="job-4")] == ["job-4"]

    await tickd.delete_job(created[0].id)
    with pytest.raises(NotFound) as missing:
        await tickd.get_job(created[0].id)
    assert missing.value.status == 404 and created[0].id in str(missing.value.detail)


async def test_a_write_with_a_stale_if_match_raises_with_the_current_revision(
    tickd: Calls,
) -> None:
    job = await tickd.create_job(ping_job("guarded"))
    replaced = await tickd.update_job(job.id, ping_job("guarded", priority="high"), if_match=1)
    assert replaced.priority == "high" and replaced.revision == job.revision + 1

    with pytest.raises(PreconditionFailed) as stale:
        await tickd.update_job(job.id, ping_job("guarded"), if_match=job.revision)
    assert stale.value.status == 412 and stale.value.current_revision == replaced.revision
    assert stale.value.fields == ["If-Match"]
    with pytest.raises(PreconditionFailed):
        await tickd.patch_job(job.id, JobPatch(enabled=False), if_match=job.revision)
    with pytest.raises(PreconditionFailed):
        await tickd.delete_job(job.id, if_match=job.revision)
    assert (await tickd.get_job(job.id)).revision == replaced.revision, "nothing was written"

    await tickd.delete_job(job.id, if_match=replaced.revision)
    with pytest.raises(NotFound):
        await tickd.get_job(job.id)


async def test_a_patch_changes_only_the_fields_it_sets(tickd: Calls) -> None:
    policy = {"max_attempts": 2, "backoff_seconds": 30}
    job = await tickd.create_job(ping_job("patched", max_retries=2, redrive=policy))
    patched = await tickd.patch_job(job.id, JobPatch(timeout_seconds=5), if_match=job.revision)
    assert patched.timeout_seconds == 5 and patched.max_retries == 2
    assert patched.redrive is not None
    unset = await tickd.patch_job(job.id, JobPatch(redrive=None))
    assert unset.redrive is None and unset.timeout_seconds == 5


async def test_pause_resume_and_trigger(tickd: Calls, api: Api) -> None:
    job = await tickd.create_job(ping_job("switch"))
    paused = await tickd.pause_job(job.id)
    assert not paused.enabled
    resumed = await tickd.resume_job(job.id)
    assert resumed.enabled
    request = await tickd.trigger_job(job.id)
    assert request.job_id == job.id and request.reason == "trigger"


async def test_fire_times_are_previewed_for_a_job_and_for_a_schedule(tickd: Calls) -> None:
    job = await tickd.create_job(ping_job("previewed"))
    times = (await tickd.preview_job(job.id, count=3)).times
    assert [t.at - times[0].at for t in times] == [timedelta(minutes=n) for n in range(3)]

    nightly = CronScheduleIn(kind="cron", expr="0 0 3 * * *", timezone="Europe/Berlin")
    preview = await tickd.preview_schedule(PreviewRequest(schedule=nightly, count=2))
    assert [t.local[11:19] for t in preview.times] == ["03:00:00", "03:00:00"]


async def test_a_backfill_is_dry_run_then_queued(tickd: Calls, api: Api) -> None:
    hourly = CronScheduleIn(kind="cron", expr="0 0 * * * *")
    job = await tickd.create_job(ping_job("filled").model_copy(update={"schedule": hourly}))
    now = api.clock.now()
    start, end = now - timedelta(hours=3), now - timedelta(minutes=1)
    dry = await tickd.backfill_job(job.id, BackfillRequest(start=start, end=end))
    assert dry.dry_run and len(dry.occurrences) == 3
    real = BackfillRequest(start=start, end=end, dry_run=False)
    queued = await tickd.backfill_job(job.id, real)
    assert not queued.dry_run and queued.occurrences == dry.occurrences


async def test_the_history_tells_each_change_page_by_page(tickd: Calls) -> None:
    job = await tickd.create_job(ping_job("changing"))
    for seconds in (10, 20, 30):
        await tickd.patch_job(job.id, JobPatch(timeout_seconds=seconds))
    page = await tickd.job_history(job.id, limit=2)
    assert len(page.items) == 2 and page.next_cursor
    changes = await tickd.all("iter_job_history", job.id, limit=2)
    assert [c.action for c in changes] == ["update", "update", "update", "create"]
    assert changes[0].changes["timeout_seconds"] == {"from": 20.0, "to": 30.0}


async def test_a_field_the_api_refuses_is_named_in_the_exception(tickd: Calls) -> None:
    bad_url = ping_job("bad").model_copy(update={"params": {"url": "http://plain"}})
    with pytest.raises(InvalidRequest) as refused:
        await tickd.create_job(bad_url)
    assert refused.value.status == 422 and refused.value.fields == ["params.url"]
    assert "params.url" in str(refused.value)

    await tickd.create_job(ping_job("taken"))
    with pytest.raises(Conflict) as taken:
        await tickd.create_job(ping_job("taken"))
    assert taken.value.fields == ["name"]


async def test_a_bad_query_field_is_named_before_anything_is_sent(tickd: Calls) -> None:
    with pytest.raises(ValidationError, match="limit"):
        await tickd.list_jobs(limit=0)
    with pytest.raises(ValidationError, match="colour"):
        await tickd.list_jobs(colour="red")
