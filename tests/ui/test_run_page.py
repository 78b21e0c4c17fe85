"""A run's page, reached from its job's run list: each attempt with its start, end, error and
the backoff before the next; the handler's result; the error's traceback; the other shards of
its occurrence side by side; and a record that keeps no attempt log shown as what it has."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from playwright.async_api import Page, expect

from tests.conftest import T0, Harness, make_job
from tickd.scheduler.model import Attempt, Execution, ExecutionError, Job, Status

AT = T0 - timedelta(minutes=5)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "handlers/export.py", line 41, in run\n'
    "    rows = await fetch(url)\n"
    "ConnectionError: partner feed refused the connection"
)


def attempt(
    number: int, start: float, end: float, error: str | None, backoff: float | None
) -> Attempt:
    kind, _, message = (error or "").partition(": ")
    return Attempt(
        number=number,
        started_at=AT + timedelta(seconds=start),
        finished_at=AT + timedelta(seconds=end),
        error=ExecutionError(type=kind, message=message) if error else None,
        backoff_seconds=backoff,
    )


def shard_run(job: Job, shard: int, status: Status, ended: float, **fields: object) -> Execution:
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=AT,
        status=status,
        started_at=AT,
        finished_at=AT + timedelta(seconds=ended),
        duration_ms=ended * 1000,
        shard=shard,
        shards=3,
        **fields,  # type: ignore[arg-type]
    )


async def seed(harness: Harness) -> tuple[Job, Execution, Execution, Execution]:
    harness.clock.set(T0)
    job = make_job("exports.partner", "ping", params={"url": "https://partner.example/"}, shards=3)
    await harness.store.insert_job(job)
    retried = shard_run(
        job, 0, Status.SUCCESS, 7.5, attempts=3, result={"rows": 4213},
        attempt_log=(
            attempt(1, 0, 0.5, "ConnectionError: partner feed refused the connection", 2.0),
            attempt(2, 2.5, 3.0, "TimeoutError: read timed out", 4.0),
            attempt(3, 7.0, 7.5, None, None),
        ),
    )  # fmt: skip
    failed = shard_run(
        job, 1, Status.FAILED, 0.5, attempts=1,
        error=ExecutionError(type="ConnectionError", message="partner feed refused the connection",
                             traceback=TRACEBACK),
    )  # fmt: skip
    older = shard_run(
        job, 2, Status.FAILED, 9.0, attempts=2,
        error=ExecutionError(type="RuntimeError", message="upstream said no"),
    )  # fmt: skip
    await harness.store.insert_executions([retried, failed, older])
    return job, retried, failed, older


async def shown(page: Page, at: datetime) -> str:
    """`at` as the dashboard writes a time: in UTC, to the second, labelled."""
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


async def test_a_run_page_shows_each_attempt_its_result_and_its_shards(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    job, retried, failed, older = await seed(harness)
    await page.goto(f"{url}/ui#/jobs/{job.id}")
    row = page.get_by_test_id("executions").locator("tbody tr").first
    await expect(row).to_contain_text("1 of 3")
    await row.get_by_role("link").first.click()
    await expect(page).to_have_url(f"{url}/ui#/runs/{retried.id}")

    attempts = page.get_by_test_id("attempts").locator("tbody tr")
    await expect(attempts).to_have_count(3)
    first, second, third = (attempts.nth(i) for i in range(3))
    await expect(first).to_contain_text("ConnectionError: partner feed refused the connection")
    await expect(first).to_contain_text(await shown(page, AT))
    await expect(first).to_contain_text("500 ms")
    await expect(first.locator("td").last).to_have_text("2.00 s")
    await expect(second).to_contain_text("TimeoutError: read timed out")
    await expect(second).to_contain_text(await shown(page, AT + timedelta(seconds=2.5)))
    await expect(second.locator("td").last).to_have_text("4.00 s")
    await expect(third.locator("td").nth(4)).to_have_text("")
    await expect(third.locator("td").last).to_have_text("—")
    await expect(page.get_by_test_id("result")).to_contain_text('"rows": 4213')

    # Its occurrence: the three shards side by side, this one marked.
    shards = page.get_by_test_id("occurrence").locator(".shard-card")
    await expect(shards).to_have_count(3)
    await expect(shards.nth(0)).to_contain_text("this run")
    await expect(shards.nth(1)).to_contain_text("Shard 2 of 3")
    await expect(shards.nth(1)).to_contain_text("ConnectionError")

    # The failed shard: its traceback.
    await shards.nth(1).get_by_role("link", name="open").click()
    await expect(page).to_have_url(f"{url}/ui#/runs/{failed.id}")
    await expect(page.get_by_test_id("traceback")).to_have_text(TRACEBACK)
    await expect(page.get_by_test_id("attempts").locator("tbody tr")).to_have_count(1)
    await expect(page.locator("main")).not_to_contain_text("keeps no log")

    # A record that keeps no attempt log: the run as a whole, said so.
    await (
        page.get_by_test_id("occurrence")
        .locator(f"[data-run='{older.id}']")
        .get_by_role("link", name="open")
        .click()
    )
    await expect(page.locator("main")).to_contain_text("keeps no log of its attempts")
    summary = page.get_by_test_id("attempts").locator("tbody tr")
    await expect(summary).to_have_count(1)
    await expect(summary).to_contain_text("1 to 2")
    await expect(summary).to_contain_text("RuntimeError: upstream said no")
    await expect(page.get_by_test_id("outcome")).to_contain_text("No traceback recorded.")
