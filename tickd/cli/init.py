"""`tickd init [PATH]`: writes the example configuration, the one `make run` uses
(config/tickd.toml, shipped in the package as tickd/example.toml), to start a deployment from.
A file already at PATH is never overwritten."""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

EXAMPLE = "example.toml"


def write_example_config(path: str) -> int:
    target = Path(path)
    text = files("tickd").joinpath(EXAMPLE).read_text(encoding="utf-8")
    try:
        with target.open("x", encoding="utf-8") as out:
            out.write(text)
    except FileExistsError:
        print(
            f"tickd: {path} exists: not overwritten (remove it or name another path)",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        print(f"tickd: cannot write {path}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 2
    print(f"wrote {path}; start the daemon on it with: tickd --config {path} run")
    return 0
