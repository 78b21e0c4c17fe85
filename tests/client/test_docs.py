"""docs/client.md's snippets run as they are, in order, against the API."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import WRITE, Api
from tests.client.conftest import base_url

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "client.md"
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


@contextlib.asynccontextmanager
async def running_the_engine(api: Api) -> AsyncIterator[None]:
    """Runs what is due while the snippets wait for it, as the daemon's dispatcher would."""

    async def dispatch() -> None:
        while True:
            await api.harness.engine.drain()
            await asyncio.sleep(0.01)

    task = asyncio.create_task(dispatch())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_guides_snippets_run(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TICKD_URL", base_url(api))
    monkeypatch.setenv("TICKD_TOKEN", WRITE)
    snippets = SNIPPET.findall(GUIDE.read_text())
    assert len(snippets) >= 5
    namespace: dict[str, Any] = {"__name__": "guide"}
    async with running_the_engine(api):
        for snippet in snippets:
            # In a thread: the blocking Client and asyncio.run both need this loop left free.
            await asyncio.to_thread(exec, snippet, namespace)
    printed = capsys.readouterr().out
    assert "422 ['params" in printed and "success" in printed
    assert await api.store.list_jobs() == [], "the last snippet deleted the job"
