"""`tickd run`, `tickd --help`, `--version` and `completion` start without the API's client:
the client, httpx and the API's models load only when a command of the API runs."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

from tickd.cli.connect import action_named
from tickd.cli.parser import build_parser

CLIENT_MODULES = ("tickd.client", "httpx", "tickd.api.models")


def loaded_after(code: str) -> set[str]:
    """Which of CLIENT_MODULES a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport sys\nprint(*(m for m in {CLIENT_MODULES!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stdout.splitlines()[-1].split())


def test_importing_the_command_line_loads_no_client() -> None:
    assert loaded_after("import tickd.cli") == set()


def test_building_the_parser_loads_no_client() -> None:
    code = "import contextlib, tickd.cli\nwith contextlib.suppress(SystemExit):\n"
    code += "    tickd.cli.main(['--version'])"

    assert loaded_after(code) == set()


def test_starting_the_daemon_loads_no_client() -> None:
    # A settings file that is not there: `run` stops at its settings, after parsing.
    code = "import tickd.cli\ntickd.cli.main(['run', '--config', '/nonexistent/tickd.toml'])"

    assert loaded_after(code) == set()


def test_a_command_of_the_api_loads_the_client() -> None:
    code = "import tickd.cli\ntickd.cli.main(['whoami', '--url', 'not a url'])"

    assert loaded_after(code) >= {"tickd.client", "httpx"}


def test_every_action_the_parser_names_is_a_function_of_the_command_line() -> None:
    for reference in actions(build_parser()):
        assert callable(action_named(reference)), reference


def actions(parser: argparse.ArgumentParser) -> Iterator[str]:
    if "act" in parser._defaults:
        yield parser._defaults["act"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from actions(sub)
