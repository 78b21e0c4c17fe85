"""tickd as it is installed: one top-level package, `tickd`, whose parts the repository keeps as
top-level folders (scheduler/, api/, handlers/, seed/) linked into tickd/."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("scheduler", "api", "handlers", "seed")


def python_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / name for name in listed.stdout.split()]


def bare_imports(path: Path) -> list[str]:
    """Imports of a part by its folder's name (`scheduler.model`), not as `tickd.scheduler`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        at = f"{path.relative_to(ROOT)}:{node.lineno}"
        found += [f"{at}: {name}" for name in names if name.split(".")[0] in PARTS]
    return found


def test_every_part_is_imported_as_tickd_never_by_its_folders_name() -> None:
    """From the repository's root the folders are importable by their own names too; a module
    imported both ways would be two modules, with two of every class and registry."""
    assert [line for path in python_files() for line in bare_imports(path)] == []


def test_the_parts_are_linked_into_tickd() -> None:
    for part in PARTS:
        link = ROOT / "tickd" / part
        assert link.is_symlink() and link.resolve() == ROOT / part, part
