"""Structured logs: one line per event, text or JSON, with secrets masked on the way out.

log_event(log, "run.finished", job="nightly", status="success", duration_ms=12.5)
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from tickd.scheduler.secrets.masking import mask, scrub_text

FIELDS = "tickd_fields"


def log_event(
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    name: str,
    *,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    """One line named `name`, its `fields` apart from the message (a JSON line's own keys). A
    LoggerAdapter's fields (a handler's `ctx.logger`: job, execution, attempt) come first: the
    adapter itself would replace the event's fields with its own."""
    if isinstance(logger, logging.LoggerAdapter):
        fields = {**_adapter_fields(logger), **fields}
        logger = logger.logger
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={FIELDS: fields})


class RepeatedErrors:
    """Logs an error that keeps coming back (a store refusing every write, an outage) without
    flooding the log: each distinct error (its type and message) with its traceback the first
    time, then at most once per `interval_seconds`, without it, saying how many more like it
    came meanwhile (`more_like_it`, over `in_last_seconds`)."""

    # Distinct errors remembered; the least recently seen is forgotten first.
    KINDS = 256

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_seconds: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._interval = interval_seconds
        self._monotonic = monotonic
        # (type, message) -> (when last logged, how many came since, unlogged)
        self._seen: OrderedDict[tuple[str, str], tuple[float, int]] = OrderedDict()

    def error(
        self, name: str, exc: BaseException, *, level: int = logging.ERROR, **fields: Any
    ) -> None:
        """Log `exc` under `name`, or count it if one like it was logged within the interval."""
        kind = (type(exc).__name__, str(exc))
        now = self._monotonic()
        seen = self._seen.pop(kind, None)
        if seen is not None and now - seen[0] < self._interval:
            self._seen[kind] = (seen[0], seen[1] + 1)
            return
        self._remember(kind, now)
        fields = {"error": scrub_text(f"{kind[0]}: {kind[1]}"), **fields}
        if seen is None:
            self._log.log(level, name, exc_info=exc, extra={FIELDS: fields})
            return
        repeats = {"more_like_it": seen[1], "in_last_seconds": round(now - seen[0], 3)}
        log_event(self._log, name, level=level, **fields, **repeats)

    def _remember(self, kind: tuple[str, str], now: float) -> None:
        self._seen[kind] = (now, 0)
        while len(self._seen) > self.KINDS:
            self._seen.popitem(last=False)


def _adapter_fields(adapter: logging.LoggerAdapter[logging.Logger]) -> dict[str, Any]:
    carried = (adapter.extra or {}).get(FIELDS)
    return dict(carried) if isinstance(carried, Mapping) else {}


class _Formatter(logging.Formatter):
    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        fields: dict[str, Any] = mask(getattr(record, FIELDS, {}))
        if record.exc_info:
            fields["exception"] = scrub_text(self.formatException(record.exc_info))
        return fields

    @staticmethod
    def timestamp(record: logging.LogRecord) -> str:
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


class TextFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        pairs = " ".join(f"{k}={_text_value(v)}" for k, v in self.fields(record).items())
        line = f"{self.timestamp(record)} {record.levelname:<7} {record.name} "
        return line + scrub_text(record.getMessage()) + (f" {pairs}" if pairs else "")


class JsonFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = {
            "ts": self.timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": scrub_text(record.getMessage()),
            **self.fields(record),
        }
        return json.dumps(body, default=str, separators=(",", ":"))


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if (" " in text or not text) else text


def configure_logging(*, level: str = "INFO", json_lines: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
