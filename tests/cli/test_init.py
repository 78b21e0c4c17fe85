"""`tickd init [PATH]`: a first configuration to start from, the one `make run` uses, written
where asked and never over a file that is there."""

from __future__ import annotations

from pathlib import Path

import pytest

import tickd.cli
from tickd.scheduler.config.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "tickd.toml"


def test_init_writes_the_example_configuration_where_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "etc" / "tickd.toml"
    target.parent.mkdir()

    assert tickd.cli.main(["init", str(target)]) == 0

    assert target.read_text() == EXAMPLE.read_text()
    assert load_settings(target, environ={}).api_port == 8080
    assert f"tickd --config {target} run" in capsys.readouterr().out


def test_init_writes_tickd_toml_here_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert tickd.cli.main(["init"]) == 0

    assert (tmp_path / "tickd.toml").read_text() == EXAMPLE.read_text()


def test_init_never_overwrites_a_file_and_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "tickd.toml"
    target.write_text("# ops' own settings\n")

    assert tickd.cli.main(["init", str(target)]) == 2

    assert target.read_text() == "# ops' own settings\n"
    error = capsys.readouterr().err
    assert error == f"tickd: {target} exists: not overwritten (remove it or name another path)\n"


def test_init_into_a_missing_folder_names_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing" / "tickd.toml"

    assert tickd.cli.main(["init", str(target)]) == 2

    assert capsys.readouterr().err.startswith(f"tickd: cannot write {target}: ")
    assert not target.parent.exists()
