"""The repository's text describes the project as it is: the story of its making (numbered
sessions, issues and rounds of work, what reviews turned up) lives in git history, not in the files.
And docs/performance.md stays a reference, not a log of every measurement."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Built from pieces so that this file does not match its own pattern.
NUMBERED = r"s?\s[0-9]+"
HISTORY = "|".join(
    [
        r"\bsession" + NUMBERED,
        r"\bissue" + NUMBERED,
        r"\bround" + NUMBERED,
        "found in " + "review",
        "review " + "found",
        "in review" + r"\)",
        r"\bround " + "(one|two|three)" + r"\b",
    ]
)
PERFORMANCE_MD_LIMIT = 30_000  # bytes


def _in_a_git_work_tree() -> bool:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return False
    return done.returncode == 0 and done.stdout.strip() == "true"


def test_no_file_speaks_of_numbered_sessions_issues_or_rounds() -> None:
    if not _in_a_git_work_tree():
        pytest.skip("not a git work tree: git grep has nothing to search")
    found = subprocess.run(
        ["git", "grep", "-nIiE", HISTORY],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    # git grep: 0 when a line matched, 1 when none did, anything else an error.
    assert found.returncode in (0, 1), found.stderr
    assert found.stdout == "", (
        "state the fact in the present tense; the history is in git:\n" + found.stdout
    )


def test_the_pattern_catches_what_it_is_for() -> None:
    pattern = re.compile(HISTORY, re.IGNORECASE)
    # Pieces again, so that git grep does not find these lines.
    history = ["Session " + "11 changed", "issue " + "10's targets", "a second round " + "2"]
    history += ["found in " + "review", "a round " + "two of it", "(the fix, in review" + ")"]
    for line in history:
        assert pattern.search(line), line
    for line in ("cron `0#2`", "color: #445", "a session of your own", "issues a request"):
        assert not pattern.search(line), line


def test_docs_performance_md_is_a_reference_under_30_kb() -> None:
    size = (ROOT / "docs" / "performance.md").stat().st_size
    assert size < PERFORMANCE_MD_LIMIT, f"docs/performance.md is {size:,} bytes"
