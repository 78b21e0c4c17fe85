"""tickd as it is installed: one top-level package, `tickd`, whose parts the repository keeps as
top-level folders (scheduler/, api/, handlers/, seed/) linked into tickd/."""

from __future__ import annotations

import ast
import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.test_daemon import free_port

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


# Building the wheel and installing it with its dependencies takes a minute or two.
INSTALL_TIMEOUT = 600
STARTED_WITHIN = 20.0


def run(command: Sequence[str | Path], cwd: Path) -> str:
    """`command`, which must succeed; its output, stdout and stderr together."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "TICKD_"))}
    done = subprocess.run(
        [str(word) for word in command],
        cwd=cwd,
        env={**environment, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}"
    return done.stdout


# One worker builds the wheel: pip builds it in the repository's own folder (build/), and two
# builds there at once would trip over each other. The group is meant to keep this module's
# tests on one worker, but pytest-xdist 3.8 ignores it under pytest 9.2 (pytest-xdist#1386);
# the lock (a file beside the system's temporary files, one per checkout) keeps any other build
# of this checkout, on another worker or in another run, from overlapping it.
pytestmark = pytest.mark.xdist_group("wheel_in_the_repository")
BUILD_LOCK = Path(tempfile.gettempdir()) / f"tickd-wheel-{zlib.crc32(str(ROOT).encode()):08x}.lock"


@dataclass
class PlainInstall:
    """tickd as `pip install tickd` leaves it, without extras, in a virtual environment."""

    wheel: Path
    build_output: str
    venv: Path

    def tickd(self, *args: str) -> list[str]:
        return [str(self.venv / "bin" / "tickd"), *args]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> PlainInstall:
    folder = tmp_path_factory.mktemp("plain")
    wheels, venv = folder / "wheels", folder / "venv"
    pip = [sys.executable, "-m", "pip"]
    with BUILD_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_output = run([*pip, "wheel", "--no-deps", "--wheel-dir", wheels, ROOT], folder)
    (wheel,) = wheels.glob("tickd-*.whl")
    run([sys.executable, "-m", "venv", venv], folder)
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], folder)
    return PlainInstall(wheel, build_output, venv)


@pytest.mark.timeout(INSTALL_TIMEOUT * 2)
def test_the_wheel_installs_tickd_alone_at_the_top_level_without_a_warning(
    plain: PlainInstall,
) -> None:
    with zipfile.ZipFile(plain.wheel) as wheel:
        top = {name.split("/")[0] for name in wheel.namelist()}
    assert top == {"tickd", "tickd-0.1.0.dist-info"}
    assert "warning" not in plain.build_output.lower(), plain.build_output
    assert run(plain.tickd("--version"), plain.venv).strip() == "tickd 0.1.0"


@pytest.mark.timeout(INSTALL_TIMEOUT * 2)
def test_a_plain_install_has_no_production_driver_and_names_the_extra_a_url_needs(
    plain: PlainInstall, tmp_path: Path
) -> None:
    python = plain.venv / "bin" / "python"
    for driver in ("pymongo", "redis", "confluent_kafka"):
        missing = subprocess.run([python, "-c", f"import {driver}"], capture_output=True)
        assert missing.returncode != 0, f"{driver} is installed without its extra"
    env = {"PATH": os.environ["PATH"], "TICKD_STORE_URL": "mongodb://127.0.0.1:9/tickd"}
    refused = subprocess.run(
        plain.tickd("run"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "tickd: configuration: store_url: mongodb:// needs the mongodb extra: "
        "pip install 'tickd[mongodb]'"
    ]


@pytest.mark.timeout(INSTALL_TIMEOUT * 2)
async def test_a_plain_install_runs_the_embedded_stack_with_its_demo_jobs(
    plain: PlainInstall, tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "tickd.toml"
    config.write_text(
        "[tickd]\n"
        f'store_url = "sqlite:///{tmp_path}/tickd.db"\n'
        f'mail_url = "outbox:///{tmp_path}/outbox"\n'
        f"api_port = {port}\n"
        "seed_demo = true\n"
    )
    daemon = await asyncio.create_subprocess_exec(
        *plain.tickd("--config", str(config), "run"),
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            succeeded = await until_a_run_succeeded(http)
        if not succeeded:
            if daemon.returncode is None:
                daemon.kill()
            _, stderr = await daemon.communicate()
            pytest.fail(f"no run succeeded within {STARTED_WITHIN} s:\n{stderr.decode()[-3000:]}")
        daemon.send_signal(signal.SIGTERM)
        async with asyncio.timeout(STARTED_WITHIN):
            _, stderr = await daemon.communicate()
        assert daemon.returncode == 0, stderr.decode()[-2000:]
    finally:
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()


async def until_a_run_succeeded(http: aiohttp.ClientSession) -> list[Any]:
    """The first runs that succeeded, once there are some; none after STARTED_WITHIN."""
    loop = asyncio.get_running_loop()
    until = loop.time() + STARTED_WITHIN
    while loop.time() < until:
        try:
            async with http.get("/v1/executions", params={"status": "success"}) as response:
                if response.status == 200 and (items := (await response.json())["items"]):
                    return list(items)
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.2)
    return []
