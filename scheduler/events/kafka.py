"""Events to Kafka through confluent-kafka: `kafka://host:port[,host:port...]/topic?options`.

The topic defaults to `tickd.executions`. Each event is one CloudEvent in structured mode (the JSON
document as the value, header `content-type: application/cloudevents+json`), keyed by its subject,
the job id, so that a job's events stay in order on one partition.

Options (query parameters):

    security_protocol     PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
    sasl_mechanism        PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    sasl_username         the SASL user; the URL's user part works too (the query wins)
    ssl_ca_location       CA bundle that signs the brokers' certificates (SSL, SASL_SSL)
    max_queued            events held locally while the brokers are slow or down (default 100000);
                          past that, events are dropped and counted (reason `queue_full`)
    delivery_timeout_ms   how long an event may wait for the brokers before it is dropped and
                          counted (reason `delivery_failed`); default 300000, librdkafka's
    partitions            partitions of the topic if tickd creates it (default 1)
    replication_factor    replicas of the topic if tickd creates it (default 1)

The SASL password is taken from the URL's password part only, percent-encoded
(`kafka://tickd:s%40cret@broker:9093/tickd.executions?security_protocol=SASL_SSL&...`), never from
the query; it appears in no log line and no repr.

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
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tickd.scheduler.events import DEFAULT_TOPIC
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.ports import CloudEvent

log = logging.getLogger("tickd.events.kafka")
# librdkafka's own lines (connection failures and the like), under a name of their own.
client_log = logging.getLogger("tickd.events.kafka.client")

HEADERS: list[tuple[str, str | bytes | None]] = [("content-type", b"application/cloudevents+json")]
POLL_SECONDS = 0.1
# close() keeps this much of its deadline for stopping the threads after the flush.
SHUTDOWN_RESERVE_SECONDS = 0.2
ADMIN_TIMEOUT_SECONDS = 5.0
TOPIC_RETRY_FIRST_SECONDS = 1.0
# Below librdkafka's topic.metadata.propagation.max.ms (30 s), after which events queued for a
# topic that does not exist yet fail: once the cluster is back, the topic is there in time.
TOPIC_RETRY_MAX_SECONDS = 10.0

ClientConfig = dict[str, str | int | float | bool]
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Query options passed to librdkafka under its own names.
CLIENT_OPTIONS = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "ssl_ca_location": "ssl.ca.location",
}
COUNT_OPTIONS = ("max_queued", "delivery_timeout_ms", "partitions", "replication_factor")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# Errors a retry cannot cure: the topic will not be created by asking again.
TOPIC_REFUSALS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.POLICY_VIOLATION,
        KafkaError.INVALID_REPLICATION_FACTOR,
        KafkaError.INVALID_PARTITIONS,
        KafkaError.INVALID_CONFIG,
        KafkaError.TOPIC_EXCEPTION,
    }
)


@dataclass(frozen=True, kw_only=True)
class KafkaSettings:
    """Where and how to publish, validated; the password is left out of the repr."""

    bootstrap_servers: str
    topic: str = DEFAULT_TOPIC
    client_options: Mapping[str, str] = field(default_factory=dict)  # librdkafka names
    password: str | None = field(default=None, repr=False)
    max_queued: int = 100_000
    delivery_timeout_ms: int = 300_000
    partitions: int = 1
    replication_factor: int = 1

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ValueError("events_url: kafka:// needs host:port of at least one broker")
        if not TOPIC_NAME.fullmatch(self.topic):
            raise ValueError(f"events_url: {self.topic!r} is not a Kafka topic name")
        for name in COUNT_OPTIONS:
            if getattr(self, name) < 1:
                raise ValueError(f"events_url: {name} must be at least 1")
        protocol = self.client_options.get("security.protocol", "PLAINTEXT").upper()
        if self.password is not None and protocol not in SASL_PROTOCOLS:
            raise ValueError(
                "events_url: a password needs security_protocol=SASL_SSL (or SASL_PLAINTEXT)"
            )

    @classmethod
    def from_url(cls, url: str) -> KafkaSettings:
        parts = urlsplit(url)
        if parts.scheme != "kafka":
            raise ValueError(f"events_url: expected kafka://, not {parts.scheme}://")
        userinfo, _, hosts = parts.netloc.rpartition("@")
        user, has_password, password = userinfo.partition(":")
        options = query_options(parts.query)
        client_options = {CLIENT_OPTIONS[k]: v for k, v in options.items() if k in CLIENT_OPTIONS}
        if user:
            client_options.setdefault("sasl.username", unquote(user))
        return cls(
            bootstrap_servers=hosts,
            topic=unquote(parts.path.strip("/")) or DEFAULT_TOPIC,
            client_options=client_options,
            password=unquote(password) if has_password else None,
            **{name: int(options[name]) for name in COUNT_OPTIONS if name in options},
        )

    def client_config(self) -> ClientConfig:
        """What every client of this cluster needs: the brokers and how to log in."""
        config: ClientConfig = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": "tickd",
            # Brokers close idle connections every few minutes; that is not worth a log line.
            "log.connection.close": False,
            **self.client_options,
        }
        if self.password is not None:
            config["sasl.password"] = self.password
        return config

    def producer_config(self) -> ClientConfig:
        return {
            **self.client_config(),
            "queue.buffering.max.messages": self.max_queued,
            "message.timeout.ms": self.delivery_timeout_ms,
            # Retried batches keep their order and are written once.
            "enable.idempotence": True,
            # The topic is created by tickd, with its partitions; the broker's own auto-creation
            # (with its default partitions) would race it.
            "allow.auto.create.topics": False,
        }


def query_options(query: str) -> dict[str, str]:
    """The URL's options, refusing any this module does not know (a typo must not pass)."""
    options = dict(parse_qsl(query, keep_blank_values=True))
    if "sasl_password" in options:
        raise ValueError("events_url: put the password in the URL (user:password@host), not ?")
    known = (*CLIENT_OPTIONS, *COUNT_OPTIONS)
    for name, value in options.items():
        if name not in known:
            raise ValueError(f"events_url: unknown option {name!r} (known: {', '.join(known)})")
        if name in COUNT_OPTIONS and not value.isdigit():
            raise ValueError(f"events_url: {name} must be a whole number")
    return options


