"""The log observer: a run that went well is one line at DEBUG, a summary at INFO says how many
ended how, and a run that did not go well keeps a line of its own at INFO."""

from __future__ import annotations

import logging

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.logs import FIELDS
from tickd.scheduler.model import Execution, ExecutionError, Status
from tickd.scheduler.observers.logs import LogObserver


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


def test_the_summary_says_how_many_ended_how(caplog: pytest.LogCaptureFixture) -> None:
    observer = LogObserver(summary_every_seconds=0)
    job = make_job()
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        observer.finished(job, ended(Status.SUCCESS))
    [summary] = [r for r in caplog.records if r.getMessage() == "runs.summary"]
    assert summary.__dict__[FIELDS]["ended"] == {"success": 1}
