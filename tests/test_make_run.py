"""`make run` on a fresh clone: it says what it is doing before the minute of installing."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_make_run_says_it_is_installing_before_it_installs(tmp_path: Path) -> None:
    # A virtual environment that is not there yet, as on a fresh clone; -n only prints.
    planned = subprocess.run(
        ["make", "-n", "run", f"VENV={tmp_path}/venv"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.splitlines()  # fmt: skip

    first_install = next(i for i, line in enumerate(planned) if "pip install" in line)
    said = [line for line in planned[:first_install] if line.startswith("echo ")]
    assert said, planned
    assert "installing" in said[0].lower() and "minute" in said[0]
