"""What a handler returns or raises, however odd, is recorded as text every store, JSON encoder
and UTF-8 writer takes: lone surrogates escaped, results that are not JSON refused naming where,
an exception that cannot be described described by its type, frames without install paths, and
the secrets of the handler's settings masked where a far end echoes them."""

from __future__ import annotations

import json
import logging
import sysconfig
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import EngineFactory, Harness, make_job
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.plugin.api import HandlerContext, Result, handler
from tickd.scheduler.plugin.outcomes import outcome_of
from tickd.scheduler.ports.backends import ExecutionQuery
from tickd.scheduler.secrets.masking import MASK

PROJECT = str(Path(__file__).resolve().parents[1])


async def noop(ctx: HandlerContext) -> Result:
    return None


async def runs_of(h: Harness) -> dict[str, Execution]:
    return {e.job_name: e for e in await h.store.list_executions(ExecutionQuery(limit=100))}


def encodable(value: Any) -> None:
    """Raises if `value` holds text that strict UTF-8 (every store, aiohttp) refuses."""
    json.dumps(value, ensure_ascii=False).encode("utf-8")


async def run_once(
    make_engine: EngineFactory, func: Any, name: str = "subject", **job: Any
) -> Execution:
    h = make_engine({name: func, "noop": noop}, workers=1)
    await h.add(make_job(name, name, **job))
    await h.engine.drain()
    return (await runs_of(h))[name]


# -- lone surrogates -------------------------------------------------------------------------


async def test_a_result_holding_a_lone_surrogate_is_stored_escaped_on_every_store(
    make_engine: EngineFactory,
) -> None:
    async def returns_surrogates(ctx: HandlerContext) -> Result:
        return {"note": "\ud800", "bad \udcff byte": ["bad \udcff byte"], "pair": "\ud83d\ude00"}

    run = await run_once(make_engine, returns_surrogates)
    assert run.status is Status.SUCCESS
    assert run.result == {
        "note": "\\ud800",
        "bad \\udcff byte": ["bad \\udcff byte"],
        "pair": "\U0001f600",
    }
    encodable(run.result)


async def test_an_error_holding_a_lone_surrogate_is_stored_escaped_on_every_store(
    make_engine: EngineFactory,
) -> None:
    async def raises_surrogates(ctx: HandlerContext) -> Result:
        raise ValueError("\udcff")

    run = await run_once(make_engine, raises_surrogates)
    assert run.status is Status.FAILED
    assert run.error is not None and run.error.message == "\\udcff"
    assert run.error.traceback is not None
    assert run.error.traceback.rstrip().endswith("ValueError: \\udcff")
    encodable([run.error.type, run.error.message, run.error.traceback])


# -- errors that cannot be described ---------------------------------------------------------


