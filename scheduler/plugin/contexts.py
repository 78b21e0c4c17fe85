"""The context each run's handler gets: its job, occurrence, attempt and deadline, a logger that
masks the run's secrets and keeps the first lines for the run's record (RunLog), and what every
run of the handler shares (its settings, its declared resources, the clock, the mailer, one
SSRF-safe HTTP session), made once per handler as read-only mappings, so that no run changes
what the next one sees."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

import aiohttp

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.logs import FIELDS
from tickd.scheduler.model import Execution, Job, LogLine
from tickd.scheduler.plugin.api import Handler, HandlerContext
from tickd.scheduler.plugin.http import safe_client_session
from tickd.scheduler.plugin.outcomes import storable_text
from tickd.scheduler.ports.backends import Mailer
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.secrets.echoes import EchoMaskingLogger
from tickd.scheduler.secrets.masking import scrub_text

# A run's record keeps this many of the lines its handler logged, each cut to this length: the
# run page shows them; the daemon's log has them all.
KEPT_LOG_LINES = 50
KEPT_LOG_CHARS = 1000


@dataclass(kw_only=True)
class RunLog:
    """The lines a run's handler logs, across its attempts: the first KEPT_LOG_LINES, masked
    (the run's secrets and credentials in text) and cut; how many more there were."""

    lines: list[LogLine] = field(default_factory=list)
    dropped: int = 0

    def keep(self, at: datetime, level: int, message: str) -> None:
        if len(self.lines) >= KEPT_LOG_LINES:
            self.dropped += 1
            return
        text = storable_text(scrub_text(message))
        if len(text) > KEPT_LOG_CHARS:
            text = text[: KEPT_LOG_CHARS - 1] + "…"
        self.lines.append(LogLine(at=at, level=logging.getLevelName(level), message=text))

    def kept(self) -> tuple[LogLine, ...]:
        if not self.dropped:
            return tuple(self.lines)
        more = f"{self.dropped} more lines not kept (the daemon's log has them)"
        return (*self.lines, LogLine(at=self.lines[-1].at, level="INFO", message=more))


class RunLogger(EchoMaskingLogger):
    """A handler's ctx.logger: each line masked as EchoMaskingLogger does, written to the
    daemon's log (at its level), and kept for the run's record."""

    def __init__(
        self,
        logger: logging.Logger,
        extra: Mapping[str, object],
        secrets: Collection[str],
        *,
        run_log: RunLog,
        clock: Clock,
    ) -> None:
        super().__init__(logger, extra, secrets)
        self.run_log = run_log
        self.clock = clock

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        super().log(level, msg, *args, **kwargs)
        # INFO and above whatever the daemon's level: the run page is where a handler's
        # author looks; DEBUG only when the daemon logs it.
        if level >= logging.INFO or self.isEnabledFor(level):
            line = logging.LogRecord(self.logger.name, level, "", 0, msg, args, None)
            with contextlib.suppress(Exception):  # a bad format string: logging reports it
                self.run_log.keep(self.clock.now(), level, self.masked(line.getMessage()))


@dataclass(frozen=True, kw_only=True)
class _Shared:
    """What every run's context of one handler shares, and the handler it was made for."""

    handler: Handler
    config: Mapping[str, Any]
    resources: Mapping[str, object]


class HandlerContexts:
    def __init__(
        self,
        *,
        settings: Settings,
        clock: Clock,
        mailer: Mailer,
        resources: Mapping[str, object],
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._mailer = mailer
        # Opened by the daemon, by name: each run sees those its handler declared.
        self._resources = resources
        # One SSRF-safe HTTP session for all handlers, opened on first use (inside the loop).
        self._http: aiohttp.ClientSession | None = None
        self._logs: dict[str, logging.Logger] = {}
        self._configs: dict[str, Mapping[str, Any]] = {}
        self._shared: dict[str, _Shared] = {}  # by handler name

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def context(
        self,
        job: Job,
        execution: Execution,
        handler: Handler,
        *,
        attempt: int,
        deadline: datetime,
        secrets: list[str],
        run_log: RunLog,
    ) -> HandlerContext:
        fields = {"job": job.name, "execution": execution.id, "attempt": attempt}
        if execution.shards > 1:
            fields["shard"] = execution.shard
        shared = self._shared_by(job.handler, handler)
        return HandlerContext(
            job_id=job.id,
            job_name=job.name,
            params=job.params,
            scheduled_at=execution.scheduled_at,
            attempt=attempt,
            deadline=deadline,
            idempotency_key=execution.idempotency_key,
            logger=RunLogger(
                self._log(job.handler),
                {FIELDS: fields},
                secrets,
                run_log=run_log,
                clock=self._clock,
            ),
            clock=self._clock,
            mailer=self._mailer,
            http=self._http_session(),
            config=shared.config,
            resources=shared.resources,
            shard=execution.shard,
            shards=execution.shards,
        )

    def config(self, handler: str) -> Mapping[str, Any]:
        """The handler's settings, read-only: one mapping serves every run of the handler."""
        if handler not in self._configs:
            table = self._settings.handler_settings.get(handler, {})
            self._configs[handler] = MappingProxyType(dict(table))
        return self._configs[handler]

    def _shared_by(self, name: str, handler: Handler) -> _Shared:
        known = self._shared.get(name)
        if known is None or known.handler is not handler:  # first run, or registered anew
            resources = {
                r.name: self._resources[r.name]
                for r in handler.resources
                if r.name in self._resources
            }
            known = self._shared[name] = _Shared(
                handler=handler,
                config=self.config(name),
                resources=MappingProxyType(resources),
            )
        return known

    def _log(self, handler: str) -> logging.Logger:
        # logging.getLogger takes the logging module's lock: once per handler, not per run.
        if handler not in self._logs:
            self._logs[handler] = logging.getLogger(f"tickd.handler.{handler}")
        return self._logs[handler]

    def _http_session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = safe_client_session(
                allow=self._settings.http_allow, ports=self._settings.http_allowed_ports
            )
        return self._http
