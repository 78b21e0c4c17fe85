"""What a run's record says happened: when its handler started, each of its attempts, where it
raised; and which starts count as fire lag (a scheduled occurrence's) and which are measured
apart (a requested run's)."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.conftest import T0, EngineFactory, make_job
from tickd.scheduler.model import Execution, Status, new_id
from tickd.scheduler.plugin.api import HandlerContext, Result, handler
from tickd.scheduler.ports.backends import ExecutionQuery, RunRequest, Store


async def executions(store: Store, job_id: str | None = None) -> list[Execution]:
    return await store.list_executions(ExecutionQuery(job_id=job_id, limit=1000))


def samples(h: object, metric: str, labels: dict[str, str]) -> float:
    registry = h.engine.metrics.registry  # type: ignore[attr-defined]
    return registry.get_sample_value(f"{metric}_count", labels) or 0.0


async def test_started_at_is_when_the_handler_started_not_when_the_run_was_planned(
    make_engine: EngineFactory,
) -> None:
    """Four runs due at once on one worker, each taking five seconds: the later ones start
    seconds after their time, and their records say so."""
    seen: dict[str, datetime] = {}

    async def slow(ctx: HandlerContext) -> Result:
        seen[ctx.job_name] = ctx.clock.now()
        await ctx.clock.sleep(5)
        return None

    h = make_engine({"slow": slow}, workers=1)
    for i in range(4):
        await h.add(make_job(f"slow-{i}", "slow"))
    await h.engine.drain()

    runs = await executions(h.store)
    assert len(runs) == 4 and {run.status for run in runs} == {Status.SUCCESS}
    for run in runs:
        assert run.started_at == seen[run.job_name], run.job_name
    lags = sorted((seen[run.job_name] - run.scheduled_at).total_seconds() for run in runs)
    assert lags == [0, 5, 10, 15], "each waited for the runs before it"


async def test_each_attempt_is_recorded_with_its_times_error_and_backoff(
    make_engine: EngineFactory,
) -> None:
    async def flaky(ctx: HandlerContext) -> Result:
        if ctx.attempt < 3:
            raise ConnectionError(f"upstream down on attempt {ctx.attempt}")
        return {"ok": True}

    h = make_engine({"flaky": flaky})
    await h.add(make_job("flaky", "flaky", max_retries=5, timeout_seconds=60))
    await h.engine.drain()

    [run] = await executions(h.store)
    assert (run.status, run.attempts, run.result) == (Status.SUCCESS, 3, {"ok": True})
    log = run.attempt_log
    assert [a.number for a in log] == [1, 2, 3]
    assert [(a.started_at - T0).total_seconds() for a in log] == [0, 1, 3]
    assert [a.backoff_seconds for a in log] == [1, 2, None]
    assert [a.error.message if a.error else None for a in log] == [
        "upstream down on attempt 1",
        "upstream down on attempt 2",
        None,
    ]
    assert all(a.finished_at >= a.started_at for a in log)


async def test_a_run_of_one_attempt_is_its_own_record(make_engine: EngineFactory) -> None:
    async def fine(ctx: HandlerContext) -> Result:
        return None

    h = make_engine({"fine": fine})
    await h.add(make_job("fine", "fine"))
    await h.engine.drain()
    [run] = await executions(h.store)
    assert (run.status, run.attempts, run.attempt_log) == (Status.SUCCESS, 1, ())


async def test_the_record_keeps_where_the_handler_raised_its_secrets_masked(
    make_engine: EngineFactory,
) -> None:
    @handler(secret_params={"key"})
    async def broken(ctx: HandlerContext) -> Result:
        return parse_the_answer(ctx.params["key"])

    h = make_engine({"broken": broken})
    await h.add(make_job("broken", "broken", params={"key": "sk-live-4242"}))
    await h.engine.drain()
    await h.engine.relay.flush_once()

    [run] = await executions(h.store)
    assert run.error is not None and run.error.traceback is not None
    assert "in parse_the_answer" in run.error.traceback
    assert run.error.traceback.rstrip().endswith("ValueError: no answer for ***")
    assert "sk-live-4242" not in run.error.traceback
    events = [e for e in h.events.events if e["data"]["id"] == run.id and e["data"]["error"]]
    assert events, "the run's failure was announced"
    for event in events:
        assert "traceback" not in event["data"]["error"], "events carry the message, not frames"


def parse_the_answer(key: str) -> Result:
    raise ValueError(f"no answer for {key}")


def redrive(job_id: str, scheduled_at: datetime, not_before: datetime) -> RunRequest:
    return RunRequest(
        id=new_id(),
        job_id=job_id,
        scheduled_at=scheduled_at,
        reason="redrive",
        not_before=not_before,
        created_at=not_before,
    )


async def test_a_redrive_is_measured_apart_and_adds_nothing_to_the_fire_lag(
    make_engine: EngineFactory,
) -> None:
    async def fine(ctx: HandlerContext) -> Result:
        return None

    h = make_engine({"fine": fine})
    job = await h.add(make_job("fine", "fine", next_run_at=T0 + timedelta(days=1)))
    # The occurrence it re-runs was due an hour ago: that hour is not lateness.
    await h.store.insert_run_requests([redrive(job.id, T0 - timedelta(hours=1), T0)])
    await h.engine.drain()

    [run] = await executions(h.store)
    assert (run.status, run.requested) == (Status.SUCCESS, "redrive")
    fire_lag = {"handler": "fine", "priority": "normal", "domain": "default"}
    assert samples(h, "tickd_fire_lag_seconds", fire_lag) == 0
    wait = {"handler": "fine", "kind": "redrive"}
    assert samples(h, "tickd_request_wait_seconds", wait) == 1
    waited = h.engine.metrics.registry.get_sample_value("tickd_request_wait_seconds_sum", wait)
    assert waited is not None and waited < 1, "measured from when the request allowed it"


async def test_a_scheduled_occurrence_counts_as_fire_lag(make_engine: EngineFactory) -> None:
    async def fine(ctx: HandlerContext) -> Result:
        return None

    h = make_engine({"fine": fine})
    await h.add(make_job("fine", "fine"))
    await h.engine.drain()
    [run] = await executions(h.store)
    assert run.requested is None
    lag = {"handler": "fine", "priority": "normal", "domain": "default"}
    assert samples(h, "tickd_fire_lag_seconds", lag) == 1
