"""Prometheus metrics: per handler (executions, duration, fire lag, retries), per domain (the same
runs' ends, fire lag and dead letters; the runs in flight; the fire-lag objective), for the
engine, and the process's own (build, CPU, memory, file descriptors).

Each engine gets its own registry, so tests and two engines in one process never share counts.

A `domain` label takes as many values as there are domains: their names follow a strict rule
(scheduler/domains.py), and a domain is a team or tenant, not a job, so the series stay few.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tickd.scheduler.ports.store_operations import STORE_OPERATIONS

# The help text of every metric with a domain label says how far it spreads.
BY_DOMAIN = "; by domain, whose names follow a strict rule: as many values as domains, not jobs"

# Fire lag is what users feel: most runs should start within milliseconds of their time.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


class StoreOperationsCollector(Collector):
    """The process's store round trips, read at each scrape
    (scheduler/ports/store_operations.py)."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "tickd_store_operations",
            "Round trips to the stores: MongoDB commands sent, SQLite transactions",
            labels=["backend", "operation"],
        )
        for (backend, operation), count in sorted(STORE_OPERATIONS.snapshot().items()):
            family.add_metric([backend, operation], count)
        yield family


class RunsInFlightCollector(Collector):
    """Each domain's runs in flight on this instance, read at each scrape from the engine's
    ledger (armed, recorded, queued or running: what a domain's max_running counts); none
    until an engine tells it where to read."""

    def __init__(self) -> None:
        self._read: Callable[[], Mapping[str, int]] = dict

    def read_from(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "tickd_runs_in_flight",
            "Runs this instance holds armed, recorded, queued or running" + BY_DOMAIN,
            labels=["domain"],
        )
        for domain, count in sorted(self._read().items()):
            family.add_metric([domain], count)
        yield family


