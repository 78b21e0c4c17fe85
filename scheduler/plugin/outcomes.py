"""What a handler returned or raised, as an Outcome: a result checked to be JSON, bounded and
masked; an error's message and traceback described whatever the exception does, masked and
cut. Every string of it is made storable: text strict UTF-8 refuses (a lone surrogate) is
escaped, so that every store, JSON encoder and HTTP response takes what a run recorded."""

from __future__ import annotations

import json
import math
import re
import sys
import sysconfig
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path
from traceback import format_exception
from typing import Any

from tickd.scheduler.model import Attempt, ExecutionError, LogLine, Status
from tickd.scheduler.secrets.masking import mask, scrub_text, scrub_values

# A result is stored up to this size, replaced by its size up to the next...
MAX_RESULT_BYTES = 16 * 1024
# ...and past that, the run fails: measured before the result is copied or serialised, so a
# handler returning 100 MB costs the daemon no more than the handler's own memory.
MAX_RESULT_CHARS = 1_000_000
MAX_ERROR_CHARS = 2000
# A traceback is kept up to this many characters, its innermost frames.
MAX_TRACEBACK_CHARS = 16_000


@dataclass(frozen=True, kw_only=True)
class Outcome:
    status: Status
    attempts: int = 0
    result: dict[str, Any] | None = None
    error: ExecutionError | None = None
    attempt_log: tuple[Attempt, ...] = ()  # when there was more than one attempt
    log: tuple[LogLine, ...] = ()  # what the handler logged (plugin/contexts.py: RunLog)


class HandlerExit(Exception):
    """A handler raised SystemExit, KeyboardInterrupt or GeneratorExit: in its task they
    would stop the event loop, and the daemon with it. The run fails instead."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(raised)
        self.raised = raised


_TOO_LARGE = (
    f"the result holds more than {MAX_RESULT_CHARS:,} characters of JSON (the limit): return a "
    "summary and keep the data elsewhere"
)


def outcome_of(returned: object, raised: BaseException | None, secrets: list[str]) -> Outcome:
    if isinstance(raised, HandlerExit):
        raised = raised.raised
    if raised is not None and not isinstance(raised, Exception):
        # SystemExit and the like, from a coroutine (see HandlerExit) or a thread.
        message = (
            f"the handler raised {type(raised).__name__}({described(raised)!r}): tickd "
            "does not stop for a handler; raise an exception to fail a run"
        )
        return Outcome(
            status=Status.FAILED, error=execution_error(type(raised).__name__, message, secrets)
        )
    if raised is not None:
        where = _traceback_of(raised, secrets)
        message = described(raised)
        error = execution_error(type(raised).__name__, message, secrets, traceback=where)
        return Outcome(status=Status.FAILED, error=error)
    return _checked_result(returned, secrets)


def described(raised: BaseException) -> str:
    """str(raised), or, where that raises or gives no string, the exception's type and why:
    a handler's exception is its own code, and describing it must not fail the worker."""
    try:
        return str.__str__(str(raised))  # a subclass of str, made a plain one
    except BaseException as exc:  # whatever its __str__ raises, SystemExit included
        return f"{type(raised).__name__} (its description failed: {type(exc).__name__})"


def _checked_result(value: object, secrets: list[str]) -> Outcome:
    if value is not None and not isinstance(value, dict):
        message = f"a handler returns a dict or None, not {type(value).__name__}"
        return Outcome(status=Status.FAILED, error=execution_error("BadResult", message))
    if value is None:
        return Outcome(status=Status.SUCCESS)
    try:
        if not smaller_than(value, MAX_RESULT_BYTES):
            problem = _too_large_or_cyclic(value, MAX_RESULT_CHARS)
            if problem is not None:
                return Outcome(status=Status.FAILED, error=problem)
        safe: dict[str, Any] = mask(plain_json(value, "result", MAX_RESULT_DEPTH))
    except NotJson as exc:
        message = f"a handler's result must be JSON: {exc}"
        return Outcome(status=Status.FAILED, error=execution_error("BadResult", message))
    except Exception as exc:  # a mapping of the handler's own whose items() raise, say
        message = f"a handler's result could not be read: {type(exc).__name__}"
        return Outcome(status=Status.FAILED, error=execution_error("BadResult", message))
    size = len(json.dumps(safe))
    if size > MAX_RESULT_BYTES:
        return Outcome(status=Status.SUCCESS, result={"truncated": True, "size_bytes": size})
    return Outcome(status=Status.SUCCESS, result=scrub_values(safe, secrets))


