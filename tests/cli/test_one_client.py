"""The command line talks to the API through tickd.client, the client applications use: one
client of the API in the package, so the commands and the applications share its errors, its
retries and the API's own models."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The folders of the installed package (the ones linked into tickd/ are listed by their names).
PACKAGE = ("tickd", "api", "scheduler", "handlers", "seed")
HTTP_CLIENTS = {"urllib.request", "http.client", "httpx"}


def modules() -> Iterator[Path]:
    for folder in PACKAGE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not any(part.is_symlink() for part in [path, *path.parents]):
                yield path


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_package_has_one_client_of_the_api_and_the_command_line_uses_it() -> None:
    speaking_http = {
        str(path.relative_to(ROOT)) for path in modules() if imported(path) & HTTP_CLIENTS
    }
    assert speaking_http == {"tickd/client.py"}
    assert "tickd.client" in imported(ROOT / "tickd" / "cli" / "connect.py")
