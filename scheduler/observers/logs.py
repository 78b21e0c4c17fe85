"""Structured log lines of a run's life (scheduler/logs.py formats and masks).

A run that ends well is one line at DEBUG. At INFO, `runs.summary` says how many runs ended how:
a busy second (more than `busy_runs` ended in it) has a summary of its own, written by a timer
when the second ends, not when the next run ends; quieter seconds add up to one summary a
minute; and while nothing ends, nothing is written. So a burst of thousands of runs a second is
not limited by its own log, its last second is told as soon as it is over, and a daemon whose
jobs tick along writes a line a minute. Runs that fail, time out or are given up, and everything
unusual, keep a line each: its error's type and the first line of its message, cut to
`ERROR_LINE_CHARS` (the record keeps it whole), and its dead letter when it failed for good. The
message is masked where the run ended (plugin/outcomes.py) and again as the line is written
(scheduler/logs.py); it is cut only after masking, so no secret is left half shown."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tickd.scheduler.logs import log_event
from tickd.scheduler.model import Execution, Job, Status
from tickd.scheduler.observers import RunObserver
from tickd.scheduler.ports.clock import Clock, SystemClock
from tickd.scheduler.secrets.masking import scrub_text

log = logging.getLogger("tickd.runner")


SUMMARY_EVERY_SECONDS = 1.0
QUIET_SUMMARY_EVERY_SECONDS = 60.0
# More runs than this ending in one second make it busy: summarised on its own.
BUSY_RUNS = 10

# The error's first line in a log line is cut to this many characters, an ellipsis marking the cut.
ERROR_LINE_CHARS = 200

# Calls the callback after a delay in seconds, as `loop.call_later` does.
CallLater = Callable[[float, Callable[[], None]], object]


def call_later_on_loop(delay: float, callback: Callable[[], None]) -> object:
    """`call_later` on the running loop. Outside one (hooks called directly, as some tests do)
    nothing is armed: a window then closes at the first run's end past it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_later(delay, callback)


@dataclass
class Window:
    """Runs that ended from `started` on (monotonic seconds), by status, for `length` seconds."""

    started: float
    length: float
    ended: Counter[str] = field(default_factory=Counter)

    def over(self, now: float) -> bool:
        return now - self.started >= self.length

    def runs(self) -> int:
        return sum(self.ended.values())


