"""Seeding: system jobs declared by handlers, demo jobs; idempotent, never overwriting ops."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import ParamSpec

import pytest

import tickd.app
import tickd.cli
import tickd.daemon
from tests.conftest import T0
from tickd.handlers.sleep import attempt_fails
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.jobspec import JobRules
from tickd.scheduler.logs import FIELDS
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Execution, Job, Status, ValidationError
from tickd.scheduler.plugin.api import (
    CronSchedule,
    Handler,
    HandlerContext,
    IntervalSchedule,
    Result,
    SystemJob,
    handler,
)
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import Store
from tickd.scheduler.schedule.schedules import next_fire
from tickd.seed.demo import demo_jobs
from tickd.seed.jobs import SeedError, seed_jobs
from tickd.seed.system import system_jobs

P = ParamSpec("P")
STARTUP_WITHIN = 10.0


@handler(system_job=SystemJob(schedule=IntervalSchedule(every_seconds=86400), timeout_seconds=600))
async def scanner(ctx: HandlerContext) -> Result:
    return None


def registry() -> HandlerRegistry:
    r = HandlerRegistry()
    r.register("scanner", scanner)
    r.register("plain", handler()(scanner.func))
    return r


def rules(r: HandlerRegistry | None = None, max_timeout_seconds: float = 86400) -> JobRules:
    return JobRules(r or registry(), Settings(max_timeout_seconds=max_timeout_seconds))


async def test_a_handler_declared_system_job_is_seeded_once(store: Store) -> None:
    jobs = system_jobs(rules(), T0)
    assert [(j.name, j.handler, j.system, j.timeout_seconds) for j in jobs] == [
        ("scanner", "scanner", True, 600)
    ]
    assert await seed_jobs(store, jobs) == jobs
    assert await seed_jobs(store, system_jobs(rules(), T0)) == []
    assert len(await store.list_jobs()) == 1


async def test_reseeding_keeps_what_ops_changed(store: Store) -> None:
    [job] = system_jobs(rules(), T0)
    await seed_jobs(store, [job])
    # Ops move the scanner to every hour (a change the API will make; here, straight in).
    await store.delete_job(job.id)
    await store.insert_job(replace(job, schedule=IntervalSchedule(every_seconds=3600)))
    await seed_jobs(store, system_jobs(rules(), T0))
    stored = await store.get_job_by_name("scanner")
    assert stored is not None and stored.schedule == IntervalSchedule(every_seconds=3600)


async def test_demo_jobs_are_valid_and_due_within_seconds(store: Store) -> None:
    added = await seed_jobs(store, demo_jobs(rules(builtin()), T0))
    assert len(added) >= 3
    soonest = min(j.next_run_at for j in added if j.next_run_at is not None)
    assert (soonest - T0).total_seconds() <= 10


def test_the_demo_flaky_job_fails_now_and_then_and_a_retry_nearly_always_recovers() -> None:
    [flaky] = [j for j in demo_jobs(rules(builtin()), T0) if j.name == "demo-flaky"]
    flaky = replace(flaky, id="demo-flaky-id")  # its runs' keys, and so their fates, fixed
    succeeded_at = Counter(attempt_that_succeeds(flaky, run) for run in runs_in_a_day(flaky))
    runs = sum(succeeded_at.values())
    retried = runs - succeeded_at[1] - succeeded_at[None]
    assert runs > 5000
    assert 0.1 * runs < retried < 0.3 * runs, succeeded_at
    assert 0 < succeeded_at[None] < 30, "dead letters: a few a day"


def runs_in_a_day(job: Job) -> list[Execution]:
    times = [job.next_run_at]
    while (last := times[-1]) is not None and last < T0 + timedelta(days=1):
        times.append(next_fire(job.schedule, last, job_name=job.name))
    return [
        Execution(
            job_id=job.id,
            job_name=job.name,
            handler=job.handler,
            scheduled_at=at,
            status=Status.RUNNING,
        )
        for at in times
        if at is not None
    ]


def attempt_that_succeeds(job: Job, run: Execution) -> int | None:
    """The first attempt of the run that succeeds, None if every attempt fails."""
    percent = job.params["fail_percent"]
    attempts = range(1, job.max_retries + 2)
    return next((a for a in attempts if not attempt_fails(run.idempotency_key, a, percent)), None)


# The dict form, as plug-ins wrote it before SystemJob: still taken.
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

    assert system_jobs(rules(r), T0, {"walker": {"base_url": "https://v.example"}}) == []
    [record] = [r for r in caplog.records if r.msg == "seed.system_job_not_configured"]
    assert getattr(record, FIELDS)["missing"] == ["handler_settings.walker.api_key"]
    # An empty environment variable is not a setting.
    assert (
        system_jobs(rules(r), T0, {"walker": {"base_url": "https://v.example", "api_key": " "}})
        == []
    )
    configured = {"walker": {"base_url": "https://v.example", "api_key": "k" * 20}}
    [job] = system_jobs(rules(r), T0, configured)
    assert (job.name, job.system, job.params) == ("walker", True, {})
    assert job.schedule == CronSchedule(expr="0 30 0 * * *")


def builtin() -> HandlerRegistry:
    r = HandlerRegistry()
    r.load_entry_points()
    return r


def test_the_catalogue_walk_is_seeded_once_its_vendor_is_configured() -> None:
    r = rules(builtin())
    vendor = {"base_url": "https://v.example", "api_key": "k" * 20, "daily_quota": "5000"}
    assert "catalogue_walk" not in {job.name for job in system_jobs(r, T0)}
    [walk] = [
        j for j in system_jobs(r, T0, {"catalogue_walk": vendor}) if j.handler == "catalogue_walk"
    ]
    assert (walk.timeout_seconds, walk.max_retries) == (3600, 2)


@handler(
    params_schema={
        "type": "object",
        "properties": {"url": {"type": "string", "pattern": "^https://"}},
        "required": ["url"],
    },
    system_job=SystemJob(schedule=IntervalSchedule(every_seconds=60), params={"url": "ftp://x"}),
)
async def pinger(ctx: HandlerContext) -> Result:
    return None


@handler(system_job=SystemJob(schedule=CronSchedule(expr="0 0 0 30 2 *")))
async def never(ctx: HandlerContext) -> Result:
    return None


@handler(system_job=SystemJob(schedule=IntervalSchedule(every_seconds=60), timeout_seconds=7200))
async def slow(ctx: HandlerContext) -> Result:
    return None


@pytest.mark.parametrize(
    ("declared", "field"),
    [(pinger, "params.url"), (never, "schedule.expr"), (slow, "timeout_seconds")],
)
def test_a_system_job_the_api_would_refuse_stops_the_seeding_naming_job_and_field(
    declared: Handler, field: str
) -> None:
    r = HandlerRegistry()
    r.register("bad", declared)
    with pytest.raises(SeedError, match=rf"^seeded job 'bad': {field}: ") as raised:
        system_jobs(rules(r, max_timeout_seconds=3600), T0)
    assert raised.value.field == field


def test_a_system_job_declared_as_a_dict_is_checked_where_it_is_declared() -> None:
    with pytest.raises(ValidationError, match=r"system_job\.timeout: not a field"):
        handler(system_job={"schedule": {"kind": "interval", "every_seconds": 60}, "timeout": 9})
    with pytest.raises(ValidationError, match=r"system_job\.schedule: missing"):
        handler(system_job={"timeout_seconds": 9})


def test_the_demo_jobs_need_their_handlers() -> None:
    with pytest.raises(SeedError, match=r"^seeded job 'demo-heartbeat': handler: no handler"):
        demo_jobs(rules(HandlerRegistry()), T0)


def test_a_seeded_job_that_fails_the_checks_stops_startup_naming_job_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    r = HandlerRegistry()
    r.register("bad", pinger)
    monkeypatch.setattr(tickd.app, "load_registry", lambda: r)
    monkeypatch.setattr(tickd.cli, "configure_logging", lambda **_: None)
    monkeypatch.setattr(tickd.daemon, "run_daemon", bounded(tickd.daemon.run_daemon))
    monkeypatch.setenv("TICKD_STORE_URL", f"sqlite:///{tmp_path}/tickd.db")
    monkeypatch.setenv("TICKD_MAIL_URL", f"outbox:///{tmp_path}/outbox")
    monkeypatch.setenv("TICKD_API_PORT", "0")

    assert tickd.cli.main(["run"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tickd: seeded job 'bad': params.url: "), error
    assert "Traceback" not in error


def bounded(run: Callable[P, Awaitable[None]]) -> Callable[P, Awaitable[None]]:
    """The daemon as it is, but a startup that does not stop fails the test instead of
    hanging it."""

    async def run_within(*args: P.args, **kwargs: P.kwargs) -> None:
        async with asyncio.timeout(STARTUP_WITHIN):
            await run(*args, **kwargs)

    return run_within


async def seeded_at_boot(tmp_path: Path, **settings: object) -> list[Job]:
    """The jobs a daemon with the shipped handlers seeds at boot on these settings, with the
    alert emails' settings checked as at boot."""
    config = Settings(
        store_url=f"sqlite:///{tmp_path}/tickd.db",
        mail_url=f"outbox:///{tmp_path}/outbox",
        api_port=0,
        **settings,  # type: ignore[arg-type]
    )
    handlers = builtin()
    tickd.app.log_alert_email_settings(handlers, config)
    async with (
        tickd.app.opened_ports(config, Metrics()) as ports,
        tickd.app.opened_resources(tickd.app.declared_resources(handlers), config) as resources,
    ):
        await tickd.app.seed_at_boot(ports, handlers, config, resources)
        return await ports.store.list_jobs()


