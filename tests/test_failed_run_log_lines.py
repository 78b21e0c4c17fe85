"""A failed run's log line says why it failed: the error's type and the first line of its
message, cut to a readable width and masked, and whether the run is a dead letter now."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.logs import FIELDS, TextFormatter
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Status
from tickd.scheduler.observers.logs import ERROR_LINE_CHARS, LogObserver


def failed(
    status: Status, error: ExecutionError, dead_letter: DeadLetter | None = None
) -> Execution:
    return Execution(
        job_id="j",
        job_name="nightly-export",
        handler="webhook",
        scheduled_at=T0,
        status=status,
        error=error,
        dead_letter=dead_letter,
    )


def finished_line(
    caplog: pytest.LogCaptureFixture, execution: Execution
) -> tuple[dict[str, Any], str]:
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        LogObserver(summary_every_seconds=3600).finished(make_job(), execution)
    [record] = [r for r in caplog.records if r.getMessage() == "run.finished"]
    return getattr(record, FIELDS), TextFormatter().format(record)


def test_a_failed_runs_line_names_the_error_type_and_the_first_line_of_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = ExecutionError(
        type="ConnectionError",
        message="upstream refused the connection\nretry budget: 3\ncontext: far too long",
    )
    fields, line = finished_line(caplog, failed(Status.FAILED, error))
    assert fields["error_type"] == "ConnectionError"
    assert fields["error"] == "upstream refused the connection"
    assert "error_type=ConnectionError" in line
    assert "retry budget" not in line, "one line per run, not the whole message"


def test_a_long_first_line_is_cut_to_a_readable_width_with_an_ellipsis(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = ExecutionError(type="ValueError", message="x" * 5000)
    fields, _ = finished_line(caplog, failed(Status.FAILED, error))
    assert len(fields["error"]) == ERROR_LINE_CHARS and fields["error"].endswith("…")


def test_a_secret_in_the_message_is_masked_before_the_cut_never_half_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "s3cr3t-" + "k" * 300
    error = ExecutionError(type="HTTPError", message=f"GET https://api.example/?token={secret}")
    fields, line = finished_line(caplog, failed(Status.FAILED, error))
    assert "s3cr3t" not in line and "s3cr3t" not in fields["error"]
    assert "token=***" in fields["error"]


@pytest.mark.parametrize(
    ("status", "kind"),
    [(Status.TIMEOUT, "Timeout"), (Status.ABANDONED, "Abandoned")],
)
def test_a_run_that_failed_for_good_says_it_is_a_dead_letter(
    caplog: pytest.LogCaptureFixture, status: Status, kind: str
) -> None:
    error = ExecutionError(type=kind, message="the run was given up")
    fields, line = finished_line(caplog, failed(status, error, DeadLetter.OPEN))
    assert (fields["error_type"], fields["dead_letter"]) == (kind, "open")
    assert "dead_letter=open" in line


def test_a_reaped_runs_line_names_its_error_when_it_has_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = ExecutionError(type="Abandoned", message="the run was abandoned 3 times")
    with caplog.at_level(logging.INFO, logger="tickd.runner"):
        LogObserver().reaped(failed(Status.ABANDONED, error, DeadLetter.OPEN))
    [record] = caplog.records
    assert getattr(record, FIELDS)["error_type"] == "Abandoned"
