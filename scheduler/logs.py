"""Structured logs: one line per event, text or JSON, with secrets masked on the way out.

log_event(log, "run.finished", job="nightly", status="success", duration_ms=12.5)
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tickd.scheduler.secrets import mask, scrub_text

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
