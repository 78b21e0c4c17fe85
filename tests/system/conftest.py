"""System tests: tickd daemons on real FerretDB (over PostgreSQL), Redis and Kafka
(scripts/services.sh).

Selected with `pytest -m system`, left out with `-m "not system"`. Each test skips when a service
is absent, and fails instead under TICKD_REQUIRE_SERVICES=1 (CI).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.system.stack import Report, Sandbox, require_services


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    """The three services up; a database, topic and keys of the test's own, removed after."""
    await require_services()
    corner = Sandbox()
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