@dataclass(frozen=True, kw_only=True)
class EventCounts:
    """What became of the events handed to one publisher so far."""

    accepted: int = 0  # taken into the local queue
    delivered: int = 0  # acknowledged by the brokers
    queue_full: int = 0  # dropped: the local queue was at its bound
    delivery_failed: int = 0  # dropped: not acknowledged in time, or pending at close
    closed: int = 0  # dropped: published after close

    @property
    def dropped(self) -> int:
        return self.queue_full + self.delivery_failed + self.closed


class EventTally:
    """Counts kept here and, when given, in Prometheus.

    Thread-safe: events are published on the event loop, delivery reports arrive on the poller.
    A run of drops is logged when it starts and when a delivery ends it, not once per event.
    """

    def __init__(self, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._dropping: Counter[str] = Counter()  # drops by reason since the last delivery

    def accepted(self) -> None:
        with self._lock:
            self._counts["accepted"] += 1

    def delivered(self) -> None:
        with self._lock:
            self._counts["delivered"] += 1
            ended, self._dropping = self._dropping, Counter()
        if self._metrics is not None:
            self._metrics.events_delivered.inc()
        for reason, count in ended.items():
            log_event(log, "events.drops_ended", reason=reason, dropped=count)

    def dropped(self, reason: str, error: str) -> None:
        with self._lock:
            self._counts[reason] += 1
            self._dropping[reason] += 1
            first = self._dropping[reason] == 1
        if self._metrics is not None:
            self._metrics.events_dropped.labels(reason).inc()
        if first:
            log_event(log, "events.dropping", level=logging.WARNING, reason=reason, error=error)

    def snapshot(self) -> EventCounts:
        with self._lock:
            return EventCounts(**self._counts)


class KafkaPublisher:
    """The events port on Kafka (see the module's docstring for the URL and the design)."""

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


def will_retry(exc: Exception, delay: float) -> bool:
    if kafka_error_code(exc) in TOPIC_REFUSALS:
        log_event(log, "events.topic_refused", level=logging.WARNING, error=str(exc))
        return False
    log_event(log, "events.topic_unknown", level=logging.WARNING, error=str(exc), retry=delay)
    return True


def create_missing_topic(admin: AdminClient, settings: KafkaSettings) -> bool:
    """True if this call created the topic, False if it was there already."""
    if settings.topic in admin.list_topics(timeout=ADMIN_TIMEOUT_SECONDS).topics:
        return False
    new = NewTopic(
        settings.topic,
        num_partitions=settings.partitions,
        replication_factor=settings.replication_factor,
    )
    created = admin.create_topics([new], request_timeout=ADMIN_TIMEOUT_SECONDS)[settings.topic]
    try:
        created.result(timeout=2 * ADMIN_TIMEOUT_SECONDS)
    except KafkaException as exc:
        if kafka_error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        return False  # another instance was quicker
    return True


def kafka_error_code(exc: Exception) -> int | None:
    error = exc.args[0] if exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


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
