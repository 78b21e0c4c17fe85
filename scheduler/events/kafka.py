"""Events to Kafka through confluent-kafka: `kafka://host:port[,host:port...]/topic?options`.

The topic defaults to `tickd.executions`. Each event is one CloudEvent in structured mode (the JSON
document as the value, header `content-type: application/cloudevents+json`), keyed by its subject,
the job id, so that a job's events stay in order on one partition. The URL and its options are
described in kafka_settings; what became of the events is counted in kafka_counts; the topic is
created by kafka_topic.

How it is built, and why:

- `publish` only hands the event to librdkafka's local queue, which never blocks; a full queue is a
  dropped, counted event. A Kafka outage therefore never blocks or fails a run.
- A daemon thread polls the producer. Delivery reports, client errors and librdkafka's log lines
  are served only by poll(); polling in `publish` alone would leave them waiting while no job runs
  (a delivery that times out during a quiet night would go uncounted), and would run the callbacks
  on the event loop.
- Another daemon thread creates the topic if it is missing, retrying with backoff while the
  cluster cannot be reached. The constructor returns at once, so a broker that is down at startup
  never stops the daemon from starting, and `open_publisher` stays synchronous. Events published
  before the topic exists wait in the local queue like any others. The producer does not let the
  broker auto-create the topic, which would race ours with the broker's default partitions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from tickd.scheduler.events.kafka_counts import EventCounts, EventTally
from tickd.scheduler.events.kafka_settings import KafkaSettings
from tickd.scheduler.events.kafka_topic import (
    TOPIC_RETRY_FIRST_SECONDS,
    TOPIC_RETRY_MAX_SECONDS,
    create_missing_topic,
    will_retry,
)
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.ports.backends import CloudEvent

log = logging.getLogger("tickd.events.kafka")
# librdkafka's own lines (connection failures and the like), under a name of their own.
client_log = logging.getLogger("tickd.events.kafka.client")

HEADERS: list[tuple[str, str | bytes | None]] = [("content-type", b"application/cloudevents+json")]
POLL_SECONDS = 0.1
# close() keeps this much of its deadline for stopping the threads after the flush.
SHUTDOWN_RESERVE_SECONDS = 0.2


class KafkaPublisher:
    """The events port on Kafka (the URL is described in kafka_settings, the design in this
    module's docstring)."""

    keeps_events = True

    def __init__(self, settings: KafkaSettings, *, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self._tally = EventTally(metrics)
        self._producer = Producer(
            settings.producer_config(), logger=client_log, error_cb=log_client_error
        )
        self._closed = False
        self._stopping = threading.Event()
        self._poller = start_daemon_thread("tickd-kafka-poller", self._poll_until_stopped)
        self._topic_keeper = start_daemon_thread("tickd-kafka-topic", self._ensure_topic)

    @classmethod
    def from_url(cls, url: str, *, metrics: Metrics | None = None) -> KafkaPublisher:
        return cls(KafkaSettings.from_url(url), metrics=metrics)

    def __repr__(self) -> str:
        return f"KafkaPublisher({self.settings.bootstrap_servers!r}, {self.settings.topic!r})"

    def counts(self) -> EventCounts:
        return self._tally.snapshot()

    def publish(self, event: CloudEvent) -> None:
        if self._closed:
            self._tally.dropped("closed", "published after close")
            return
        try:
            self._producer.produce(
                self.settings.topic,
                value=json.dumps(event, separators=(",", ":")).encode(),
                key=event_key(event),
                headers=HEADERS,
                on_delivery=self._on_delivery,
            )
        except BufferError:
            self._tally.dropped("queue_full", f"{self.settings.max_queued} events queued already")
        except Exception as exc:  # a fatal producer error, an event that is not JSON: never raise
            self._tally.dropped("delivery_failed", f"{type(exc).__name__}: {exc}")
        else:
            self._tally.accepted()

    async def publish_confirmed(
        self, events: Sequence[CloudEvent], *, timeout_seconds: float
    ) -> list[bool]:
        """Each event is produced (in order, keyed by job id) with a delivery report that
        resolves its future on this loop; what the brokers have not acknowledged within the
        timeout counts as unconfirmed (the relay publishes it again later: the idempotent
        producer keeps a retried batch in order, the stable event id lets a consumer dedupe)."""
        loop = asyncio.get_running_loop()
        confirmations: list[asyncio.Future[bool]] = []
        for event in events:
            confirmation: asyncio.Future[bool] = loop.create_future()
            confirmations.append(confirmation)
            if not self._produce_confirmed(event, loop, confirmation):
                confirmation.set_result(False)
        if confirmations:
            await asyncio.wait(confirmations, timeout=timeout_seconds)
        return [c.done() and c.result() for c in confirmations]

    def _produce_confirmed(
        self,
        event: CloudEvent,
        loop: asyncio.AbstractEventLoop,
        confirmation: asyncio.Future[bool],
    ) -> bool:
        """Hand the event to librdkafka; False if it would not take it (closed, queue full)."""

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            self._on_delivery(error, message)  # the counts, as for `publish`
            loop.call_soon_threadsafe(_resolve, confirmation, error is None)

        if self._closed:
            return False
        try:
            self._producer.produce(
                self.settings.topic,
                value=json.dumps(event, separators=(",", ":")).encode(),
                key=event_key(event),
                headers=HEADERS,
                on_delivery=on_delivery,
            )
        except BufferError:
            self._tally.dropped("queue_full", f"{self.settings.max_queued} events queued already")
            return False
        except Exception as exc:  # a fatal producer error, an event that is not JSON: never raise
            self._tally.dropped("delivery_failed", f"{type(exc).__name__}: {exc}")
            return False
        self._tally.accepted()
        return True

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self._tally.delivered()
        else:
            self._tally.dropped("delivery_failed", error.str())

    async def close(self, timeout_seconds: float) -> None:
        if self._closed:
            return
        self._closed = True
        undelivered = await asyncio.to_thread(self._shut_down, timeout_seconds)
        log_event(
            log,
            "events.closed",
            level=logging.WARNING if undelivered else logging.INFO,
            undelivered=undelivered,
            **dataclasses.asdict(self.counts()),
        )

    def _shut_down(self, timeout_seconds: float) -> int:
        """Flush within the deadline, then let go. What is left is purged, so that its delivery
        reports count it as failed rather than letting it vanish. Returns how many were left."""
        deadline = time.monotonic() + timeout_seconds
        undelivered = self._producer.flush(max(0.0, timeout_seconds - SHUTDOWN_RESERVE_SECONDS))
        if undelivered:
            self._producer.purge(in_queue=True, in_flight=True)
        self._stopping.set()
        self._poller.join()  # within one poll
        self._producer.poll(0)  # the purged events' reports
        self._producer.close()
        self._topic_keeper.join(max(0.0, deadline - time.monotonic()))
        return undelivered

    def _poll_until_stopped(self) -> None:
        while not self._stopping.is_set():
            try:
                self._producer.poll(POLL_SECONDS)
            except Exception:  # a bug in a callback must not stop the reports for good
                log.exception("events.poll_failed")

    def _ensure_topic(self) -> None:
        """Create the topic if it is missing; retry while the cluster cannot be asked, give up
        (with a warning) when it refuses, and stop when the publisher closes."""
        admin = AdminClient(self.settings.client_config(), logger=client_log)
        delay = TOPIC_RETRY_FIRST_SECONDS
        while not self._stopping.is_set():
            try:
                created = create_missing_topic(admin, self.settings)
            except (KafkaException, FutureTimeout) as exc:
                if self._stopping.is_set() or not will_retry(exc, delay):
                    return
                admin.poll(0)  # the client's log lines
                self._stopping.wait(delay)
                delay = min(delay * 2, TOPIC_RETRY_MAX_SECONDS)
            else:
                if created:
                    log_event(log, "events.topic_created", topic=self.settings.topic)
                return


def _resolve(confirmation: asyncio.Future[bool], delivered: bool) -> None:
    if not confirmation.done():  # the relay may have stopped waiting (timeout, cancellation)
        confirmation.set_result(delivered)


def event_key(event: CloudEvent) -> bytes | None:
    subject = event.get("subject")
    return None if subject is None else str(subject).encode()


def log_client_error(error: KafkaError) -> None:
    """The client reconnects by itself, and its own log lines say to which broker; what matters
    here is every broker down, a failed login, or a fatal error."""
    if error.fatal():
        level = logging.ERROR
    elif error.code() == KafkaError._TRANSPORT:
        level = logging.DEBUG
    else:
        level = logging.WARNING
    log_event(log, "events.client_error", level=level, code=error.name(), error=error.str())


def start_daemon_thread(name: str, target: Callable[[], Any]) -> threading.Thread:
    """Daemon, so that a thread stuck on an unreachable cluster never keeps the process alive."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
