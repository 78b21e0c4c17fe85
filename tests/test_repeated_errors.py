"""An error that keeps coming back (a store refusing every write) is logged with its traceback
once, then once a minute at most with a count of the repeats, never once per occurrence. Time is
an injected clock."""

from __future__ import annotations

import logging

import pytest

from tickd.scheduler.logs import RepeatedErrors, TextFormatter
from tickd.scheduler.store.kit import StoreError

LOG = logging.getLogger("tickd.storage.test")


def test_an_error_repeated_532_times_in_a_minute_logs_one_traceback_then_one_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    errors = RepeatedErrors(LOG, interval_seconds=60.0, monotonic=lambda: now[0])
    full = StoreError("sqlite: database or disk is full")
    with caplog.at_level(logging.INFO, logger=LOG.name):
        errors.error("store.refused", full)
        for _ in range(532):
            now[0] += 0.1
            errors.error("store.refused", full)
        now[0] = 60.0
        errors.error("store.refused", full)

    assert len(caplog.records) == 2
    first, later = caplog.records
    assert first.exc_info is not None, "the first one with its traceback"
    assert later.exc_info is None
    line = TextFormatter().format(later)
    assert "more_like_it=532" in line and "in_last_seconds=60" in line, line
    assert "database or disk is full" in line


def test_each_distinct_error_is_logged_once_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors = RepeatedErrors(LOG, monotonic=lambda: 0.0)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        for _ in range(3):
            errors.error("store.refused", StoreError("sqlite: database or disk is full"))
            errors.error("store.refused", StoreError("mongodb insert: connection refused"))
            errors.error("store.refused", OSError("sqlite: database or disk is full"))
    assert [r.exc_info is not None for r in caplog.records] == [True, True, True]
