"""`dry_run=True` on either client's job writes: the job as it would be, or the refusal the
write would get, and nothing written."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api
from tests.client.conftest import Calls
from tickd.api.models import CronScheduleIn, IntervalScheduleIn, JobCreate, JobPatch
from tickd.client import InvalidRequest
from tickd.scheduler.ports.backends import JobSearch

EVERY_MINUTE = IntervalScheduleIn(kind="interval", every_seconds=60)


def ping_job(name: str) -> JobCreate:
    return JobCreate(
        name=name, handler="ping", schedule=EVERY_MINUTE, params={"url": "https://example.com"}
    )


async def job_names(api: Api) -> list[str]:
    return [job.name for job in await api.store.search_jobs(JobSearch())]


async def test_a_dry_run_create_shows_the_job_and_creates_none(tickd: Calls, api: Api) -> None:
    shown = await tickd.create_job(ping_job("report"), dry_run=True)
    assert shown.name == "report" and shown.revision == 1
    assert await job_names(api) == []


async def test_a_dry_run_create_raises_the_refusal_of_the_create(tickd: Calls, api: Api) -> None:
    job = ping_job("report").model_copy(
        update={
            "handler": "sleeep",
            "schedule": CronScheduleIn(kind="cron", expr="0 0 3 * * *", timezone="Mars/Base"),
        }
    )
    with pytest.raises(InvalidRequest) as refused:
        await tickd.create_job(job, dry_run=True)
    assert sorted(e.field for e in refused.value.errors) == ["handler", "schedule.timezone"]
    assert await job_names(api) == []


async def test_dry_run_updates_and_patches_change_nothing(tickd: Calls, api: Api) -> None:
    job = await tickd.create_job(ping_job("report"))
    renamed = ping_job("renamed")
    replaced = await tickd.update_job(job.id, renamed, if_match=job.revision, dry_run=True)
    patched = await tickd.patch_job(job.id, JobPatch(max_retries=3), dry_run=True)
    assert (replaced.name, replaced.revision) == ("renamed", job.revision + 1)
    assert (patched.max_retries, patched.revision) == (3, job.revision + 1)
    assert await tickd.get_job(job.id) == job
    assert len(await tickd.all("iter_job_history", job.id)) == 1
