"""The events port: CloudEvents for every execution. Backends: `log://`, `none://`, `kafka://`."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from scheduler.codec import execution_to_doc, to_json_ready
from scheduler.model import Execution, Status
from scheduler.ports import CloudEvent, EventPublisher

DEFAULT_TOPIC = "tickd.executions"


def open_publisher(url: str) -> EventPublisher:
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme == "log":
        from scheduler.events.log import LogPublisher

        level = dict(parse_qsl(parts.query)).get("level", "info").upper()
        if level not in ("DEBUG", "INFO", "WARNING"):
            raise ValueError(f"events_url: level must be debug, info or warning, not {level!r}")
        return LogPublisher(logging.getLevelName(level))
    if scheme == "none":
        from scheduler.events.log import NullPublisher

        return NullPublisher()
    raise ValueError(f"events_url: unsupported scheme {scheme!r} (expected log:// or none://)")


def event_type(status: Status) -> str:
    return "job.execution.started" if status is Status.RUNNING else f"job.execution.{status}"


def execution_event(execution: Execution, *, source: str, time: datetime) -> CloudEvent:
    """CloudEvents 1.0, structured mode; the data is the execution minus its result."""
    data: dict[str, Any] = execution_to_doc(execution)
    data.pop("result")
    data["id"] = data.pop("_id")
    return {
        "specversion": "1.0",
        "id": uuid.uuid4().hex,
        "source": f"tickd/{source}",
        "type": event_type(execution.status),
        "subject": execution.job_id,
        "time": to_json_ready(time),
        "datacontenttype": "application/json",
        "data": to_json_ready(data),
    }
