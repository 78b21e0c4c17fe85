"""System tests: tickd daemons on a real store (FerretDB over PostgreSQL, or PostgreSQL itself),
Redis and Kafka (scripts/services.sh).

Selected with `pytest -m system`, left out with `-m "not system"`. Each test skips when a service
is absent, and fails instead under TICKD_REQUIRE_SERVICES=1 (CI). A test runs on FerretDB unless it
is parametrised over `store` (`@pytest.mark.parametrize("store", STORES)`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.system.databases import StoreKind
from tests.system.stack import Report, Sandbox, require_services


@pytest.fixture
def store() -> StoreKind:
    """The store the test's daemons run on: FerretDB, unless the test is parametrised over
    STORES. It hides the store fixture of tests/fixtures in this folder."""
    return "ferretdb"


@pytest.fixture
async def sandbox(store: StoreKind) -> AsyncIterator[Sandbox]:
    """The store, Redis and Kafka up; a database, topic and keys of the test's own, removed
    after."""
    corner = Sandbox(kind=store)
    await require_services(corner.db)
    try:
        yield corner
    finally:
        await corner.clean()


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Iterator[Report]:
    """Lines for the test's output, shown whether it passes or fails (and kept for -rP)."""
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        print(line)

    yield say
    with capsys.disabled():
        print()
        for line in lines:
            print(f"    {line}")
