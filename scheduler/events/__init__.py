"""The events port: CloudEvents for every execution. Backends: `log://`, `none://`, `kafka://`."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from tickd.scheduler.codec import execution_to_doc, to_json_ready
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports.backends import CloudEvent, EventPublisher, Ports

if TYPE_CHECKING:
    from tickd.scheduler.metrics import Metrics

DEFAULT_TOPIC = "tickd.executions"


def open_publisher(url: str, *, metrics: Metrics | None = None) -> EventPublisher:
    """The event backend for a URL. `metrics` receives the deliveries and drops of the backends
    that count them (Kafka); pass the engine's, so that /metrics shows them."""
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme == "log":
        from tickd.scheduler.events.log import LogPublisher

        level = dict(parse_qsl(parts.query)).get("level", "info").upper()
        if level not in ("DEBUG", "INFO", "WARNING"):
            raise ValueError(f"events_url: level must be debug, info or warning, not {level!r}")
        return LogPublisher(logging.getLevelName(level))
    if scheme == "none":
        from tickd.scheduler.events.log import NullPublisher

        return NullPublisher()
    if scheme == "kafka":
        from tickd.scheduler.events.kafka import KafkaPublisher

        return KafkaPublisher.from_url(url, metrics=metrics)
    raise ValueError(
        f"events_url: unsupported scheme {scheme!r} (expected log://, none:// or kafka://)"
    )


def event_type(status: Status) -> str:
    return "job.execution.started" if status is Status.RUNNING else f"job.execution.{status}"


def event_id(execution: Execution) -> str:
    """Stable: the same change of the same execution, written or published twice, has one id (a
    consumer deduplicates redeliveries by it)."""
    return f"{execution.id}:{execution.status}"


def event_time(execution: Execution) -> datetime:
    """When the change the event tells of happened: the start of a running execution, the end of
    a final one (a skipped one may have neither: then its occurrence)."""
    if execution.status is Status.RUNNING:
        return execution.started_at or execution.scheduled_at
    return execution.finished_at or execution.started_at or execution.scheduled_at


def execution_event(
    execution: Execution, *, source: str, time: datetime | None = None
) -> CloudEvent:
    """CloudEvents 1.0, structured mode; the data is the execution minus its result, its
    attempts and its traceback (the record keeps those). The id and, unless `time` is given,
    the time come from the execution, so the event is the same however often it is built."""
    data: dict[str, Any] = execution_to_doc(execution)
    data.pop("result")
    data.pop("attempt_log")
    if data["error"] is not None:
        data["error"].pop("traceback", None)
    data["id"] = data.pop("_id")
    return {
        "specversion": "1.0",
        "id": event_id(execution),
        "source": f"tickd/{source}",
        "type": event_type(execution.status),
        "subject": execution.job_id,
        "time": to_json_ready(time or event_time(execution)),
        "datacontenttype": "application/json",
        "data": to_json_ready(data),
    }


def event_source(settings: Settings, ports: Ports) -> str | None:
    """Who the events of this instance's runs come from, written to the outbox with them; None
    when the publisher keeps no event (none://), so that none is even written."""
    return settings.instance_id if ports.events.keeps_events else None
