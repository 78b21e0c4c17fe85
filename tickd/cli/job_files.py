"""The files `tickd apply` reads, read strictly: what a file says is what tickd does.

- a folder is every .json, .yaml, .yml and .toml file under it (any case, subfolders too, in
  name order); entries whose name starts with a dot (.git) are not read;
- a key given twice in one table is refused, naming the key and both lines;
- YAML is read as YAML 1.2's core schema: `1:30`, `yes`, `off` and `2030-01-01` are strings,
  `0o17` is octal, `017` is 17; anchors and aliases are refused (no expansion to bound), and so
  are tags other than the core ones;
- JSON's NaN and Infinity are refused;
- a file over MAX_FILE_BYTES is refused unread.

A parsed file comes with the line of each key and item (JSON and YAML; TOML's reader keeps
none), so a refusal further on names the line of the field it is about.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import os
import re
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import cache
from pathlib import Path
from typing import Any

SUFFIXES = (".json", ".yaml", ".yml", ".toml")
MAX_FILE_BYTES = 4 * 1024 * 1024
# A key or an item of a document: ("jobs", 0, "schedule", "kind").
Where = tuple[str | int, ...]


class DefinitionError(Exception):
    """Files that cannot be read, or jobs in them that are none: a usage error, one a line."""


class Refused(Exception):
    """What makes one file unreadable, at a line (0: the file as a whole)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Document:
    """A parsed file: its data (plain dicts, lists, strings, numbers, booleans and None) and
    the line of each key and item that has one."""

    data: Any
    lines: dict[Where, int]

    def line_of(self, where: Where) -> int:
        """The line of the deepest part of `where` the file has (0: none)."""
        path: Where = ()
        line = self.lines.get(path, 0)
        for part in where:
            if (*path, part) in self.lines:
                path = (*path, part)
                line = self.lines[path]
        return line


def at(path: Path | str, line: int) -> str:
    return f"{path}:{line}" if line else str(path)


# -- finding the files ---------------------------------------------------------------------------


def job_files(name: str) -> list[Path]:
    """The files one -f argument names: a file, or a folder's files."""
    path = Path(name)
    if not path.exists():
        raise DefinitionError(f"{name}: no such file or folder")
    if path.is_dir():
        return list(_walk(path))
    if path.suffix.lower() in SUFFIXES:
        return [path]
    raise DefinitionError(f"{name}: not a .json, .yaml, .yml or .toml file")


def _walk(folder: Path) -> Iterator[Path]:
    seen: set[str] = set()
    for top, folders, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:  # a link back up: each folder once
            folders.clear()
            continue
        seen.add(real)
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and Path(name).suffix.lower() in SUFFIXES:
                yield Path(top, name)


# -- reading one -----------------------------------------------------------------------------------


def read_document(path: Path) -> Document:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise Refused(0, f"over {MAX_FILE_BYTES // (1024 * 1024)} MiB: not read")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise Refused(0, str(getattr(exc, "strerror", None) or exc)) from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            return _plain(_load_toml(text))
        return _plain(_load_json(text) if suffix == ".json" else _load_yaml(text))
    except RecursionError:
        raise Refused(0, "nested too deeply") from None


def _load_toml(text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r" \(at line (\d+), column \d+\)$", str(exc))
        message = str(exc)[: found.start()] if found else str(exc)
        raise Refused(int(found.group(1)) if found else 0, f"not TOML: {message}") from None


def _load_json(text: str) -> Any:
    try:
        return _strict_json_decoder(text).decode(text)
    except json.JSONDecodeError as exc:
        raise Refused(exc.lineno, exc.msg) from None


# The standard library's object and array readers, called by ours.
_JSON_OBJECT: Any = vars(json.decoder)["JSONObject"]
_JSON_ARRAY: Any = vars(json.decoder)["JSONArray"]


def _strict_json_decoder(text: str) -> json.JSONDecoder:
    return _LinedJsonDecoder(_line_counter(text))


class _LinedJsonDecoder(json.JSONDecoder):
    """The standard decoder, on its pure-Python scanner (which lets objects and arrays be read
    by functions of our own), keeping each key's line and refusing a key twice."""

    def __init__(self, line_at: Callable[[int], int]) -> None:
        super().__init__()
        self.line_at = line_at
        self.parse_object: Any = self._object
        self.parse_array: Any = self._array
        self.parse_constant: Any = self._refuse_constant
        self.scan_once: Any = vars(json.scanner)["py_make_scanner"](self)

    def _object(self, s_and_end: tuple[str, int], strict: bool, scan_once: Any, *rest: Any) -> Any:
        starts, scan = _recording(scan_once)
        memo = rest[2] if len(rest) > 2 else None
        pairs, end = _JSON_OBJECT(s_and_end, strict, scan, None, list, memo)
        table = LinedDict()
        for (key, value), start in zip(pairs, starts, strict=True):
            table.put(key, value, self.line_at(start))
        return table, end

    def _array(self, s_and_end: tuple[str, int], scan_once: Any) -> Any:
        starts, scan = _recording(scan_once)
        items, end = _JSON_ARRAY(s_and_end, scan)
        return LinedList(items, [self.line_at(start) for start in starts]), end

    @staticmethod
    def _refuse_constant(name: str) -> Any:
        raise Refused(0, f"{name}: not a number JSON has")


