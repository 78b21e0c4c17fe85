"""What a handler returned or raised, as an Outcome: a result checked to be JSON, bounded and
masked; an error's message and traceback masked and cut."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from traceback import format_exception
from typing import Any

from tickd.scheduler.model import ExecutionError, Status
from tickd.scheduler.secrets import mask, scrub_text, scrub_values
from tickd.scheduler.task import Outcome

# A result is stored up to this size, replaced by its size up to the next...
MAX_RESULT_BYTES = 16 * 1024
# ...and past that, the run fails: measured before the result is copied or serialised, so a
# handler returning 100 MB costs the daemon no more than the handler's own memory.
MAX_RESULT_CHARS = 1_000_000
MAX_ERROR_CHARS = 2000
# A traceback is kept up to this many characters, its innermost frames.
MAX_TRACEBACK_CHARS = 16_000


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
            f"the handler raised {type(raised).__name__}({str(raised)!r}): tickd does not stop "
            "for a handler; raise an exception to fail a run"
        )
        return Outcome(
            status=Status.FAILED, error=execution_error(type(raised).__name__, message, secrets)
        )
    if raised is not None:
        where = _traceback_of(raised, secrets)
        error = execution_error(type(raised).__name__, str(raised), secrets, traceback=where)
        return Outcome(status=Status.FAILED, error=error)
    return _checked_result(returned, secrets)


def _checked_result(value: object, secrets: list[str]) -> Outcome:
    if value is not None and not isinstance(value, dict):
        message = f"a handler returns a dict or None, not {type(value).__name__}"
        return Outcome(status=Status.FAILED, error=execution_error("BadResult", message))
    if value is None:
        return Outcome(status=Status.SUCCESS)
    if not smaller_than(value, MAX_RESULT_BYTES):
        problem = _too_large_or_cyclic(value, MAX_RESULT_CHARS)
        if problem is not None:
            return Outcome(status=Status.FAILED, error=problem)
    try:
        safe: dict[str, Any] = json.loads(json.dumps(mask(value), default=str))
    except (TypeError, ValueError, RecursionError) as exc:  # keys not strings, a cycle...
        message = f"a handler's result must be JSON: {type(exc).__name__}: {exc}"
        return Outcome(status=Status.FAILED, error=execution_error("BadResult", message))
    size = len(json.dumps(safe))
    if size > MAX_RESULT_BYTES:
        return Outcome(status=Status.SUCCESS, result={"truncated": True, "size_bytes": size})
    return Outcome(status=Status.SUCCESS, result=scrub_values(safe, secrets))


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
    masked: str = scrub_values(scrub_text(message), secrets)
    return ExecutionError(type=kind, message=masked[:MAX_ERROR_CHARS], traceback=traceback)


def _traceback_of(raised: BaseException, secrets: Collection[str]) -> str:
    """Where the handler raised, masked like its message, then cut to its last
    MAX_TRACEBACK_CHARS: the innermost frames, where it raised, come last."""
    text = "".join(format_exception(raised))
    masked: str = scrub_values(scrub_text(text), secrets)
    return masked[-MAX_TRACEBACK_CHARS:]


def smaller_than(value: object, budget: int) -> bool:
    """Whether a JSON-like value holds fewer characters than `budget`; stops counting as soon
    as it does not."""
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
