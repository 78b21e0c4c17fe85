"""The Instances page: each instance's version, start, partitions held, runs in flight, runs
recorded running and last heartbeat, as its heartbeat wrote them, reached from the navigation and
from the Running page, on a phone and a laptop, light and dark.

Leaves var/screenshots/instances-<width>-<scheme>.png behind, to be looked at.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import Page, expect

from tests.conftest import T0, Harness
from tests.ui.test_dashboard import sign_in
from tests.ui.test_phone_night_keys import (
    SETTINGS,
    fits_the_screen,
    themed,
)
from tests.ui.test_running_ui import stuck_run
from tickd.scheduler.ports.backends import InstanceStatus

__all__ = ["themed"]

TALKING = "worker-eu-west-1a-7f9c"
SILENT = "worker-eu-west-1b-2d41"


async def two_instances(harness: Harness) -> None:
    """One instance that says how it is and holds partitions and a run; one that says nothing."""
    harness.clock.set(T0)
    await stuck_run(harness, "nightly-export-of-the-warehouse", TALKING)
    await harness.store.beat(TALKING, T0, InstanceStatus("1.4.0", T0 - timedelta(hours=3), 2))
    await harness.store.take_partitions(TALKING, list(range(32)))
    await harness.store.beat(SILENT, T0 + timedelta(seconds=5))


@pytest.mark.parametrize("themed", SETTINGS, indirect=True, ids=lambda s: f"{s[0]}-{s[1]}")
async def test_the_instances_page_shows_what_each_instance_said_and_fits_the_screen(
    daemon: tuple[Harness, str], themed: Page
) -> None:
    harness, url = daemon
    page = themed
    await two_instances(harness)
    await sign_in(page, url)

    await page.get_by_role("link", name="Instances", exact=True).click()

    await expect(page.locator("[data-nav='instances']")).to_have_class("active")
    table = page.get_by_test_id("instances")
    talking = table.locator(f"tr[data-instance='{TALKING}']")
    await expect(talking.get_by_test_id("version")).to_have_text("1.4.0")
    await expect(talking.get_by_test_id("started")).to_have_text("2026-03-02 06:00:00 UTC")
    await expect(talking.get_by_test_id("partitions")).to_have_text("32")
    await expect(talking.get_by_test_id("in-flight")).to_have_text("2")
    await expect(talking.get_by_test_id("running")).to_have_text("1")
    await expect(talking.get_by_test_id("last-beat")).to_have_text("2026-03-02 09:00:00 UTC")
    silent = table.locator(f"tr[data-instance='{SILENT}']")
    for cell, text in [("version", "—"), ("started", "—"), ("partitions", "0"), ("in-flight", "—")]:
        await expect(silent.get_by_test_id(cell)).to_have_text(text)
    await expect(silent.get_by_test_id("last-beat")).to_have_text("2026-03-02 09:00:05 UTC")
    await fits_the_screen(page, "instances")


async def test_the_running_page_leads_to_the_instances(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    await two_instances(harness)
    await sign_in(page, url)
    await page.evaluate("location.hash = '#/running'")
    await expect(page.get_by_test_id("running")).to_contain_text(TALKING)

    await page.get_by_role("link", name="The instances", exact=True).click()

    await expect(page.get_by_test_id("instances").locator("tbody tr")).to_have_count(2)
    assert page.url.endswith("#/instances")


async def test_the_instances_page_refreshes_to_show_a_new_heartbeat(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    await two_instances(harness)
    await page.clock.install()
    await sign_in(page, url)
    await page.evaluate("location.hash = '#/instances'")
    version = page.locator(f"tr[data-instance='{SILENT}']").get_by_test_id("version")
    await expect(version).to_have_text("—")

    await harness.store.beat(SILENT, T0 + timedelta(seconds=8), InstanceStatus("1.5.0", T0, 0))
    await page.clock.run_for(6_000)  # past the page's refresh

    await expect(version).to_have_text("1.5.0")
