"""docs/architecture.md draws a run's states as scheduler/run/states.py names them: the same
transitions, each made by a function that exists, and only files that exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from tickd.scheduler.run.states import FIRST, LAST, TRANSITIONS, RunState

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
ARROW = re.compile(r"^\s*(\[\*\]|\w+) --> (\[\*\]|\w+)(?: : (\w+))?\s*$")


def drawn() -> set[tuple[str, str, str | None]]:
    block = DOC.split("```mermaid", 1)[1].split("```", 1)[0]
    assert "stateDiagram" in block
    return {
        (m[1], m[2], m[3]) for line in block.splitlines() if (m := ARROW.match(line)) is not None
    }


def test_the_diagram_draws_every_transition_and_only_those() -> None:
    named = {(t.source.value, t.target.value, t.name) for t in TRANSITIONS}
    ends = {("[*]", FIRST.value, None)} | {(state.value, "[*]", None) for state in LAST}
    assert drawn() == named | ends


def test_each_transition_is_named_once_and_made_by_a_function_that_exists() -> None:
    names = [t.name for t in TRANSITIONS]
    assert len(names) == len(set(names)), "a transition named twice"
    for transition in TRANSITIONS:
        module, qualified = transition.by.split(":")
        found: object = importlib.import_module(f"tickd.scheduler.{module}")
        for part in qualified.split("."):
            found = getattr(found, part)
        assert callable(found), transition.by


def test_every_state_is_reached_and_every_state_ends() -> None:
    reached = {FIRST} | {t.target for t in TRANSITIONS}
    left = {t.source for t in TRANSITIONS} | set(LAST)
    assert reached == set(RunState) == left


def test_every_file_the_document_names_exists() -> None:
    """A path is the repository's or, as the stage table writes them, scheduler/'s."""
    for name in re.findall(r"`([\w/]+\.py)`", DOC):
        assert (ROOT / name).exists() or (ROOT / "scheduler" / name).exists(), name


def test_no_module_of_the_core_is_over_400_lines() -> None:
    """A stage, a role or a backend's file that grows past this has two jobs: split it."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in (ROOT / "scheduler").rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 400
    }
    assert long == {}


def test_the_core_is_a_few_modules_beside_folders_that_say_what_lives_in_them() -> None:
    """scheduler/ is read by its folders: at most 12 modules beside them, and each folder's
    __init__.py opens with a docstring saying what it holds."""
    core = ROOT / "scheduler"
    modules = [path.name for path in core.glob("*.py") if path.name != "__init__.py"]
    assert len(modules) <= 12, sorted(modules)
    for folder in sorted(path for path in core.iterdir() if path.is_dir()):
        if folder.name == "__pycache__":
            continue
        init = folder / "__init__.py"
        assert init.exists(), folder.name
        assert init.read_text().startswith('"""'), f"{folder.name}/__init__.py says nothing"