# A result nests at most this deeply: below what the stores take (MongoDB: 100 levels, the
# execution's own included).
MAX_RESULT_DEPTH = 64
# Whole numbers every store keeps exactly (BSON's and SQLite's 64 bits).
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class NotJson(ValueError):
    """A value that JSON holds only by changing it: where it is, and what it is."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where} is {what}")


def plain_json(value: object, where: str, depth: int) -> Any:
    """A copy of `value` in plain JSON types, its text storable (storable_text). What JSON
    holds only by changing it is refused, naming where it is (NotJson): NaN and infinities,
    whole numbers beyond 64 bits, sets, bytes, other objects, keys that are not strings. A
    tuple is a list, and a date or a time is its ISO 8601 text, as every JSON encoder writes
    them. A key's leading `$` and its dots are written in their full-width forms (_key).
    Subclasses of int, float and str (enums, say) are read as their base type's value, none of
    their own methods called."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        number = int.__index__(value)
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise NotJson(where, "a whole number beyond 64 bits, which stores do not keep")
        return number
    if isinstance(value, float):
        real = float.__float__(value)
        if not math.isfinite(real):
            raise NotJson(where, f"{real!r}, which is no JSON number")
        return real
    if isinstance(value, str):
        return storable_text(str.__str__(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Mapping | list | tuple) and depth <= 0:
        raise NotJson(where, f"nested deeper than {MAX_RESULT_DEPTH} levels")
    if isinstance(value, Mapping):
        return {
            _key(key, where): plain_json(item, _at(where, key), depth - 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [plain_json(item, f"{where}[{i}]", depth - 1) for i, item in enumerate(value)]
    raise NotJson(where, f"a {type(value).__name__}, which is not JSON")


def _key(key: object, where: str) -> str:
    if not isinstance(key, str):
        raise NotJson(where, f"keyed by a {type(key).__name__}: keys are strings")
    text = storable_text(str.__str__(key))
    if text.startswith("$") or "." in text:
        # MongoDB (FerretDB) refuses such a name in a stored document: on every store alike, it
        # is written with the full-width forms instead, as MongoDB's manual suggests.
        text = (FULL_WIDTH_DOLLAR + text[1:] if text.startswith("$") else text).replace(
            ".", FULL_WIDTH_DOT
        )
    return text


FULL_WIDTH_DOLLAR, FULL_WIDTH_DOT = "\uff04", "\uff0e"


def _at(where: str, key: object) -> str:
    return f"{where}.{storable_text(str.__str__(key))}" if isinstance(key, str) else where


def storable_text(text: str) -> str:
    """`text` as strict UTF-8 takes it: surrogate pairs joined into their character, and each
    lone surrogate (a byte a decoder could not read, kept by `surrogateescape`) written as its
    escape, `\\udcff`; NUL, which PostgreSQL (under FerretDB) refuses, as `\\x00`. Most text
    is returned as it is, after one check in C."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        paired = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        text = paired.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def _too_large_or_cyclic(value: object, budget: int) -> ExecutionError | None:
    """Walks the result depth first, at most `budget` characters of it, before anything copies
    or serialises it: a container met again on its own path is a cycle (no JSON holds it), and
    one that runs past the budget is too large."""
    on_path: set[int] = set()
    pending: list[tuple[object, bool]] = [(value, False)]
    while pending:
        item, leaving = pending.pop()
        if leaving:
            on_path.discard(id(item))
        elif isinstance(item, str | bytes):
            budget -= len(item) + 2
        elif isinstance(item, Mapping | list | tuple | set):
            if id(item) in on_path:
                return execution_error(
                    "BadResult", "a handler's result must be JSON: it holds itself"
                )
            budget -= 2 + len(item)
            if budget < 0:
                break
            on_path.add(id(item))
            pending.append((item, True))
            children = [*item.keys(), *item.values()] if isinstance(item, Mapping) else item
            pending += [(child, False) for child in children]
        else:
            budget -= 32
        if budget < 0:
            break
    return execution_error("ResultTooLarge", _TOO_LARGE) if budget < 0 else None


def execution_error(
    kind: str, message: str, secrets: Collection[str] = (), *, traceback: str | None = None
) -> ExecutionError:
    # Masked whole before it is cut, so that no secret is left half shown at the cut.
    masked: str = scrub_values(scrub_text(storable_text(message)), secrets)
    return ExecutionError(
        type=storable_text(kind), message=masked[:MAX_ERROR_CHARS], traceback=traceback
    )


def _traceback_of(raised: BaseException, secrets: Collection[str]) -> str:
    """Where the handler raised, its files named without the install's paths, masked like its
    message, then cut to its last MAX_TRACEBACK_CHARS: the innermost frames, where it raised,
    come last."""
    try:
        text = "".join(format_exception(raised))
    except BaseException as exc:  # an exception's attributes are its own code
        failed = type(exc).__name__
        text = f"{type(raised).__name__}: its traceback could not be formatted ({failed})"
    masked: str = scrub_values(scrub_text(storable_text(without_install_paths(text))), secrets)
    return masked[-MAX_TRACEBACK_CHARS:]


def _install_roots() -> list[tuple[str, str]]:
    """Where Python and tickd are installed, and what a traceback names each by instead: the
    libraries' folders first (they may lie inside the others), longest first."""
    paths = sysconfig.get_paths()
    libraries = {paths[name] for name in ("purelib", "platlib")} | {
        p for p in sys.path if p.endswith(("site-packages", "dist-packages"))
    }
    stdlib = {paths["stdlib"], paths["platstdlib"]}
    # The folder that holds the tickd package, as imported (tickd/scheduler/...) and as it is on
    # disk (scheduler/ is linked into tickd/ in a checkout): as many folders up as the module's
    # name has dots, and one fewer.
    here, depth = Path(__file__), __name__.count(".")
    projects = {str(here.parents[depth]), str(here.resolve().parents[depth - 1])}
    projects -= libraries | stdlib
    roots = [(p, "site-packages") for p in libraries]
    roots += [(p, "<stdlib>") for p in stdlib] + [(p, ".") for p in projects]
    return sorted({(root.rstrip("/"), name) for root, name in roots}, key=lambda r: -len(r[0]))


_INSTALL_ROOTS = _install_roots()
_FRAME_FILE = re.compile(r'^(  File ")(/[^"]*)(")', re.MULTILINE)


def without_install_paths(text: str) -> str:
    """A traceback's frames with their files named under the folders they were installed in."""
    return _FRAME_FILE.sub(lambda m: m[1] + _relative(m[2]) + m[3], text)


def _relative(path: str) -> str:
    """A frame's file under the folder it was installed in: `site-packages/aiohttp/client.py`,
    `<stdlib>/asyncio/tasks.py`, `tests/test_x.py`; any other file by its folder and name."""
    for root, name in _INSTALL_ROOTS:
        if path.startswith(root + "/"):
            rest = path[len(root) + 1 :]
            return rest if name == "." else f"{name}/{rest}"
    parts = path.rsplit("/", 2)
    return "/".join(["...", *parts[-2:]]) if len(parts) == 3 else path


def smaller_than(value: object, budget: int) -> bool:
    """Whether a JSON-like value holds fewer characters than `budget`; stops counting as soon
    as it does not. A value that cannot be read (a container of the handler's own that
    raises) is not known to be small: False."""
    try:
        return _counted_within(value, budget)
    except Exception:
        return False


def _counted_within(value: object, budget: int) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str | bytes):
            budget -= len(item) + 2  # its quotes: ten million empty strings are not nothing
        elif isinstance(item, Mapping | list | tuple | set):
            # Brackets and a separator per item, counted before the items are: so one that
            # holds itself, or holds millions, ends the count without being copied.
            budget -= 2 + len(item)
            if budget < 0:
                return False
            pending += [*item.keys(), *item.values()] if isinstance(item, Mapping) else item
        else:
            budget -= 32  # a number, a date, an object: its text is short
        if budget < 0:
            return False
    return True
