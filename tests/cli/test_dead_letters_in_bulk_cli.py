"""Why a run failed, where the CLI lists runs (an ERROR column, a handler's text made safe for
a terminal), and dead letters in bulk: several discarded at once, all that match, and identical
errors counted."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from tests.api.test_cli import Live
from tests.api.test_dead_letters_api import failed_for_good
from tests.conftest import make_job
from tickd.cli.runs import follow_line
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job
from tickd.scheduler.ports.backends import ExecutionQuery

REFUSED = ExecutionError(type="ConnectionError", message="upstream refused the connection")
HOSTILE = ExecutionError(
    type="ValueError",
    message="bad row \x1b[2J\x1b]0;pwned\x07 in the \u202eexport\nTraceback follows\nmore",
)
LONG = ExecutionError(type="RuntimeError", message="the vendor said: " + "very " * 40 + "long")


async def dead_letters_of(live: Live, name: str, errors: list[ExecutionError]) -> list[Execution]:
    job: Job = make_job(name, "boom")
    await live.store.insert_job(job)
    now = live.clock.now()
    runs = [
        replace(failed_for_good(job, now - timedelta(minutes=1 + i)), error=error)
        for i, error in enumerate(errors)
    ]
    await live.store.insert_executions(runs)
    return runs


async def test_dead_letters_list_has_an_error_column_with_the_type_and_first_line(
    live: Live,
) -> None:
    await dead_letters_of(live, "export", [REFUSED])
    run = await live.tickd("dead-letters", "list")
    assert run.code == 0, run.err
    header, row = run.out.splitlines()
    assert header.split()[-1] == "ERROR"
    assert row.endswith("ConnectionError: upstream refused the connection")
    assert row.index("ConnectionError") == header.index("ERROR")


async def test_a_handlers_error_cannot_drive_the_terminal_and_is_cut_to_a_readable_width(
    live: Live,
) -> None:
    await dead_letters_of(live, "export", [HOSTILE, LONG])
    for command in (("dead-letters", "list"), ("executions", "list")):
        run = await live.tickd(*command)
        assert run.code == 0, run.err
        assert "\x1b" not in run.out and "\x07" not in run.out and "\u202e" not in run.out
        header, hostile, long = run.out.splitlines()
        assert "ValueError: bad row \\x1b[2J\\x1b]0;pwned\\x07 in the \\u202eex…" in hostile
        assert "Traceback follows" not in run.out, "the first line only"
        assert long.endswith("very ver…") and len(long) - header.index("ERROR") == 60


async def test_executions_list_says_why_each_failed_run_failed(live: Live) -> None:
    [failed] = await dead_letters_of(live, "export", [REFUSED])
    run = await live.tickd("executions", "list", "--status", "failed")
    assert run.code == 0, run.err
    header, row = run.out.splitlines()
    assert row.startswith(failed.id) and header.rstrip().endswith("ERROR")
    assert "ConnectionError: upstream refused the connection" in row


async def test_several_dead_letters_are_discarded_at_once(live: Live) -> None:
    runs = await dead_letters_of(live, "export", [REFUSED] * 3)
    run = await live.tickd("dead-letters", "discard", runs[0].id, runs[1].id, "nope")
    assert run.code == 0, run.err
    assert run.out.splitlines()[0] == "Discarded 2 dead letters."
    assert "skipped nope: not a dead letter the filter matches to discard" in run.out
    left = await live.store.list_executions(ExecutionQuery(dead_letter=DeadLetter.OPEN))
    assert [e.id for e in left] == [runs[2].id]


async def test_discard_all_takes_the_list_filters_and_the_error_type(live: Live) -> None:
    expired = ExecutionError(type="HTTPError", message="401 token expired")
    runs = await dead_letters_of(live, "export", [REFUSED, expired, REFUSED])
    run = await live.tickd(
        "dead-letters", "discard", "--all", "--job", "export", "--error-type", "ConnectionError"
    )
    assert (run.code, run.out.strip()) == (0, "Discarded 2 dead letters."), run.err
    left = await live.store.list_executions(ExecutionQuery(dead_letter=DeadLetter.OPEN))
    assert [e.id for e in left] == [runs[1].id]

    as_json = await live.tickd("dead-letters", "discard", "--all", "--json")
    assert json.loads(as_json.out) == {
        "discarded": [runs[1].id],
        "count": 1,
        "skipped": [],
        "more": False,
    }


async def test_discard_asks_for_ids_or_all_and_changes_nothing_otherwise(live: Live) -> None:
    runs = await dead_letters_of(live, "export", [REFUSED])
    nothing = await live.tickd("dead-letters", "discard")
    assert nothing.code == 2 and "--all" in nothing.err
    both = await live.tickd("dead-letters", "discard", runs[0].id, "--all")
    assert both.code == 2 and "not both" in both.err
    mixed = await live.tickd("dead-letters", "discard", runs[0].id, "--handler", "boom")
    assert mixed.code == 2
    assert len(await live.store.list_executions(ExecutionQuery(dead_letter=DeadLetter.OPEN))) == 1


async def test_list_group_counts_identical_errors_the_largest_first(live: Live) -> None:
    expired = ExecutionError(type="HTTPError", message="401 token expired\nrequest id 7f3a")
    await dead_letters_of(live, "export", [expired, REFUSED, expired, expired])
    run = await live.tickd("dead-letters", "list", "--group")
    assert run.code == 0, run.err
    header, *rows = run.out.splitlines()
    assert header.split() == ["COUNT", "JOB", "NEWEST", "ERROR"]
    errors = [row[header.index("ERROR") :] for row in rows]
    assert [(r.split()[0], error) for r, error in zip(rows, errors, strict=True)] == [
        ("3", "HTTPError: 401 token expired"),
        ("1", "ConnectionError: upstream refused the connection"),
    ]


def test_follow_prints_each_ended_runs_error_after_its_row_escaped_for_the_terminal() -> None:
    ended = {
        "id": "r1",
        "job_name": "export",
        "status": "failed",
        "scheduled_at": "2026-03-02T10:00:00Z",
        "duration_ms": 12.0,
        "attempts": 1,
        "error": {"type": HOSTILE.type, "message": HOSTILE.message},
    }
    line = follow_line(ended, as_json=False)
    assert line.startswith("r1  export  failed  ")
    assert "  12ms  1  ValueError: bad row \\x1b[2J" in line
    assert "\x1b" not in line and "Traceback follows" not in line
