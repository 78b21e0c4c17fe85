"""Text a handler returned or raised reads back through every API answer and the command line's
output, whatever it holds: a lone surrogate (text strict UTF-8 refuses) is escaped, never a 500,
whether the run was recorded now or a store already holds it."""

from __future__ import annotations

import io
import json
import sys
import sysconfig
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from tests.api.conftest import READ, Api, serving
from tests.conftest import T0, EngineFactory, make_job
from tickd.cli import output
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Status
from tickd.scheduler.plugin.api import Handler, HandlerContext, HandlerFunc, Result
from tickd.scheduler.ports.backends import ExecutionQuery


async def returns_a_surrogate(ctx: HandlerContext) -> Result:
    return {"note": "\ud800"}


async def raises_a_surrogate(ctx: HandlerContext) -> Result:
    raise ValueError("\udcff")


@pytest.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[Api]:
    handlers: dict[str, Handler | HandlerFunc] = {
        "returns": returns_a_surrogate,
        "raises": raises_a_surrogate,
    }
    async with serving(make_engine, handlers) as served:
        yield served


async def reads(api: Api, job_id: str, execution_id: str) -> dict[str, Any]:
    """Every read the dashboard, the job page and the command line make, by path: each must
    answer 200 with JSON."""
    paths = [
        "/v1/jobs",
        f"/v1/jobs/{job_id}",
        "/v1/executions",
        f"/v1/executions?job_id={job_id}",
        f"/v1/executions/{execution_id}",
        "/v1/dead-letters",
        "/v1/stats",
        "/v1/stats?window=604800",
    ]
    answers = {}
    for path in paths:
        status, body, _ = await api.call("GET", path, token=READ)
        assert status == 200, (path, body)
        answers[path] = body
    return answers


async def test_runs_that_returned_and_raised_lone_surrogates_read_back_everywhere(
    api: Api,
) -> None:
    returns = await api.harness.add(make_job("returns", "returns"))
    raises = await api.harness.add(make_job("raises", "raises", max_retries=0))
    await api.harness.engine.drain()
    runs = {e.job_name: e for e in await api.store.list_executions(ExecutionQuery(limit=10))}
    assert runs["raises"].dead_letter is DeadLetter.OPEN

    answers = await reads(api, raises.id, runs["raises"].id)
    assert answers[f"/v1/executions/{runs['raises'].id}"]["error"]["message"] == "\\udcff"
    shown = await reads(api, returns.id, runs["returns"].id)
    assert shown[f"/v1/executions/{runs['returns'].id}"]["result"] == {"note": "\\ud800"}


# MongoDB refuses such text on the way in (BSON holds UTF-8 only): SQLite keeps what it is given.
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_lone_surrogate_a_store_already_holds_is_shown_escaped_never_a_500(
    api: Api,
) -> None:
    job = await api.harness.add(make_job("old", "raises", next_run_at=None))
    at = T0 - timedelta(minutes=1)
    stored = Execution(
        job_id=job.id,
        job_name=job.name,
        handler="raises",
        scheduled_at=at,
        started_at=at,
        finished_at=at,
        status=Status.FAILED,
        error=ExecutionError(type="ValueError", message="bad \udcff byte", traceback="\ud800"),
        result={"note": "\ud800"},
        dead_letter=DeadLetter.OPEN,
    )
    await api.store.insert_executions([stored])

    answers = await reads(api, job.id, stored.id)
    shown = answers[f"/v1/executions/{stored.id}"]
    assert shown["error"]["message"] == "bad \\udcff byte"
    assert shown["result"] == {"note": "\\ud800"}


def strict_stdout(monkeypatch: pytest.MonkeyPatch) -> io.BytesIO:
    """stdout as a pipe gives it: UTF-8 that refuses what it cannot encode."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8"))
    return raw


def test_the_command_line_prints_a_lone_surrogate_escaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = strict_stdout(monkeypatch)
    output.encodable_output()
    output.print_json({"note": "\ud800"})
    output.print_table(("ERROR",), [["bad \udcff byte"]], empty="-")
    output.print_fields([("error", "\udcff")])
    sys.stdout.flush()
    printed = raw.getvalue().decode("utf-8")
    assert json.loads(printed.split("\n}\n")[0] + "\n}") == {"note": "\\ud800"}
    assert "bad \\udcff byte" in printed
    assert "error  \\udcff" in printed


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_stored_traceback_is_shown_without_the_servers_install_paths(api: Api) -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    frames = (
        "Traceback (most recent call last):\n"
        f'  File "{stdlib}/json/decoder.py", line 353, in raw_decode\n'
        "ValueError: no\n"
    )
    job = await api.harness.add(make_job("old", "raises", next_run_at=None))
    at = T0 - timedelta(minutes=1)
    stored = Execution(
        job_id=job.id,
        job_name=job.name,
        handler="raises",
        scheduled_at=at,
        started_at=at,
        finished_at=at,
        status=Status.FAILED,
        error=ExecutionError(type="ValueError", message="no", traceback=frames),
    )
    await api.store.insert_executions([stored])

    status, shown, _ = await api.call("GET", f"/v1/executions/{stored.id}", token=READ)
    assert status == 200
    assert shown["error"]["traceback"] == frames.replace(stdlib, "<stdlib>")


class Evil(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


async def raises_evil(ctx: HandlerContext) -> Result:
    raise Evil()


async def test_a_triggered_run_whose_exception_cannot_be_described_fails_once(
    make_engine: EngineFactory,
) -> None:
    async with serving(make_engine, {"evil": raises_evil}) as api:
        job = await api.harness.add(make_job("evil", "evil", next_run_at=None, max_retries=0))
        status, _, _ = await api.call("POST", f"/v1/jobs/{job.id}/trigger")
        assert status == 202
        await api.harness.engine.drain()
        api.clock.advance(3600)  # past any lease the run could have held
        await api.harness.engine.drain()

        status, page, _ = await api.call("GET", "/v1/dead-letters", token=READ)
        assert status == 200
        [dead] = page["items"]
        assert (dead["status"], dead["error"]["type"]) == ("failed", "Evil")
        assert dead["error"]["message"] == "Evil (its description failed: RuntimeError)"
        runs = await api.store.list_executions(ExecutionQuery(job_id=job.id, limit=10))
        assert len(runs) == 1, "run once, never again"
