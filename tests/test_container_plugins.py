"""Plug-ins in the container image: the Dockerfile's `PLUGINS` build argument reaches the install,
and the image's install steps, run as the Dockerfile writes them in a fresh virtual environment
(no Docker engine needed), give a tickd that lists the example plug-in's handler with its origin.

The second test builds wheels and installs them: it fetches tickd's dependencies from the package
index (PyPI) and takes some 30 s."""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
EXAMPLE_PLUGIN = ROOT / "examples" / "tickd-example-plugin"
# What the image build pulls from the index at most; the test's own bound is pytest's timeout.
STEP_TIMEOUT = 150


@dataclass
class Stage:
    name: str
    # (instruction, arguments) in order, continuation lines joined.
    steps: list[tuple[str, str]] = field(default_factory=list)

    def args(self, instruction: str) -> list[str]:
        return [arguments for name, arguments in self.steps if name == instruction]

    def index(self, instruction: str, containing: str) -> int:
        return next(
            i
            for i, (name, args) in enumerate(self.steps)
            if name == instruction and containing in args
        )


def stages(text: str) -> list[Stage]:
    """The Dockerfile's build stages (comments dropped, `\\` continuations joined)."""
    lines = [line for line in text.replace("\\\n", " ").splitlines() if line.strip()]
    found: list[Stage] = []
    for line in lines:
        if line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            found.append(Stage(name=arguments.split(" AS ")[-1] if " AS " in arguments else ""))
        elif found:
            found[-1].steps.append((instruction.upper(), arguments.strip()))
    return found


def build_and_image() -> tuple[Stage, Stage]:
    build, image = stages(DOCKERFILE.read_text())
    return build, image


def pip_runs(stage: Stage, verb: str) -> str:
    (command,) = [run for run in stage.args("RUN") if run.startswith(f"pip {verb} ")]
    return command


def test_the_plugins_build_argument_is_installed_with_tickd() -> None:
    build, image = build_and_image()
    assert build.name == "build"
    assert build.args("ARG") == ['PLUGINS=""']
    wheel = pip_runs(build, "wheel")
    assert shlex.split(wheel)[-2:] == [".[all]", "$PLUGINS"], "resolved in one go with tickd"
    assert "--find-links plugins" in wheel
    # The argument and the plug-in wheels are there before the step that uses them.
    assert build.index("ARG", "PLUGINS") < build.index("RUN", "pip wheel")
    assert build.index("COPY", "plugins plugins") < build.index("RUN", "pip wheel")
    assert (ROOT / "plugins").is_dir()
    # The image installs exactly what was built, offline: every wheel, the plug-ins' included.
    install = pip_runs(image, "install")
    assert "--no-index --find-links /wheels /wheels/*.whl" in install
    assert "--from=build /wheels /wheels" in image.args("COPY")


def run(command: list[str], cwd: Path, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    environment |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1", **env}
    done = subprocess.run(
        command,
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def as_local(command: str, wheels: Path, plugins: list[str]) -> list[str]:
    """A `pip ...` command of the Dockerfile, as this machine runs it: this interpreter's pip,
    /wheels in a temporary folder, $PLUGINS expanded, globs expanded."""
    words: list[str] = []
    for word in shlex.split(command.split("&&")[0]):
        if word == "$PLUGINS":
            words += plugins
            continue
        word = word.replace("/wheels", str(wheels))
        words += sorted(glob.glob(word)) if "*" in word else [word]
    assert words[0] == "pip"
    return [sys.executable, "-m", "pip", *words[1:]]


@pytest.mark.timeout(STEP_TIMEOUT * 2)
def test_an_image_built_with_a_plugin_lists_its_handler(tmp_path: Path) -> None:
    build, image = build_and_image()
    src, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "image"
    # The build stage's context: what it copies from the repository.
    for copy in build.args("COPY"):
        *sources, _ = shlex.split(copy)
        for source in sources:
            target = src / source
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / source, target)
    # A team's plug-in, as its wheel dropped in plugins/ and named in the build argument.
    python_pip = [sys.executable, "-m", "pip"]
    run([*python_pip, "wheel", "--no-deps", "-w", str(src / "plugins"), str(EXAMPLE_PLUGIN)], ROOT)

    run(as_local(pip_runs(build, "wheel"), wheels, ["tickd-example-plugin"]), src)
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    install = as_local(pip_runs(image, "install"), wheels, [])
    run([*install[:3], "--python", str(venv / "bin" / "python"), *install[3:]], tmp_path)

    listed = run([str(venv / "bin" / "tickd"), "handlers"], tmp_path).splitlines()
    assert (
        "example_greeting\ttickd-example-plugin 0.1.0 (tickd_example_plugin.handlers:greet)"
        in listed
    )
    assert "alert_scanner\ttickd 0.1.0 (tickd.handlers.alert_scanner:alert_scanner)" in listed