class LogObserver(RunObserver):
    def __init__(
        self,
        *,
        clock: Clock | None = None,
        call_later: CallLater = call_later_on_loop,
        summary_every_seconds: float = SUMMARY_EVERY_SECONDS,
        quiet_summary_every_seconds: float = QUIET_SUMMARY_EVERY_SECONDS,
        busy_runs: int = BUSY_RUNS,
    ) -> None:
        self._clock = clock or SystemClock()
        self._call_later = call_later
        self._every = summary_every_seconds
        self._quiet_every = quiet_summary_every_seconds
        self._busy_runs = busy_runs
        self._second: Window | None = None  # open from the first run's end after a close
        self._quiet: Window | None = None  # open from the first quiet second's start

    def retrying(
        self, job: Job, execution: Execution, attempt: int, delay_seconds: float, error: str | None
    ) -> None:
        log_event(
            log,
            "run.retry",
            job=job.name,
            attempt=attempt,
            delay_seconds=delay_seconds,
            error=error,
        )

    def unknown_handler(self, job: Job) -> None:
        log_event(
            log, "run.unknown_handler", level=logging.WARNING, job=job.name, handler=job.handler
        )

    def stuck(self, job: Job) -> None:
        log_event(log, "run.handler_ignores_deadline", level=logging.ERROR, job=job.name)

    def not_started(self, job: Job, error: str) -> None:
        log_event(log, "run.not_started", level=logging.WARNING, job=job.name, error=error)

    def fenced(self, job: Job, execution: Execution, *, before_start: bool) -> None:
        name = "run.fenced_before_start" if before_start else "run.fenced"
        log_event(log, name, level=logging.WARNING, job=job.name, execution=execution.id)

    def finished(self, job: Job, execution: Execution) -> None:
        self._count(str(execution.status))
        level = (
            logging.DEBUG if execution.status in (Status.SUCCESS, Status.SKIPPED) else logging.INFO
        )
        if not log.isEnabledFor(level):
            return  # not even the line's fields made: a run that ends well, in a burst
        log_event(
            log,
            "run.finished",
            level=level,
            job=job.name,
            execution=execution.id,
            status=str(execution.status),
            attempts=execution.attempts,
            duration_ms=execution.duration_ms,
            **error_fields(execution),
        )

    def stopped(self) -> None:
        """The runs counted in windows still open are summarised now: their timers would ring
        after the process has gone, and those runs would be in no summary."""
        second, quiet = self._second, self._quiet
        self._second = self._quiet = None
        if quiet is not None and second is not None and second.runs() <= self._busy_runs:
            quiet.ended.update(second.ended)
            second = None
        for window in (quiet, second):
            if window is not None:
                self._summarise(window)

    def _count(self, status: str) -> None:
        now = self._clock.monotonic()
        self._close_windows_over(now)
        if self._second is None:
            self._second = self._open(now, self._every, self._close_second)
        self._second.ended[status] += 1

    def _close_windows_over(self, now: float) -> None:
        """Close what a late timer (a loop busy past it) or none (no loop) left open."""
        if self._second is not None and self._second.over(now):
            self._close_second(self._second)
        if self._quiet is not None and self._quiet.over(now):
            self._close_quiet(self._quiet)

    def _open(self, started: float, length: float, close: Callable[[Window], None]) -> Window:
        window = Window(started=started, length=length)
        delay = max(0.0, started + length - self._clock.monotonic())
        self._call_later(delay, lambda: close(window))
        return window

    def _close_second(self, second: Window) -> None:
        if second is not self._second:
            return  # closed already, by a run's end after its time
        self._second = None
        if second.runs() > self._busy_runs:
            self._summarise(second)
            return
        if self._quiet is None:
            self._quiet = self._open(second.started, self._quiet_every, self._close_quiet)
        self._quiet.ended.update(second.ended)

    def _close_quiet(self, quiet: Window) -> None:
        if quiet is self._quiet:
            self._quiet = None
            self._summarise(quiet)

    def _summarise(self, window: Window) -> None:
        seconds = round(self._clock.monotonic() - window.started, 3)
        log_event(log, "runs.summary", seconds=seconds, ended=dict(window.ended))

    def not_recorded(self, job: Job, execution: Execution, error: str) -> None:
        log_event(
            log,
            "run.finish_not_recorded",
            level=logging.ERROR,
            job=job.name,
            execution=execution.id,
            error=error,
        )

    def paused(self, job: Job, reason: str) -> None:
        log_event(log, "job.paused", level=logging.WARNING, job=job.name, reason=reason)

    def reaped(self, execution: Execution) -> None:
        log_event(
            log,
            "lease.reaped",
            level=logging.WARNING,
            job=execution.job_name,
            execution=execution.id,
            owner=execution.owner,
            **error_fields(execution),
        )


def error_fields(execution: Execution) -> dict[str, str]:
    """What a log line says of a run's error: its type, the first line of its message (masked,
    then cut) and, for a run that failed for good, its dead letter's state; nothing for a run
    without an error."""
    fields: dict[str, str] = {}
    if execution.error is not None:
        fields["error_type"] = execution.error.type
        fields["error"] = error_line(execution.error.message)
    if execution.dead_letter is not None:
        fields["dead_letter"] = str(execution.dead_letter)
    return fields


def error_line(message: str, width: int = ERROR_LINE_CHARS) -> str:
    """The first non-blank line of a message, masked, at most `width` characters."""
    lines = [line.strip() for line in scrub_text(message).splitlines()]
    first = next((line for line in lines if line), "")
    return first if len(first) <= width else first[: width - 1] + "…"
