"""Settings: one frozen, validated object, from a TOML file and `TICKD_*` environment variables.

Precedence: defaults < the file (`--config`) < the environment. A bad value stops startup with a
message naming the setting; nothing past the loader sees an untyped dict.

Here: `Settings`, each field with the comment that documents it, and `load_settings`. What a
setting may hold is in config_limits, how each is checked in config_checks, where settings are
read from in config_sources, and the API's tokens in api_tokens.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_origin, get_type_hints

from tickd.scheduler.config.api_tokens import ApiToken, check_tokens_differ, tokens_from_file
from tickd.scheduler.config.checks import check_settings
from tickd.scheduler.config.limits import (
    ANY_URL,
    DAY,
    HANDLER_LIMIT,
    HOST,
    HOUR,
    INSTANCE_ID,
    IP_NETWORK,
    LOG_LEVEL,
    MAX_BATCH_SIZE,
    MAX_COUNT,
    MAX_LOOKAHEAD_LIMIT,
    MAX_QUEUE_SIZE,
    MAX_TIMEOUT,
    MAX_WORKERS,
    RETENTION_COUNT,
    RETENTION_DAYS,
    STORE_SCHEMES,
    ConfigError,
    Limits,
    setting,
)
from tickd.scheduler.config.sources import (
    check_variable_names,
    handler_settings_from_env,
    merge_handler_settings,
    merge_resource_urls,
    read_environment,
    read_file,
    resource_urls_from_env,
)
from tickd.scheduler.keys import MAX_CONCURRENCY_LIMIT
from tickd.scheduler.partitions import DEFAULT_PARTITIONS, MAX_PARTITIONS

__all__ = ["ConfigError", "Settings", "load_settings"]


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class Settings:
    # Names this daemon in leases, executions and events; unique per running process.
    instance_id: str = setting(factory=default_instance_id, limits=INSTANCE_ID)
    # Jobs, executions and history: sqlite:///path, postgresql://host/database or
    # mongodb://host/database.
    store_url: str = setting("sqlite:///var/tickd.db", Limits(schemes=STORE_SCHEMES))
    # One runner per job across instances: memory:// (one process) or redis://host:6379/0.
    lock_url: str = setting("memory://", Limits(schemes=("memory", "redis", "rediss")))
    # Execution events: log://, none:// or kafka://host:9092/topic.
    events_url: str = setting("log://", Limits(schemes=("log", "none", "kafka")))
    # Mail handlers send: outbox:///folder (files) or smtp://host:587.
    mail_url: str = setting("outbox:///var/outbox", Limits(schemes=("outbox", "smtp", "smtps")))
    # The dispatcher wakes this often, and earlier when a job falls due sooner.
    tick_seconds: float = setting(1.0, Limits(above=0, high=HOUR))
    # Most due jobs fetched and claimed per tick.
    batch_size: int = setting(100, Limits(low=1, high=MAX_BATCH_SIZE))
    # Jobs falling due within this many seconds are claimed ahead and fired from in-memory
    # timers at their exact time (their lease covers the wait); 0 claims only what is due.
    lookahead_seconds: float = setting(2.0, Limits(low=0, high=HOUR))
    # At most this many runs armed ahead at once (each holds its job's lease while it waits).
    # Jobs due at one instant are claimed ahead up to this many; beyond it, after the instant.
    lookahead_limit: int = setting(5000, Limits(low=0, high=MAX_LOOKAHEAD_LIMIT))
    # Under a sustained backlog a job due for longer than this is taken before more urgent
    # ones, so that every priority runs within a bound (critical first, but low not never).
    starvation_bound_seconds: float = setting(60.0, Limits(above=0, high=DAY))
    # Partitions of the due queue in a new store (scheduler/partitions.py): each instance reads
    # due jobs only in those it owns. Fixed once the store exists (its count then stands).
    partitions: int = setting(DEFAULT_PARTITIONS, Limits(low=1, high=MAX_PARTITIONS))
    # Each instance records that it is alive this often...
    heartbeat_seconds: float = setting(3.0, Limits(above=0, high=HOUR))
    # ...and one silent for this long is taken for dead: its leases end at once, so its runs
    # are given back within seconds of a crash rather than when their timeouts run out.
    heartbeat_timeout_seconds: float = setting(10.0, Limits(above=0, high=DAY))
    # The due backlog and oldest-due-age gauges are read from the store this often (never per
    # tick: a count scans).
    backlog_refresh_seconds: float = setting(5.0, Limits(above=0, high=HOUR))
    # A finished run waits this long for others to end, so that their ends go to the store in
    # one batch (at most batch_size); 0 batches only the runs that end at the same moment.
    finish_linger_seconds: float = setting(0.002, Limits(low=0, high=1))
    # Runs at once in this process.
    workers: int = setting(30, Limits(low=1, high=MAX_WORKERS))
    # Tasks waiting for a worker; 0 means twice the number of workers.
    queue_size: int = setting(0, Limits(low=0, high=MAX_QUEUE_SIZE))
    # A lease outlives the job's timeout by this much before another instance may reap it.
    lease_margin_seconds: float = setting(30.0, Limits(above=0, high=DAY))
    # The lock outlives the job's timeout by this much (the seed's five seconds).
    lock_margin_seconds: float = setting(5.0, Limits(low=0, high=DAY))
    # On SIGTERM, running executions get this long to finish before they are cancelled.
    shutdown_grace_seconds: float = setting(30.0, Limits(low=0, high=DAY))
    # The event loop blocked for longer than this (a handler calling time.sleep or a blocking
    # client inside an async def) is a stall: counted in tickd_loop_stalls_total and logged
    # (loop.stalled) with the jobs that were running.
    loop_stall_threshold_seconds: float = setting(0.5, Limits(above=0, high=HOUR))
    # Pause a job after this many consecutive failed executions; 0 turns the breaker off.
    circuit_breaker_failures: int = setting(0, Limits(low=0, high=MAX_COUNT))
    # No job may ask for a longer timeout than this.
    max_timeout_seconds: float = setting(86400.0, Limits(above=0, high=MAX_TIMEOUT))
    # Most runs of one handler at once, by handler name (overrides the handler's own limit).
    handler_concurrency: Mapping[str, int] = setting(factory=dict, limits=HANDLER_LIMIT)
    # The limit of the concurrency key a handler gives a job that names none (webhook and
    # http_check: the host of their URL); 0 gives none.
    default_concurrency_limit: int = setting(10, Limits(low=0, high=MAX_CONCURRENCY_LIMIT))
    # The REST API, /metrics, /healthz and /readyz; port 0 turns the listener off. Without
    # tokens the API refuses to listen anywhere but on loopback.
    api_host: str = setting("127.0.0.1", HOST)
    # The API's port (also /ui, the dashboard).
    api_port: int = setting(8080, Limits(low=0, high=65535))
    # Bearer tokens of the API and the dashboard: [[api_tokens]] name, scope, token, domains.
    api_tokens: tuple[ApiToken, ...] = setting((), secret=True)
    # text, or json for one JSON object per line.
    log_format: str = setting("text", Limits(choices=("text", "json")))
    # DEBUG, INFO, WARNING or ERROR.
    log_level: str = setting("INFO", LOG_LEVEL)
    # Seed demo jobs at boot (what `make run` does).
    seed_demo: bool = setting(False)
    # On shutdown, pending events get this long to be delivered.
    events_flush_seconds: float = setting(5.0, Limits(low=0, high=HOUR))
    # Handlers' HTTP (ctx.http) reaches public addresses on these ports only...
    http_allowed_ports: tuple[int, ...] = setting((80, 443), Limits(low=1, high=65535))
    # ...and, on any port, these internal addresses or networks (CIDR), e.g. ["10.1.2.0/24"].
    http_allow: tuple[str, ...] = setting((), IP_NETWORK)
    # Each handler's own settings, by handler name, given to it as `ctx.config`: a
    # [handler_settings.catalogue_walk] table, or TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__API_KEY
    # (values from the environment are strings). They may hold secrets: never shown.
    handler_settings: Mapping[str, Mapping[str, Any]] = setting(factory=dict, secret=True)
    # Executions and history older than this many days are pruned, in small batches off the
    # hot path; 0 keeps them for ever. A running execution, an unhandled dead letter and a
    # job's newest execution are never pruned.
    retention_days: int = setting(30, RETENTION_DAYS)
    # Executions kept per job, the newest; older ones are pruned (0: no bound by count).
    retention_max_executions_per_job: int = setting(1000, RETENTION_COUNT)
    # retention_days for the executions of some handlers, by handler name: `webhook = 7`.
    retention_days_by_handler: Mapping[str, int] = setting(factory=dict, limits=RETENTION_DAYS)
    # retention_max_executions_per_job for some handlers, by handler name: `webhook = 100`.
    retention_max_executions_by_handler: Mapping[str, int] = setting(
        factory=dict, limits=RETENTION_COUNT
    )
    # Where the resources handlers declare keep their data, by resource name, when not in the
    # store's database: `[resource_urls] products = "mongodb://product-db/app"`, or
    # TICKD_RESOURCE_URLS__PRODUCTS. May hold passwords: never shown.
    resource_urls: Mapping[str, str] = setting(factory=dict, limits=ANY_URL, secret=True)

    def __post_init__(self) -> None:
        found = check_settings(self, _hints())
        found.raise_any()  # the checks below compare values that must be of their types
        if self.heartbeat_timeout_seconds <= 2 * self.heartbeat_seconds:
            raise ConfigError(
                "heartbeat_timeout_seconds",
                "must be more than twice heartbeat_seconds, or live instances are taken for dead",
            )
        check_tokens_differ(self.api_tokens)

    @property
    def effective_queue_size(self) -> int:
        return self.queue_size or 2 * self.workers


def load_settings(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    values: dict[str, Any] = {}
    if path is not None:
        values.update(read_file(Path(path), _field_names()))
    environ = os.environ if environ is None else environ
    check_variable_names(environ, _field_names())
    values.update(read_environment(environ, _hints()))
    merge_handler_settings(values, handler_settings_from_env(environ))
    merge_resource_urls(values, resource_urls_from_env(environ))
    return _build(values)


def _build(values: dict[str, Any]) -> Settings:
    hints = _hints()
    for name, value in values.items():
        if hints[name] == tuple[ApiToken, ...] and not isinstance(value, tuple):
            values[name] = tokens_from_file(value)
        elif get_origin(hints[name]) is tuple and isinstance(value, list):
            values[name] = tuple(value)
    return Settings(**values)


@functools.cache
def _hints() -> dict[str, Any]:
    return get_type_hints(Settings)


def _field_names() -> set[str]:
    return {f.name for f in dataclasses.fields(Settings)}
