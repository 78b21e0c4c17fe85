"""Seeding: system jobs declared by handlers, demo jobs; idempotent, never overwriting ops."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from scheduler.handler_api import HandlerContext, Result, handler
from scheduler.logs import FIELDS
from scheduler.model import IntervalSchedule
from scheduler.ports import Store
from scheduler.registry import HandlerRegistry
from seed.demo import demo_jobs
from seed.jobs import seed_jobs
from seed.system import system_jobs
from tests.conftest import T0


@handler(
    system_job={
        "schedule": {"kind": "interval", "every_seconds": 86400},
        "timeout_seconds": 600,
        "max_retries": 0,
    }
)
async def scanner(ctx: HandlerContext) -> Result:
    return None


def registry() -> HandlerRegistry:
    r = HandlerRegistry()
    r.register("scanner", scanner)
    r.register("plain", handler()(scanner.func))
    return r


async def test_a_handler_declared_system_job_is_seeded_once(store: Store) -> None:
    jobs = system_jobs(registry(), T0)
    assert [(j.name, j.handler, j.system, j.timeout_seconds) for j in jobs] == [
        ("scanner", "scanner", True, 600)
    ]
    assert await seed_jobs(store, jobs) == jobs
    assert await seed_jobs(store, system_jobs(registry(), T0)) == []
    assert len(await store.list_jobs()) == 1


async def test_reseeding_keeps_what_ops_changed(store: Store) -> None:
    [job] = system_jobs(registry(), T0)
    await seed_jobs(store, [job])
    # Ops move the scanner to every hour (a change the API will make; here, straight in).
    await store.delete_job(job.id)
    await store.insert_job(replace(job, schedule=IntervalSchedule(every_seconds=3600)))
    await seed_jobs(store, system_jobs(registry(), T0))
    stored = await store.get_job_by_name("scanner")
    assert stored is not None and stored.schedule == IntervalSchedule(every_seconds=3600)


async def test_demo_jobs_are_valid_and_due_within_seconds(store: Store) -> None:
    added = await seed_jobs(store, demo_jobs(T0))
    assert len(added) >= 3
    soonest = min(j.next_run_at for j in added if j.next_run_at is not None)
    assert (soonest - T0).total_seconds() <= 10


@handler(
    system_job={"schedule": {"kind": "cron", "expr": "0 30 0 * * *"}},
    system_job_needs={"base_url", "api_key"},
)
async def walker(ctx: HandlerContext) -> Result:
    return None


def test_a_system_job_that_needs_settings_waits_until_they_are_configured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    r = HandlerRegistry()
    r.register("walker", walker)

    assert system_jobs(r, T0, {"walker": {"base_url": "https://v.example"}}) == []
    [record] = [r for r in caplog.records if r.msg == "seed.system_job_not_configured"]
    assert getattr(record, FIELDS)["missing"] == ["handler_settings.walker.api_key"]
    # An empty environment variable is not a setting.
    assert system_jobs(r, T0, {"walker": {"base_url": "https://v.example", "api_key": " "}}) == []
    configured = {"walker": {"base_url": "https://v.example", "api_key": "k" * 20}}
    [job] = system_jobs(r, T0, configured)
    assert (job.name, job.system, job.params) == ("walker", True, {})


def test_the_catalogue_walk_is_seeded_once_its_vendor_is_configured() -> None:
    r = HandlerRegistry()
    r.load_entry_points()
    vendor = {"base_url": "https://v.example", "api_key": "k" * 20, "daily_quota": "5000"}
    assert "catalogue_walk" not in {job.name for job in system_jobs(r, T0)}
    [walk] = [
        j for j in system_jobs(r, T0, {"catalogue_walk": vendor}) if j.handler == "catalogue_walk"
    ]
    assert (walk.timeout_seconds, walk.max_retries) == (3600, 2)
