"""The shape of a run's path: few modules, each stage handing the next a value, the store held
by its roles. One run is traced from the due query to its written end."""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any, get_type_hints

from tests.conftest import EngineFactory, make_job
from tests.test_engine import executions, noop
from tickd.scheduler.model import Status
from tickd.scheduler.ports import store_api, store_engine
from tickd.scheduler.ports.backends import Ports, Store
from tickd.scheduler.run.arm import Arming
from tickd.scheduler.run.claim import Claimer
from tickd.scheduler.run.end import Ender
from tickd.scheduler.run.execute import Executor
from tickd.scheduler.run.fetch import Fetcher
from tickd.scheduler.run.pool import WorkerPool
from tickd.scheduler.run.record import Recorder
from tickd.scheduler.run.write import Writer

SCHEDULER = Path(__file__).resolve().parents[1] / "scheduler"
STAGES = (Fetcher, Claimer, Arming, Recorder, WorkerPool, Executor, Ender, Writer)
MAX_MODULES = 10
MAX_ROLE_METHODS = 15


def _run_path_module(filename: str) -> str | None:
    """The dispatcher or a module of run/, as a path under scheduler/; None for the rest."""
    path = Path(filename).resolve()
    if not path.is_relative_to(SCHEDULER):
        return None
    name = path.relative_to(SCHEDULER).as_posix()
    return name if name == "dispatcher.py" or name.startswith("run/") else None


async def test_a_run_crosses_at_most_ten_modules_of_its_path(make_engine: EngineFactory) -> None:
    h = make_engine({"noop": noop})
    await h.add(make_job("traced"))
    h.engine.start()
    crossed: set[str] = set()

    def trace(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and (module := _run_path_module(frame.f_code.co_filename)):
            crossed.add(module)

    sys.setprofile(trace)
    try:
        await h.engine.tick()
        await h.engine.settled()
    finally:
        sys.setprofile(None)
    [run] = await executions(h.store)
    assert run.status is Status.SUCCESS, "traced to its written end"
    assert crossed == {
        "dispatcher.py",
        "run/fetch.py",
        "run/claim.py",
        "run/arm.py",
        "run/record.py",
        "run/pool.py",
        "run/execute.py",
        "run/end.py",
        "run/write.py",
        "run/ledger.py",
    }
    assert len(crossed) <= MAX_MODULES


def _forbidden(annotation: object) -> str | None:
    """What a stage must not be handed: a callable or a future (a way back to an earlier
    stage), or the whole store (its roles instead)."""
    origin = typing.get_origin(annotation) or annotation
    if origin in (Callable, Awaitable) or origin is typing.Callable:
        return "a callable"
    if isinstance(origin, type) and origin.__name__ in ("Future", "Task"):
        return "a future"
    if origin in (Store, Ports):
        return f"{origin.__name__}, not a role"
    for arg in typing.get_args(annotation):
        if (found := _forbidden(arg)) is not None:
            return found
    return None


def test_no_stage_is_handed_a_callable_a_future_or_the_whole_store() -> None:
    handed = {
        f"{stage.__name__}({name})": why
        for stage in STAGES
        for name, annotation in get_type_hints(stage.__init__).items()
        if name != "return" and (why := _forbidden(annotation)) is not None
    }
    assert handed == {}


def _methods(role: type) -> list[str]:
    return [name for name, _ in inspect.getmembers(role) if not name.startswith("_")]


def test_the_stores_roles_the_stages_hold_are_small() -> None:
    roles = {
        name: len(_methods(role))
        for module in (store_engine, store_api)
        for name, role in vars(module).items()
        if getattr(role, "_is_protocol", False) and role.__module__ == module.__name__
    }
    assert roles, "the role protocols are found"
    assert {name: count for name, count in roles.items() if count > MAX_ROLE_METHODS} == {}


def test_the_api_holds_the_stores_roles_not_the_whole_store() -> None:
    from tickd.api.v1 import ApiState

    hints = get_type_hints(ApiState)
    whole = {name for name, hint in hints.items() if (_forbidden(hint) or "").endswith("a role")}
    assert whole == set()
    roles = {
        name: hint.__name__
        for name, hint in hints.items()
        if getattr(hint, "_is_protocol", False)
        and hint.__module__.endswith(("store_api", "store_engine"))
    }
    assert set(roles) >= {"jobs", "requests", "executions", "views"}
    assert all(len(_methods(hints[name])) <= MAX_ROLE_METHODS for name in roles)
