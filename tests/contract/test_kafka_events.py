"""What the Kafka publisher promises beyond the events contract: an outage never blocks nor
raises, what cannot be delivered is counted, the topic is created when missing, and the password
never shows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.contract.test_events import execution
from tests.fixtures.events import KAFKA_BOOTSTRAP, PublisherUnderTest, delete_topic
from tests.fixtures.services import KAFKA_URL
from tests.fixtures.times import T0
from tickd.scheduler.events import execution_event, open_publisher
from tickd.scheduler.events.kafka import KafkaPublisher
from tickd.scheduler.events.kafka_counts import EventCounts
from tickd.scheduler.events.kafka_settings import KafkaSettings
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Status
from tickd.scheduler.ports.backends import CloudEvent

# Handing one event over must never come near a dispatcher tick.
PUBLISH_SECONDS = 0.05
CLOSE_SLACK_SECONDS = 0.5
TOPIC_WAIT_SECONDS = 10.0


def event(job_id: str = "job-1") -> CloudEvent:
    return execution_event(execution(Status.RUNNING, job_id), source="instance-a", time=T0)


def dropped(metrics: Metrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("tickd_events_dropped_total", {"reason": reason})


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: every broker is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_an_unreachable_broker_never_blocks_nor_raises_and_drops_past_the_bound(
    closed_port: int,
) -> None:
    metrics = Metrics()
    publisher = KafkaPublisher.from_url(
        f"kafka://127.0.0.1:{closed_port}/tickd.executions?max_queued=5", metrics=metrics
    )
    try:
        for n in range(20):
            started = time.monotonic()
            publisher.publish(event(f"job-{n}"))
            assert time.monotonic() - started < PUBLISH_SECONDS
        assert publisher.counts() == EventCounts(accepted=5, queue_full=15)
        assert dropped(metrics, "queue_full") == 15
    finally:
        await publisher.close(0.5)

    counts = publisher.counts()
    assert counts.delivery_failed == 5, "events still queued at close are counted, not lost"
    assert dropped(metrics, "delivery_failed") == 5
    publisher.publish(event())
    assert publisher.counts().closed == 1


@pytest.mark.parametrize("deadline", [0.0, 1.0])
async def test_close_with_an_unreachable_broker_keeps_to_its_deadline(
    closed_port: int, deadline: float
) -> None:
    publisher = KafkaPublisher.from_url(f"kafka://127.0.0.1:{closed_port}")
    publisher.publish(event())

    started = time.monotonic()
    await publisher.close(deadline)

    assert time.monotonic() - started < deadline + CLOSE_SLACK_SECONDS
    assert publisher.counts().delivery_failed == 1


async def test_deliveries_are_counted_here_and_in_prometheus(kafka_topic: str) -> None:
    metrics = Metrics()
    publisher = open_publisher(f"{KAFKA_URL}/{kafka_topic}", metrics=metrics)
    assert isinstance(publisher, KafkaPublisher)
    for n in range(3):
        publisher.publish(event(f"job-{n}"))
    await publisher.close(5)

    assert publisher.counts() == EventCounts(accepted=3, delivered=3)
    assert metrics.registry.get_sample_value("tickd_events_delivered_total") == 3


@pytest.fixture
def missing_topic(kafka_admin: AdminClient) -> Iterator[str]:
    topic = f"tickd-test-{uuid.uuid4().hex}"
    try:
        yield topic
    finally:
        delete_topic(kafka_admin, topic)


async def test_a_missing_topic_is_created_with_its_partitions(
    missing_topic: str, kafka_admin: AdminClient
) -> None:
    publisher = KafkaPublisher.from_url(f"{KAFKA_URL}/{missing_topic}?partitions=3")
    publisher.publish(event())
    await publisher.close(TOPIC_WAIT_SECONDS)

    topic = kafka_admin.list_topics(missing_topic, timeout=5).topics[missing_topic]
    assert topic.error is None
    assert len(topic.partitions) == 3
    assert publisher.counts().delivered == 1, "the event waited for the topic"


async def test_publisher_under_test_reads_back_what_was_published(
    kafka_publisher: PublisherUnderTest,
) -> None:
    """The fixture itself: keys and events come back as published, in order."""
    for n in range(5):
        kafka_publisher.publisher.publish(event(f"job-{n}"))
    received = await kafka_publisher.published(expected=5)
    assert [e["subject"] for e in received] == [f"job-{n}" for n in range(5)]
    assert kafka_publisher.keys == [f"job-{n}" for n in range(5)]


async def test_confirmed_publishing_says_which_events_the_broker_acknowledged(
    kafka_publisher: PublisherUnderTest,
) -> None:
    """What the relay relies on: True only for events the broker has, in the order given."""
    publisher = kafka_publisher.publisher
    assert isinstance(publisher, KafkaPublisher)
    events = [event(f"job-{n % 2}") for n in range(6)]
    assert await publisher.publish_confirmed(events, timeout_seconds=10) == [True] * 6
    received = await kafka_publisher.published(expected=6)
    assert [e["id"] for e in received] == [e["id"] for e in events]


async def test_confirmed_publishing_to_an_unreachable_broker_confirms_nothing_in_time(
    closed_port: int,
) -> None:
    publisher = KafkaPublisher.from_url(f"kafka://127.0.0.1:{closed_port}/tickd.executions")
    try:
        started = time.monotonic()
        confirmed = await publisher.publish_confirmed([event(), event()], timeout_seconds=0.5)
        assert confirmed == [False, False], "the relay keeps them and tries again later"
        assert time.monotonic() - started < 0.5 + CLOSE_SLACK_SECONDS
    finally:
        await publisher.close(0)
    assert await publisher.publish_confirmed([event()], timeout_seconds=1) == [False], "closed"


SASL_URL = (
    "kafka://tickd:s%40cr3t-pw@127.0.0.1:{port},127.0.0.1:{port}/orders"
    "?security_protocol=SASL_PLAINTEXT&sasl_mechanism=PLAIN&max_queued=10"
)


def test_a_url_gives_brokers_topic_login_and_bound() -> None:
    settings = KafkaSettings.from_url(SASL_URL.format(port=9093))

    assert settings.bootstrap_servers == "127.0.0.1:9093,127.0.0.1:9093"
    assert settings.topic == "orders"
    assert settings.max_queued == 10
    config = settings.producer_config()
    assert config["sasl.username"] == "tickd"
    assert config["sasl.password"] == "s@cr3t-pw"
    assert config["security.protocol"] == "SASL_PLAINTEXT"
    assert config["queue.buffering.max.messages"] == 10
    assert "s@cr3t" not in repr(settings)


def test_the_topic_defaults_to_tickd_executions() -> None:
    assert KafkaSettings.from_url("kafka://broker:9092").topic == "tickd.executions"
    assert KafkaSettings.from_url("kafka://broker:9092/").topic == "tickd.executions"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("kafka:///t", "at least one broker"),
        ("kafka://b:9092/t?max_queud=5", "unknown option 'max_queud'"),
        ("kafka://b:9092/t?sasl_password=x", "password in the URL"),
        ("kafka://u:pw@b:9092/t", "security_protocol=SASL_SSL"),
        ("kafka://b:9092/t?max_queued=-1", "whole number"),
        ("kafka://b:9092/t?partitions=0", "at least 1"),
        ("kafka://b:9092/no topic", "not a Kafka topic name"),
    ],
)
def test_a_bad_url_is_refused_naming_the_problem(url: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint) as refused:
        KafkaSettings.from_url(url)
    assert "pw" not in str(refused.value)


async def test_the_password_never_reaches_a_log_line_or_a_repr(
    closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    publisher = KafkaPublisher.from_url(SASL_URL.format(port=closed_port))
    publisher.publish(event())
    await asyncio.sleep(0.3)  # let the client fail to connect and log it
    await publisher.close(0.2)

    assert "cr3t" not in repr(publisher)
    assert any(r.name.startswith("tickd.events.kafka") for r in caplog.records)
    assert "cr3t" not in caplog.text


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def forwarding(port: int) -> AsyncIterator[None]:
    """From now on, `port` leads to the real broker: a cluster coming back after an outage.

    Only the first connection goes through here; the broker then names its own address."""
    host, broker_port = KAFKA_BOOTSTRAP.split(",")[0].rsplit(":", 1)

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(broker_port))
        await asyncio.gather(
            pipe(reader, upstream_writer), pipe(upstream_reader, writer), return_exceptions=True
        )

    server = await asyncio.start_server(forward, "127.0.0.1", port)
    async with server:
        yield


async def test_a_broker_down_at_startup_gets_the_events_and_the_topic_once_it_is_up(
    closed_port: int, missing_topic: str, kafka_admin: AdminClient
) -> None:
    publisher = KafkaPublisher.from_url(f"kafka://127.0.0.1:{closed_port}/{missing_topic}")
    for n in range(3):
        publisher.publish(event(f"job-{n}"))
    await asyncio.sleep(0.5)  # the client and the topic keeper both fail meanwhile
    assert publisher.counts() == EventCounts(accepted=3)

    async with forwarding(closed_port):
        await publisher.close(TOPIC_WAIT_SECONDS)

    assert publisher.counts() == EventCounts(accepted=3, delivered=3)
    assert missing_topic in kafka_admin.list_topics(timeout=5).topics
