"""A run's states, and each transition between them once: its name, the stage that makes it and
the function that does. docs/architecture.md draws this table (a test keeps the two equal).

A run's record in the store says less than its state in memory: from `recorded` until its end
is written, its execution's status is `running`; then the status is how it ended (RECORDED_AS).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RunState(enum.StrEnum):
    DUE = "due"  # its time came within the lookahead, or someone asked for it
    CLAIMED = "claimed"  # locked, and its job's lease taken (fenced by a token)
    ARMED = "armed"  # claimed ahead of its time: waiting on a timer in memory
    RECORDED = "recorded"  # its execution written `running`: staged until its time
    QUEUED = "queued"  # handed to the worker pool
    RUNNING = "running"  # its handler is running, with its retries
    ENDED = "ended"  # it has an outcome; its end waits for the next batch to the store
    COMPLETED = "completed"  # its end written: the record, the job's advance, the lock released
    SKIPPED = "skipped"  # an occurrence missed by more than its misfire grace: never run
    ABANDONED = "abandoned"  # its instance died or shut down before its end was written
    FENCED = "fenced"  # another instance took its job over: it does not run, or its end is void
    GIVEN_BACK = "given_back"  # claimed, never recorded: its lease and lock released


class Stage(enum.StrEnum):
    DISPATCH = "dispatch"  # dispatcher.py; run/: fetch, claim, arm, record, pool
    EXECUTE = "execute"  # run/execute.py; plugin/: contexts, outcomes, guards
    END = "end"  # run/end.py: the end worked out, handed to the writer
    WRITE = "write"  # run/write.py: ends written in batches
    MAINTENANCE = "maintenance"  # maintenance/: reaper, heartbeat, retention, relay


@dataclass(frozen=True, slots=True)
class Transition:
    source: RunState
    target: RunState
    name: str
    stage: Stage
    by: str  # the function that makes it: "module:Qualified.name" under tickd.scheduler


TRANSITIONS = (
    Transition(RunState.DUE, RunState.CLAIMED, "claim", Stage.DISPATCH, "run.claim:Claimer.claim"),
    Transition(RunState.CLAIMED, RunState.ARMED, "arm", Stage.DISPATCH, "run.arm:Arming.arm"),
    Transition(
        RunState.CLAIMED, RunState.RECORDED, "record", Stage.DISPATCH, "run.record:Recorder.record"
    ),
    Transition(
        RunState.CLAIMED, RunState.SKIPPED, "misfire", Stage.DISPATCH, "run.record:Recorder.record"
    ),
    Transition(RunState.ARMED, RunState.RECORDED, "fire", Stage.DISPATCH, "run.arm:Arming.fire"),
    Transition(
        RunState.ARMED,
        RunState.GIVEN_BACK,
        "give_back",
        Stage.DISPATCH,
        "run.claim:Claimer.give_back",
    ),
    Transition(
        RunState.RECORDED, RunState.QUEUED, "submit", Stage.DISPATCH, "run.pool:WorkerPool.submit"
    ),
    Transition(
        RunState.QUEUED, RunState.RUNNING, "start", Stage.EXECUTE, "run.execute:Executor.run"
    ),
    Transition(
        RunState.QUEUED,
        RunState.FENCED,
        "taken_over",
        Stage.EXECUTE,
        "run.execute:Executor._still_ours",
    ),
    Transition(
        RunState.QUEUED,
        RunState.ABANDONED,
        "not_started",
        Stage.DISPATCH,
        "dispatcher:Engine.shutdown",
    ),
    Transition(RunState.RUNNING, RunState.ENDED, "end", Stage.END, "run.end:Ender.hand_over"),
    Transition(
        RunState.RUNNING, RunState.ABANDONED, "shut_down", Stage.EXECUTE, "run.execute:Executor.run"
    ),
    Transition(
        RunState.ENDED, RunState.COMPLETED, "complete", Stage.WRITE, "run.write:Writer._write"
    ),
    Transition(
        RunState.ENDED,
        RunState.FENCED,
        "fenced_off",
        Stage.WRITE,
        "run.write:Writer._tell",
    ),
    Transition(
        RunState.RECORDED,
        RunState.ABANDONED,
        "reap",
        Stage.MAINTENANCE,
        "maintenance.reaper:Leases.reap_if_due",
    ),
)

# What the execution's record says in each state (`Status`, in scheduler/model.py).
RECORDED_AS: dict[RunState, str] = {
    RunState.RECORDED: "running",
    RunState.QUEUED: "running",
    RunState.RUNNING: "running",
    RunState.ENDED: "running",
    RunState.COMPLETED: "success, failed or timeout",
    RunState.SKIPPED: "skipped",
    RunState.ABANDONED: "abandoned",
}

FIRST = RunState.DUE
LAST = (
    RunState.COMPLETED,
    RunState.SKIPPED,
    RunState.ABANDONED,
    RunState.FENCED,
    RunState.GIVEN_BACK,
)
