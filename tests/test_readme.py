"""The README is a front door: short, linking every document; and no link in the README or the
docs points at a file that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_links_every_document() -> None:
    linked = set(LINK.findall(README.read_text()))
    missing = [f"docs/{doc.name}" for doc in DOCS if f"docs/{doc.name}" not in linked]
    assert not missing, missing


def test_every_relative_link_points_at_a_file() -> None:
    broken = []
    for page in [README, *DOCS]:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
