"""The dashboard as ops use it, in Chromium: sign in, see what failed, create a job through the
form (the API's 422 shown beside the field, the next fire times previewed with the DST change
marked), watch its run appear, pause it, read a failed run's error and retry it.

Leaves var/dashboard.png (the "Now" view) and var/dashboard-job.png (a job's page) behind.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from playwright.async_api import Page, expect

from tests.api.conftest import READ, WRITE
from tests.conftest import T0, Harness, make_job
from tickd.scheduler.model import (
    CronSchedule,
    Execution,
    ExecutionError,
    IntervalSchedule,
    Job,
    Misfire,
    MisfirePolicy,
    Status,
)

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var"
# Auto-refresh is every 5 s; one refresh and a margin.
REFRESHED_MS = 12_000
# Markup in an error message: it must show as text and never run.
HOSTILE_ERROR = '<img src=x onerror="window.pwned=1">upstream answered 502'


async def seed_last_hour(harness: Harness) -> Job:
    """A few jobs and an hour of their runs, as a daemon would have recorded them; returns the
    one that keeps failing."""
    rng = random.Random(14)
    jobs = [
        make_job("billing.invoices", "ping", schedule=CronSchedule(expr="0 */2 * * * *"),
                 params={"url": "https://billing.example/run"}),
        make_job("cache.warm", "sleep", schedule=IntervalSchedule(every_seconds=60)),
        make_job("reports.weekly", "ping", params={"url": "https://reports.example/"},
                 schedule=CronSchedule(expr="0 0 9 * * 1-5", timezone="Europe/Berlin")),
        make_job("sync.partner-feed", "boom", schedule=IntervalSchedule(every_seconds=300)),
        # Down for most of an hour, and told to skip what it missed: the engine records skips.
        make_job("exports.rollup", "ping", params={"url": "https://exports.example/"},
                 schedule=CronSchedule(expr="0 */20 * * * *"),
                 next_run_at=T0 - timedelta(minutes=50),
                 misfire=Misfire(policy=MisfirePolicy.SKIP, grace_seconds=60)),
    ]  # fmt: skip
    for job in jobs:
        await harness.store.insert_job(job)
    runs = []
    for minute in range(60, 0, -1):
        at = T0 - timedelta(minutes=minute)
        for job in jobs[:2]:
            lag = rng.lognormvariate(-3.2, 0.6) + (2.5 if minute in (37, 38) else 0)
            runs.append(history_run(job, at, lag, rng.uniform(40, 900), Status.SUCCESS))
    runs[40] = history_run(jobs[1], runs[40].scheduled_at, 0.05, 30_000, Status.TIMEOUT,
                           "DeadlineExceeded: ran past its 30 s timeout")  # fmt: skip
    runs.append(history_run(jobs[3], T0 - timedelta(minutes=12), 0.04, 310, Status.FAILED,
                            HOSTILE_ERROR))  # fmt: skip
    await harness.store.insert_executions(runs)
    return jobs[3]


def history_run(
    job: Job,
    at: object,
    lag: float | None,
    duration_ms: float | None,
    status: Status,
    error: str | None = None,
) -> Execution:
    assert isinstance(at, type(T0))
    started = at + timedelta(seconds=lag) if lag is not None else None
    finished = started + timedelta(milliseconds=duration_ms or 0) if started else at
    kind, _, message = (error or "").rpartition(": ")
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=at,
        status=status,
        started_at=started,
        finished_at=finished,
        duration_ms=duration_ms,
        attempts=1 if started else 0,
        error=ExecutionError(type=kind or "RuntimeError", message=message) if error else None,
    )


async def sign_in(page: Page, url: str) -> None:
    await page.goto(f"{url}/ui")
    await page.get_by_label("API token").fill(WRITE)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#session")).to_contain_text("deployer · write")


async def test_an_operator_signs_in_creates_pauses_and_retries(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    harness.clock.set(T0)
    failing = await seed_last_hour(harness)
    await harness.engine.drain()  # the due jobs run once: the failing one fails for real

    await sign_in(page, url)

    # Now: what failed and why, at the top; markup in an error shown as text.
    problems = page.get_by_test_id("problems")
    await expect(problems).to_contain_text("sync.partner-feed")
    await expect(problems).to_contain_text("RuntimeError: always fails")
    await expect(problems).to_contain_text(HOSTILE_ERROR)
    await expect(problems).to_contain_text("Misfire: missed by more than the grace period (60 s)")
    assert await page.evaluate("window.pwned") is None
    await expect(page.locator("figure").first).to_contain_text("Executions per minute")
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / "dashboard.png", full_page=True)

    # Jobs: the table, the schedule in words, search.
    await page.get_by_role("link", name="Jobs", exact=True).click()
    table = page.get_by_test_id("jobs")
    await expect(table.locator("tr[data-job='reports.weekly']")).to_contain_text(
        "at 09:00, Monday to Friday (Europe/Berlin)"
    )
    await page.get_by_label("Search jobs").fill("partner")
    await expect(table.locator("tbody tr")).to_have_count(1)

    # A new job: the API's 422 beside the field, then the preview with the DST change marked.
    await page.get_by_role("link", name="New job").click()
    await page.get_by_label("Name").fill("ui.created")
    await page.get_by_label("Handler").select_option("ping")
    await page.get_by_label("Cron expression (seconds first)").fill("0 0 12 * * SUN")
    await page.get_by_label("Time zone").fill("Europe/Berlin")
    await expect(page.get_by_test_id("schedule-words")).to_have_text("at 12:00, on Sunday")
    preview = page.get_by_test_id("fire-times")
    await expect(preview.locator("li").nth(3)).to_contain_text("2026-03-29 10:00:00 UTC")
    await expect(preview.locator("li").nth(3)).to_contain_text("DST change")
    await expect(preview.locator("li").nth(2)).not_to_contain_text("DST change")
    await page.get_by_role("button", name="Create job").click()
    await expect(page.locator(".field[data-field='params'] .field-error")).to_contain_text(
        "'url' is a required property"
    )
    await page.get_by_label("Params (JSON)").fill('{"url": "https://example.com/health"}')
    await page.get_by_role("button", name="Create job").click()
    await expect(page.locator("h1")).to_contain_text("ui.created")

    # Its run appears once the dispatcher has run it.
    await page.get_by_role("button", name="Trigger").click()
    await expect(page.locator("#notices")).to_contain_text("triggered")
    await harness.engine.drain()
    runs = page.get_by_test_id("executions")
    await expect(runs.locator("tr[data-status='success']")).to_have_count(1, timeout=REFRESHED_MS)

    # Paused, and the history says who did it.
    await page.get_by_role("button", name="Pause").click()
    await expect(page.locator("h1 .pill")).to_have_text("paused")
    await expect(page.get_by_test_id("history")).to_contain_text("pause")
    created = await harness.store.get_job_by_name("ui.created")
    assert created is not None and not created.enabled
    assert created.paused_reason == "paused by deployer"

    # A failed run: its error, and a retry queued for it.
    await page.goto(f"{url}/ui#/jobs/{failing.id}")
    failed = page.get_by_test_id("executions").locator("tr[data-status='failed']")
    await expect(failed.first).to_contain_text("RuntimeError: always fails")
    await failed.first.get_by_role("button", name="Retry").click()
    await expect(page.locator("#notices")).to_contain_text("Retry queued")
    assert await harness.store.run_request_pending(failing.id, T0)

    await page.goto(f"{url}/ui#/jobs")
    await page.get_by_role("link", name="cache.warm").click()
    await expect(page.get_by_test_id("executions").locator("tbody tr").nth(59)).to_be_visible()
    await page.screenshot(path=SCREENSHOTS / "dashboard-job.png")


async def test_a_read_token_sees_but_is_offered_no_changes(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    await seed_last_hour(harness)
    await page.goto(f"{url}/ui#/jobs")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.get_by_label("API token").fill("not-a-token-at-all")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("main")).to_contain_text("That token was not accepted.")
    await page.get_by_label("API token").fill(READ)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_test_id("jobs").locator("tbody tr")).to_have_count(5)
    await expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    await expect(page.get_by_role("link", name="New job")).to_have_count(0)
    assert await page.evaluate("sessionStorage.getItem('tickd.token')") == READ
    assert await page.evaluate("localStorage.length") == 0
    assert READ not in await page.evaluate("document.cookie")


async def test_without_tokens_it_opens_at_once_and_edits_a_job(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    harness.clock.set(T0)
    await seed_last_hour(harness)
    await page.goto(f"{url}/ui#/jobs")
    await expect(page.locator("#session")).to_contain_text("open API")
    await expect(page.get_by_test_id("jobs").locator("tbody tr")).to_have_count(5)
    await page.screenshot(path=SCREENSHOTS / "dashboard-jobs.png")

    await page.get_by_role("link", name="billing.invoices").click()
    await page.get_by_role("link", name="Edit").click()
    await page.get_by_label("Cron expression (seconds first)").fill("0 15 6 * * MON-FRI")
    await expect(page.get_by_test_id("schedule-words")).to_have_text("at 06:15, Monday to Friday")
    await page.get_by_label("Shards").fill("3")
    await page.get_by_role("button", name="Save changes").click()
    await expect(page.locator(".job-head")).to_contain_text("at 06:15, Monday to Friday (UTC)")
    await expect(page.get_by_test_id("history")).to_contain_text("0 15 6 * * MON-FRI")
    await expect(page.locator("dl.facts")).to_contain_text("3 (each occurrence runs as 3")
    saved = await harness.store.get_job_by_name("billing.invoices")
    assert saved is not None and saved.revision == 2 and saved.shards == 3

    # A sharded occurrence's runs say which shard each was.
    at = T0 - timedelta(seconds=30)
    shard = replace(history_run(saved, at, 0.01, 20, Status.SUCCESS), shard=1, shards=3)
    await harness.store.insert_executions([shard])
    await page.reload()
    row = page.get_by_test_id("executions").locator("tbody tr").first
    await expect(row).to_contain_text("2 of 3")
    assert saved.params == {"url": "https://billing.example/run"}
