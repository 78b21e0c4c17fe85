"""The handler registry: entry points, in-code registration, and duplicates that stop startup."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickd.scheduler.plugin.api import HandlerContext, Result, handler
from tickd.scheduler.plugin.registry import ENTRY_POINT_GROUP, HandlerRegistry, RegistryError

GROUP = "tickd.handlers.test"


async def one(ctx: HandlerContext) -> Result:
    return None


def install_distribution(
    root: Path, name: str, entry_points: dict[str, str], module: str = ""
) -> None:
    """A real (if tiny) installed distribution on sys.path: what pip leaves behind."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}\n")
    if module:
        (root / f"{name.replace('-', '_')}_handlers.py").write_text(module)


MODULE = """
async def ping(ctx):
    return {"pong": True}
"""


def test_tickd_registers_its_own_handlers_through_entry_points() -> None:
    registry = HandlerRegistry()
    registry.load_entry_points(ENTRY_POINT_GROUP)
    assert {"noop", "sleep"} <= {r.name for r in registry}
    noop = registry.get("noop")
    assert noop is not None and noop.origin.startswith("tickd ")
    assert "tickd.handlers.noop:noop" in noop.origin


def test_a_plugin_distribution_registers_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_distribution(tmp_path, "acme", {"ping": "acme_handlers:ping"}, MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = HandlerRegistry()
    registry.load_entry_points(GROUP)
    registered = registry.get("ping")
    assert registered is not None
    assert registered.origin == "acme 1.0 (acme_handlers:ping)"
    assert registered.handler.params_schema is None


def test_a_duplicate_name_stops_startup_naming_both_origins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_distribution(tmp_path / "a", "acme", {"ping": "acme_handlers:ping"}, MODULE)
    install_distribution(tmp_path / "b", "rival", {"ping": "rival_handlers:ping"}, MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    with pytest.raises(RegistryError) as raised:
        HandlerRegistry().load_entry_points(GROUP)
    message = str(raised.value)
    assert "duplicate handler name 'ping'" in message
    assert "acme 1.0 (acme_handlers:ping)" in message
    assert "rival 1.0 (rival_handlers:ping)" in message


def test_an_entry_point_that_fails_to_load_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_distribution(tmp_path, "broken", {"gone": "no_such_module:handler"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError, match=r"handler 'gone' from broken 1.0 .* failed to load"):
        HandlerRegistry().load_entry_points(GROUP)


def test_in_code_registration_and_duplicates() -> None:
    registry = HandlerRegistry()
    registry.register("one", one)
    registry.register("limited", handler(max_concurrency=3)(one))
    limited = registry.get("limited")
    assert limited is not None and limited.handler.max_concurrency == 3
    with pytest.raises(RegistryError, match=r"registered by code .*test_registry\.one"):
        registry.register("one", one, origin="code (elsewhere)")
    assert "one" in registry and "two" not in registry
    with pytest.raises(RegistryError, match="not callable"):
        registry.register("bad", handler()(42))  # type: ignore[arg-type]
