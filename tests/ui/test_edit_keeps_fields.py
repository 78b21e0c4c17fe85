"""Editing a job in the dashboard changes the field edited and nothing else: what the form does
not show (jitter, the re-drive policy), what it shows masked (a secret param) and every field it
shows unedited read back from the API as they were."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page, expect

from tests.conftest import T0, Harness

# Every field a client can set, none at its default.
EVERY_FIELD: dict[str, Any] = {
    "name": "billing.every-field",
    "handler": "ping",
    "schedule": {"kind": "cron", "expr": "0 30 7 * * MON-FRI", "timezone": "Europe/Berlin"},
    "params": {"url": "https://billing.example/run", "api_key": "k-93jd", "attempts_to_fail": 2},
    "enabled": False,
    "timeout_seconds": 45,
    "max_retries": 4,
    "priority": "high",
    "misfire": {"policy": "run_all", "grace_seconds": 120},
    "jitter_seconds": 7.5,
    "redrive": {"max_attempts": 3, "backoff_seconds": 60},
    "shards": 2,
    "domain": "billing",
}
# What an edit of the timeout changes by design.
CHANGED_BY_THE_EDIT = {"timeout_seconds", "revision", "updated_at"}


async def read_job(page: Page, url: str, job_id: str) -> dict[str, Any]:
    response = await page.request.get(f"{url}/v1/jobs/{job_id}")
    assert response.ok, await response.text()
    job: dict[str, Any] = await response.json()
    return job


async def test_editing_the_timeout_keeps_every_other_field(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    harness.clock.set(T0)
    created = await page.request.post(f"{url}/v1/jobs", data=EVERY_FIELD)
    assert created.status == 201, await created.text()
    job_id = (await created.json())["id"]
    before = await read_job(page, url, job_id)

    await page.goto(f"{url}/ui#/jobs/{job_id}/edit")
    await page.get_by_label("Timeout (s)").fill("90")
    await page.get_by_role("button", name="Save changes").click()
    await expect(page.locator("dl.facts")).to_contain_text("2 min")

    after = await read_job(page, url, job_id)
    assert after["timeout_seconds"] == 90
    assert after["revision"] == before["revision"] + 1
    for field in sorted(before.keys() - CHANGED_BY_THE_EDIT):
        assert after[field] == before[field], field
    stored = await harness.store.get_job(job_id)
    assert stored is not None and stored.params["api_key"] == "k-93jd"

    history = await page.request.get(f"{url}/v1/jobs/{job_id}/history")
    [edit, _create] = (await history.json())["items"]
    assert edit["changes"] == {"timeout_seconds": {"from": 45.0, "to": 90.0}}
