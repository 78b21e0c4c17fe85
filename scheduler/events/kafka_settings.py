"""Where and how to publish events to Kafka, from the events URL, validated into KafkaSettings:
`kafka://host:port[,host:port...]/topic?options`. The topic defaults to `tickd.executions`.

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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from tickd.scheduler.events import DEFAULT_TOPIC

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
