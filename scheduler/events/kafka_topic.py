"""The events topic, created by tickd when it is missing, with the partitions and replicas the
URL asks for: what the cluster's answers mean, and which refusals no retry cures."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tickd.scheduler.events.kafka_settings import KafkaSettings
from tickd.scheduler.logs import log_event

log = logging.getLogger("tickd.events.kafka")

ADMIN_TIMEOUT_SECONDS = 5.0
TOPIC_RETRY_FIRST_SECONDS = 1.0
# Below librdkafka's topic.metadata.propagation.max.ms (30 s), after which events queued for a
# topic that does not exist yet fail: once the cluster is back, the topic is there in time.
TOPIC_RETRY_MAX_SECONDS = 10.0
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