def tickd_version() -> str:
    try:
        return version("tickd")
    except PackageNotFoundError:
        return "0"


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        r.register(StoreOperationsCollector())
        ProcessCollector(registry=r)  # process_*: CPU, resident memory, open files, start time
        PlatformCollector(registry=r)  # python_info
        self.build = Info("tickd_build", "The running tickd: its version and Python's", registry=r)
        self.build.info({"version": tickd_version(), "python_version": platform.python_version()})
        self.executions = Counter(
            "tickd_executions",
            "Finished executions" + BY_DOMAIN,
            ["handler", "status", "domain"],
            registry=r,
        )
        self.duration = Histogram(
            "tickd_execution_duration_seconds",
            "Run time of an execution, retries included",
            ["handler"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.fire_lag = Histogram(
            "tickd_fire_lag_seconds",
            "Handler start minus the time the occurrence was due, for the first start of a "
            "scheduled occurrence only" + BY_DOMAIN,
            ["handler", "priority", "domain"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.request_wait = Histogram(
            "tickd_request_wait_seconds",
            "Handler start minus the time a requested run could start (its request's "
            "not_before): triggers, retries, backfills, re-drives of dead letters",
            ["handler", "kind"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.retries = Counter("tickd_retries", "Attempts after the first", ["handler"], registry=r)
        # Of the partitions this instance holds: the sum over instances is the store's backlog.
        self.due_backlog = Gauge(
            "tickd_due_backlog",
            "Jobs due and not yet running, in the partitions this instance holds",
            registry=r,
        )
        self.oldest_due_age = Gauge(
            "tickd_oldest_due_age_seconds",
            "How long the longest-waiting due job, not yet running, in the partitions this "
            "instance holds, has been due",
            registry=r,
        )
        self.batch_size = Histogram(
            "tickd_batch_size",
            "Jobs claimed per dispatcher batch",
            buckets=(0, 1, 5, 10, 25, 50, 100, 250, 500),
            registry=r,
        )
        self.busy_workers = Gauge("tickd_busy_workers", "Workers running a task", registry=r)
        self.runs_in_flight = RunsInFlightCollector()
        r.register(self.runs_in_flight)
        self.lock_contention = Counter(
            "tickd_lock_contention",
            "Due jobs skipped because another runner held the lock",
            registry=r,
        )
        self.claims_lost = Counter(
            "tickd_claims_lost",
            "Due jobs changed or claimed elsewhere before our claim",
            registry=r,
        )
        self.fenced = Counter(
            "tickd_fenced_runs", "Runs whose lease was taken over before they finished", registry=r
        )
        self.events_failed = Counter(
            "tickd_events_failed", "Events that could not be handed to the publisher", registry=r
        )
        self.events_delivered = Counter(
            "tickd_events_delivered", "Events the broker acknowledged", registry=r
        )
        self.events_dropped = Counter(
            "tickd_events_dropped",
            "Events given up on: queue_full (local bound reached), delivery_failed (never "
            "acknowledged in time, or still pending at shutdown), closed (published after close)",
            ["reason"],
            registry=r,
        )
        self.outbox_backlog = Gauge(
            "tickd_outbox_backlog", "Execution events in the outbox not yet delivered", registry=r
        )
        self.outbox_oldest_unsent_age = Gauge(
            "tickd_outbox_oldest_unsent_age_seconds",
            "How long the oldest undelivered event has waited in the outbox (0: none)",
            registry=r,
        )
        self.store_errors = Counter(
            "tickd_store_errors", "Store operations that failed", ["operation"], registry=r
        )
        self.leases_reaped = Counter(
            "tickd_leases_reaped",
            "Expired leases cleared; their executions marked abandoned",
            registry=r,
        )
        self.misfires = Counter(
            "tickd_misfired_occurrences",
            "Occurrences missed by more than the grace period",
            ["handler", "policy"],
            registry=r,
        )
        self.stuck_handlers = Counter(
            "tickd_stuck_handlers",
            "Handlers still running after cancellation at their deadline",
            ["handler"],
            registry=r,
        )
        self.loop_stalls = Counter(
            "tickd_loop_stalls",
            "Times the event loop was blocked longer than loop_stall_threshold_seconds",
            registry=r,
        )
        self.loop_stall_seconds = Histogram(
            "tickd_loop_stall_seconds",
            "How long the event loop was blocked, per stall over the threshold",
            buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.clock_steps_back = Counter(
            "tickd_clock_steps_back",
            "Times the wall clock stepped back against real time (NTP, a restored VM)",
            registry=r,
        )
        self.rescheduled_after_clock_step = Counter(
            "tickd_rescheduled_after_clock_step",
            "Next runs moved back to the wall clock after it stepped back",
            registry=r,
        )
        self.breaker_trips = Counter(
            "tickd_circuit_breaker_trips",
            "Jobs paused by the circuit breaker",
            ["handler"],
            registry=r,
        )
        self.pruned = Counter(
            "tickd_pruned",
            "Rows deleted by retention: executions, changes (history entries)",
            ["kind"],
            registry=r,
        )
        self.partitions_owned = Gauge(
            "tickd_partitions_owned",
            "Partitions of the due queue this instance holds (it reads due jobs only in those)",
            registry=r,
        )
        self.partition_epoch = Gauge(
            "tickd_partition_epoch",
            "Highest epoch of the partitions held (each change of a partition's owner raises it)",
            registry=r,
        )
        self.partition_moves = Counter(
            "tickd_partition_moves",
            "Partitions this instance took or freed (or lost) as instances came and went",
            ["direction"],
            registry=r,
        )
        self.dead_letters = Gauge(
            "tickd_dead_letters",
            "Open dead letters (runs that failed for good, not yet re-driven or discarded)"
            + BY_DOMAIN
            + " (empty for a deleted job's)",
            ["handler", "domain"],
            registry=r,
        )
        self.dead_lettered = Counter(
            "tickd_runs_dead_lettered",
            "Runs that failed for good and became dead letters, open or re-driven by their job's "
            "policy (those the reaper ends for good are in tickd_dead_letters only)" + BY_DOMAIN,
            ["handler", "domain"],
            registry=r,
        )
        self.lag_objective = Gauge(
            "tickd_domain_lag_objective_seconds",
            "A domain's p99 fire-lag objective (lag_objective_seconds of its stored settings), "
            "for the domains that set one" + BY_DOMAIN,
            ["domain"],
            registry=r,
        )