ALERT_SETTINGS = {
    "alert_scanner": {
        "public_base_url": "https://tickd.example",
        "unsubscribe_secret": "an-unsubscribe-key-of-32-characters-or-more",
    }
}


async def test_a_daemon_without_alert_settings_seeds_no_alert_job_and_warns_of_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    jobs = await seeded_at_boot(tmp_path, seed_demo=False)

    assert [job.name for job in jobs] == []
    logged = {record.msg for record in caplog.records}
    assert "seed.system_job_not_configured" not in logged, "catalogue_walk is not in use"
    assert not {"alert_emails.no_unsubscribe", "alert_emails.misconfigured"} & logged


async def test_a_daemon_with_alert_settings_seeds_the_alert_scanner(tmp_path: Path) -> None:
    jobs = await seeded_at_boot(tmp_path, seed_demo=False, handler_settings=ALERT_SETTINGS)

    assert [(job.name, job.system) for job in jobs] == [("alert_scanner", True)]


async def test_the_demo_seeds_the_alert_scanner_without_its_settings(tmp_path: Path) -> None:
    jobs = await seeded_at_boot(tmp_path, seed_demo=True)

    assert "alert_scanner" in {job.name for job in jobs if job.system}


def test_a_partly_configured_vendor_is_named_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    system_jobs(rules(builtin()), T0, {"catalogue_walk": {"base_url": "https://v.example"}})

    [record] = [r for r in caplog.records if r.msg == "seed.system_job_not_configured"]
    assert getattr(record, FIELDS)["missing"] == [
        "handler_settings.catalogue_walk.api_key",
        "handler_settings.catalogue_walk.daily_quota",
    ]
