"""The log observer: a run that went well is one line at DEBUG, a summary at INFO says how many
ended how (a busy second's when it ends, quieter ones a minute at a time), and a run that did not
go well keeps a line of its own at INFO."""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.logs import FIELDS
from tickd.scheduler.model import Execution, ExecutionError, Job, Status
from tickd.scheduler.observers.logs import BUSY_RUNS, LogObserver
from tickd.scheduler.ports.clock import FakeClock


class Alarms:
    """`call_later` on a FakeClock: `advance` moves the clock on, ringing each alarm at its
    time, in order, as the event loop would."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._armed: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        at = self.clock.monotonic() + delay
        heapq.heappush(self._armed, (at, next(self._order), callback))

    def advance(self, seconds: float) -> None:
        until = self.clock.monotonic() + seconds
        while self._armed and self._armed[0][0] <= until:
            at, _, callback = heapq.heappop(self._armed)
            self.clock.advance(at - self.clock.monotonic())
            callback()
        self.clock.advance(until - self.clock.monotonic())


@pytest.fixture
def alarms() -> Alarms:
    return Alarms(FakeClock(T0))


def observer_on(alarms: Alarms) -> LogObserver:
    return LogObserver(clock=alarms.clock, call_later=alarms.call_later)


def summaries(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        getattr(r, FIELDS)
        for r in caplog.records
        if r.getMessage() == "runs.summary" and r.levelno == logging.INFO
    ]


def end_runs(observer: LogObserver, job: Job, count: int, status: Status = Status.SUCCESS) -> None:
    for _ in range(count):
        observer.finished(job, ended(status))


def ended(status: Status) -> Execution:
    error = None if status is Status.SUCCESS else ExecutionError(type="Boom", message="no")
    return Execution(
        job_id="j", job_name="job", handler="noop", scheduled_at=T0, status=status, error=error
    )


def test_runs_that_went_well_are_counted_at_info_and_told_one_by_one_only_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = LogObserver(summary_every_seconds=3600)
    job = make_job()
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        for _ in range(50):
            observer.finished(job, ended(Status.SUCCESS))
        observer.finished(job, ended(Status.FAILED))
    assert [r.getMessage() for r in caplog.records] == ["run.finished"]
    assert caplog.records[0].levelno == logging.INFO, "the failed run has its own line"


def test_a_busy_seconds_summary_is_written_when_the_second_ends_with_no_run_after_it(
    alarms: Alarms, caplog: pytest.LogCaptureFixture
) -> None:
    observer, job = observer_on(alarms), make_job()
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        end_runs(observer, job, 500)
        end_runs(observer, job, 3, Status.FAILED)
        alarms.advance(0.999)
        assert summaries(caplog) == [], "the second is not over"
        alarms.advance(0.001)
    assert summaries(caplog) == [{"seconds": 1.0, "ended": {"success": 500, "failed": 3}}]


def test_a_daemon_whose_jobs_tick_along_writes_a_summary_a_minute_and_none_when_idle(
    alarms: Alarms, caplog: pytest.LogCaptureFixture
) -> None:
    observer, job = observer_on(alarms), make_job()
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        for _ in range(300):  # ten minutes of a heartbeat every two seconds
            end_runs(observer, job, 1)
            alarms.advance(2)
        alarms.advance(600)  # then ten minutes with no run at all
    written = summaries(caplog)
    assert len(written) == 10
    assert sum(s["ended"]["success"] for s in written) == 300
    assert {s["seconds"] for s in written} == {60.0}


def test_runs_in_windows_still_open_are_summarised_when_the_engine_stops(
    alarms: Alarms, caplog: pytest.LogCaptureFixture
) -> None:
    observer, job = observer_on(alarms), make_job()
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        end_runs(observer, job, 2)
        alarms.advance(5)  # a quiet second, now in the minute's window
        end_runs(observer, job, 1, Status.FAILED)
        observer.stopped()
        alarms.advance(120)  # the timers the process would not live to hear
    assert [s["ended"] for s in summaries(caplog)] == [{"success": 2, "failed": 1}]


def test_a_busy_second_open_at_the_stop_has_its_own_summary(
    alarms: Alarms, caplog: pytest.LogCaptureFixture
) -> None:
    observer, job = observer_on(alarms), make_job()
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        end_runs(observer, job, 1)
        alarms.advance(5)
        end_runs(observer, job, BUSY_RUNS + 1)
        observer.stopped()
    assert [s["ended"] for s in summaries(caplog)] == [{"success": 1}, {"success": BUSY_RUNS + 1}]


def test_a_burst_in_a_quiet_minute_is_told_second_by_second_and_the_rest_by_the_minute(
    alarms: Alarms, caplog: pytest.LogCaptureFixture
) -> None:
    observer, job = observer_on(alarms), make_job()
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        end_runs(observer, job, 1)
        alarms.advance(10)
        end_runs(observer, job, BUSY_RUNS + 1)
        alarms.advance(1)
        end_runs(observer, job, BUSY_RUNS + 2)
        alarms.advance(60)
    assert [s["ended"] for s in summaries(caplog)] == [
        {"success": BUSY_RUNS + 1},
        {"success": BUSY_RUNS + 2},
        {"success": 1},
    ]


def test_without_a_timer_a_window_closes_at_the_first_run_end_past_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, job = FakeClock(T0), make_job()
    observer = LogObserver(clock=clock, call_later=lambda delay, callback: None)
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        end_runs(observer, job, BUSY_RUNS + 1)
        clock.advance(1)
        end_runs(observer, job, 1)
    assert [s["ended"] for s in summaries(caplog)] == [{"success": BUSY_RUNS + 1}]