class Evil(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class EvilRepr(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]

    def __repr__(self) -> str:
        raise RuntimeError("no")


class EvilNotes(Exception):
    @property
    def __notes__(self) -> list[str]:  # type: ignore[override]  # read by traceback formatting
        raise RuntimeError("no")


@pytest.mark.parametrize("exc_type", [Evil, EvilRepr, EvilNotes])
async def test_an_exception_that_cannot_be_described_fails_its_run_once_by_its_type(
    make_engine: EngineFactory, exc_type: type[Exception]
) -> None:
    async def raises(ctx: HandlerContext) -> Result:
        raise exc_type()

    h = make_engine({"raises": raises, "noop": noop}, workers=1)
    await h.add(make_job("evil", "raises", max_retries=0))
    await h.engine.drain()
    await h.add(make_job("next", "noop"))
    await h.engine.drain()

    runs = await runs_of(h)
    assert runs["next"].status is Status.SUCCESS, "the worker lives on"
    evil = runs["evil"]
    assert (evil.status, evil.attempts) == (Status.FAILED, 1)
    assert evil.error is not None and evil.error.type == exc_type.__name__
    assert evil.error.traceback is not None
    assert exc_type.__name__ in evil.error.message + evil.error.traceback


def test_describing_an_error_never_raises() -> None:
    outcome = outcome_of(None, Evil(), [])
    assert outcome.status is Status.FAILED and outcome.error is not None
    assert outcome.error.message == "Evil (its description failed: RuntimeError)"


# -- results that are not JSON ---------------------------------------------------------------


class Thing:
    pass


@pytest.mark.parametrize(
    ("result", "where", "what"),
    [
        ({"ratio": float("nan")}, "result.ratio", "nan"),
        ({"items": [1, float("inf")]}, "result.items[1]", "inf"),
        ({"tags": {"a", "b"}}, "result.tags", "set"),
        ({"raw": b"\x00\x01"}, "result.raw", "bytes"),
        ({"deep": {"thing": Thing()}}, "result.deep.thing", "Thing"),
        ({1: "one"}, "result", "int"),
        ({"big": 2**70}, "result.big", "64 bits"),
    ],
    ids=["nan", "infinity", "set", "bytes", "object", "int-key", "huge-int"],
)
async def test_a_result_that_is_not_json_fails_the_run_naming_where_and_what(
    make_engine: EngineFactory, result: dict[Any, Any], where: str, what: str
) -> None:
    async def returns(ctx: HandlerContext) -> Result:
        return result

    run = await run_once(make_engine, returns)
    assert run.status is Status.FAILED
    assert run.error is not None and run.error.type == "BadResult"
    assert where in run.error.message and what in run.error.message
    assert run.result is None


async def test_a_datetime_in_a_result_is_stored_as_iso_8601(make_engine: EngineFactory) -> None:
    async def returns(ctx: HandlerContext) -> Result:
        return {"at": datetime(2026, 3, 2, 1, 30, tzinfo=UTC), "pair": (1, 2)}

    run = await run_once(make_engine, returns)
    assert run.status is Status.SUCCESS
    assert run.result == {"at": "2026-03-02T01:30:00+00:00", "pair": [1, 2]}


# -- install paths ---------------------------------------------------------------------------


async def test_the_stored_traceback_names_files_without_install_paths(
    make_engine: EngineFactory,
) -> None:
    async def fails_in_aiohttp(ctx: HandlerContext) -> Result:
        aiohttp.BasicAuth(None)  # type: ignore[arg-type]  # raises in aiohttp's own code
        return None

    run = await run_once(make_engine, fails_in_aiohttp)
    assert run.error is not None and run.error.traceback is not None
    frames = run.error.traceback
    assert 'File "site-packages/aiohttp/helpers.py"' in frames
    assert 'File "tests/test_handler_output.py"' in frames
    paths = sysconfig.get_paths()
    for root in (paths["stdlib"], paths["purelib"], PROJECT):
        assert root not in frames


async def test_stdlib_frames_read_relative_to_the_stdlib(make_engine: EngineFactory) -> None:
    async def fails_in_json(ctx: HandlerContext) -> Result:
        json.loads("{")
        return None

    run = await run_once(make_engine, fails_in_json)
    assert run.error is not None and run.error.traceback is not None
    assert 'File "<stdlib>/json/decoder.py"' in run.error.traceback


# -- secrets of the handler's settings -------------------------------------------------------

SETTINGS_KEY = "vk-settings-9f3Kq2Lm"


@handler(secret_params={"account"})
async def echoes_its_settings(ctx: HandlerContext) -> Result:
    if ctx.attempt == 1:
        raise RuntimeError(f"refused key {ctx.config['api_key']} for {ctx.config['account']}")
    return {"echo": f"unknown {ctx.config['api_key']} / {ctx.config['account']}"}


async def test_secrets_of_the_handlers_settings_echoed_back_are_masked(
    make_engine: EngineFactory,
) -> None:
    h = make_engine(
        {"echoes": echoes_its_settings},
        handler_settings={"echoes": {"api_key": SETTINGS_KEY, "account": "acct-771204"}},
    )
    await h.add(make_job("echo", "echoes", max_retries=1))
    await h.engine.drain()

    run = (await runs_of(h))["echo"]
    assert run.status is Status.SUCCESS
    assert run.result == {"echo": f"unknown {MASK} / {MASK}"}
    [first] = [a for a in run.attempt_log if a.error is not None]
    assert first.error is not None
    assert first.error.message == f"refused key {MASK} for {MASK}"


@handler(secret_params={"account"})
async def logs_what_came_back(ctx: HandlerContext) -> Result:
    ctx.logger.warning("upstream echoed %s for %s", ctx.config["api_key"], ctx.params["account"])
    ctx.logger.info(f"upstream said: unknown {ctx.config['api_key']}")
    return None


async def test_secrets_echoed_into_a_handlers_log_lines_are_masked(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_engine(
        {"logs": logs_what_came_back}, handler_settings={"logs": {"api_key": SETTINGS_KEY}}
    )
    await h.add(make_job("logs", "logs", params={"account": "acct-771204"}))
    with caplog.at_level(logging.INFO, logger="tickd.handler.logs"):
        await h.engine.drain()

    lines = [r.getMessage() for r in caplog.records if r.name == "tickd.handler.logs"]
    assert lines == [f"upstream echoed {MASK} for {MASK}", f"upstream said: unknown {MASK}"]


async def test_keys_mongodb_refuses_are_stored_in_full_width_on_every_store(
    make_engine: EngineFactory,
) -> None:
    async def returns_odd_keys(ctx: HandlerContext) -> Result:
        return {"$where": 1, "api.example.com": {"p99.9": 2}, "a$b": 3}

    run = await run_once(make_engine, returns_odd_keys)
    assert run.status is Status.SUCCESS
    assert run.result == {
        "\uff04where": 1,
        "api\uff0eexample\uff0ecom": {"p99\uff0e9": 2},
        "a$b": 3,
    }


class Level(IntEnum):
    HIGH = 3


class Sly(str):
    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("no")


class Unreadable(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("no")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("no")

    def __len__(self) -> int:
        return 1


async def test_values_of_the_handlers_own_types_are_read_as_json_or_fail_the_run(
    make_engine: EngineFactory,
) -> None:
    async def returns_own_types(ctx: HandlerContext) -> Result:
        return {"level": Level.HIGH, Sly("name"): Sly("\ud800")}

    async def returns_unreadable(ctx: HandlerContext) -> Result:
        return {"rows": Unreadable()}

    run = await run_once(make_engine, returns_own_types)
    assert (run.status, run.result) == (Status.SUCCESS, {"level": 3, "name": "\\ud800"})
    unreadable = await run_once(make_engine, returns_unreadable, name="unreadable")
    assert unreadable.status is Status.FAILED and unreadable.error is not None
    assert unreadable.error.type == "BadResult"
    assert unreadable.error.message == "a handler's result could not be read: RuntimeError"