def _recording(scan_once: Any) -> tuple[list[int], Callable[[str, int], Any]]:
    starts: list[int] = []

    def scan(string: str, index: int) -> Any:
        starts.append(index)
        return scan_once(string, index)

    return starts, scan


def _line_counter(text: str) -> Callable[[int], int]:
    newlines = [i for i, char in enumerate(text) if char == "\n"]
    return lambda offset: bisect.bisect_left(newlines, offset) + 1


class LinedDict(dict[str, Any]):
    """A table as read, with the line of each key."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, int] = {}

    def put(self, key: Any, value: Any, line: int) -> None:
        if not isinstance(key, str):
            raise Refused(line, f"key {key!r}: keys are strings (quote it)")
        if key in self:
            raise Refused(line, f"duplicate key {key!r} (first on line {self.lines[key]})")
        self[key] = value
        self.lines[key] = line


class LinedList(list[Any]):
    """A list as read, with the line of each item."""

    def __init__(self, items: Sequence[Any] = (), lines: Sequence[int] = ()) -> None:
        super().__init__(items)
        self.lines = list(lines)


def _plain(value: Any) -> Document:
    lines: dict[Where, int] = {}
    return Document(_unlined(value, (), lines), lines)


def _unlined(value: Any, where: Where, lines: dict[Where, int]) -> Any:
    if isinstance(value, dict):
        known = getattr(value, "lines", {})
        for key in value:
            if key in known:
                lines[(*where, key)] = known[key]
        return {k: _unlined(v, (*where, k), lines) for k, v in value.items()}
    if isinstance(value, list):
        known_items = getattr(value, "lines", [])
        for index, line in enumerate(known_items):
            lines[(*where, index)] = line
        return [_unlined(v, (*where, i), lines) for i, v in enumerate(value)]
    if isinstance(value, datetime | date | time):  # TOML's own times: as RFC 3339 text
        return value.isoformat()
    return value


# -- YAML ------------------------------------------------------------------------------------------

CORE_TAGS = {
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")
}
CORE_RESOLVERS = (
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?", "-+.0123456789"),
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
)


def _load_yaml(text: str) -> Any:
    import yaml  # only for YAML files

    try:
        return yaml.load(text, Loader=_core_loader())  # a safe loader: _core_loader
    except Refused:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(f"{exc.context or ''} {exc.problem or ''}".split())
        raise Refused(mark.line + 1 if mark else 0, f"not YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise Refused(0, f"not YAML: {' '.join(str(exc).split())}") from None


@cache
def _core_loader() -> type:
    """PyYAML's safe loader with YAML 1.2's core schema for plain scalars, lines kept, keys
    given twice, anchors, aliases and other tags refused."""
    import yaml

    class CoreLoader(yaml.SafeLoader):
        yaml_implicit_resolvers: dict[Any, Any] = {}

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            anchor = getattr(event, "anchor", None)
            if anchor is not None:
                raise Refused(
                    event.start_mark.line + 1,
                    f"anchors and aliases (&{anchor}, *{anchor}) are not read: "
                    "write each value out",
                )
            return super().compose_node(parent, index)

        def construct_core_map(self, node: Any) -> Iterator[LinedDict]:
            table = LinedDict()
            yield table
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=True)
                value = self.construct_object(value_node, deep=True)
                table.put(key, value, key_node.start_mark.line + 1)

        def construct_core_seq(self, node: Any) -> Iterator[LinedList]:
            items = LinedList()
            yield items
            items.extend(self.construct_object(child, deep=True) for child in node.value)
            items.lines = [child.start_mark.line + 1 for child in node.value]

        def construct_core_int(self, node: Any) -> int:
            value = str(self.construct_scalar(node))
            base = {"0o": 8, "0x": 16}.get(value[:2], 10)
            try:
                return int(value[2:] if base != 10 else value, base)
            except ValueError:
                raise Refused(node.start_mark.line + 1, "an integer over 4300 digits") from None

        def construct_core_float(self, node: Any) -> float:
            return float(str(self.construct_scalar(node)))

        def construct_core_bool(self, node: Any) -> bool:
            return str(self.construct_scalar(node)).lower() == "true"

        def refuse_tag(self, node: Any) -> Any:
            raise Refused(node.start_mark.line + 1, f"tag {node.tag!r}: not read (YAML 1.2 core)")

    for kind, pattern, first in CORE_RESOLVERS:
        CoreLoader.add_implicit_resolver(
            f"tag:yaml.org,2002:{kind}", re.compile(f"^(?:{pattern})$"), list(first)
        )
    for tag in list(CoreLoader.yaml_constructors):
        if tag not in CORE_TAGS:
            CoreLoader.add_constructor(tag, CoreLoader.refuse_tag)
    CoreLoader.add_constructor(None, CoreLoader.refuse_tag)
    for kind, constructor in (
        ("map", CoreLoader.construct_core_map),
        ("seq", CoreLoader.construct_core_seq),
        ("int", CoreLoader.construct_core_int),
        ("float", CoreLoader.construct_core_float),
        ("bool", CoreLoader.construct_core_bool),
    ):
        CoreLoader.add_constructor(f"tag:yaml.org,2002:{kind}", constructor)
    return CoreLoader
