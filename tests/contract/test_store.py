"""The store contract, run against every store backend (see STORE_BACKENDS in conftest)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import T0, make_job
from tickd.scheduler.model import (
    CronSchedule,
    DeadLetter,
    Execution,
    ExecutionError,
    ExecutionSummary,
    Job,
    Misfire,
    MisfirePolicy,
    OnceSchedule,
    Priority,
    RedrivePolicy,
    Status,
    new_id,
)
from tickd.scheduler.ports.backends import (
    OCCURRENCE_OWNER,
    Advance,
    Backlog,
    Claim,
    DueFilter,
    DuplicateJobName,
    ExecutionQuery,
    InstanceStatus,
    JobChange,
    JobQuery,
    OutboxBacklog,
    Retention,
    RunEnd,
    RunRequest,
    Store,
    StoreError,
    shard_fence,
)
from tickd.scheduler.schedule.shards import shard_entries
from tickd.scheduler.store.mongodb import MongoStore
from tickd.scheduler.store.postgresql import PostgresStore
from tickd.scheduler.store.sqlite import SQLiteStore

OWNER = "instance-a"


def claim_of(job: Job, *, owner: str = OWNER, until: datetime | None = None) -> Claim:
    assert job.next_run_at is not None
    return Claim(
        job_id=job.id,
        revision=job.revision,
        next_run_at=job.next_run_at,
        owner=owner,
        until=until or T0 + timedelta(minutes=5),
    )


def running(job: Job, token: int) -> Execution:
    assert job.next_run_at is not None
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=job.next_run_at,
        status=Status.RUNNING,
        started_at=T0,
        owner=OWNER,
        token=token,
    )


def advance_to(when: datetime | None, execution: Execution, revision: int = 1) -> Advance:
    return Advance(
        revision=revision,
        next_run_at=when,
        enabled=when is not None,
        consecutive_failures=0,
        paused_reason=None,
        last_execution=ExecutionSummary(
            execution_id=execution.id, status=Status.SUCCESS, finished_at=T0
        ),
    )


async def finish_one(store: Store, execution: Execution, advance: Advance | None) -> bool:
    [applied] = await store.write_ends([RunEnd(execution, advance)])
    return applied


async def claimed(store: Store, job: Job) -> Job:
    [won] = await store.claim_jobs([claim_of(job)], T0)
    return won


async def test_a_job_round_trips_exactly(store: Store) -> None:
    job = make_job(
        "round-trip",
        schedule=CronSchedule(expr="*/10 * * * * *", timezone="Europe/Berlin"),
        next_run_at=T0 + timedelta(microseconds=123_457),
        params={"url": "https://example.com", "nested": {"n": [1, 2.5, None, True]}},
        timeout_seconds=12.5,
        max_retries=3,
        priority=Priority.HIGH,
        misfire=Misfire(policy=MisfirePolicy.SKIP, grace_seconds=5),
        jitter_seconds=2,
        system=True,
    )
    await store.insert_job(job)
    assert await store.get_job(job.id) == job
    assert await store.get_job_by_name("round-trip") == job
    assert await store.get_job("missing") is None


async def test_a_once_schedule_round_trips(store: Store) -> None:
    job = make_job("once", schedule=OnceSchedule(at=T0 + timedelta(hours=1)))
    await store.insert_job(job)
    assert await store.get_job(job.id) == job


async def test_names_are_unique(store: Store) -> None:
    await store.insert_job(make_job("same"))
    with pytest.raises(DuplicateJobName, match="same"):
        await store.insert_job(make_job("same"))
    assert len(await store.list_jobs()) == 1


async def test_insert_missing_jobs_adds_by_name_and_never_overwrites(store: Store) -> None:
    original = make_job("seeded", timeout_seconds=10)
    assert await store.insert_missing_jobs([original]) == [original]
    changed_by_ops = make_job("seeded", timeout_seconds=99)
    newcomer = make_job("new")
    assert await store.insert_missing_jobs([changed_by_ops, newcomer]) == [newcomer]
    stored = await store.get_job_by_name("seeded")
    assert stored is not None and stored.timeout_seconds == 10
    assert [j.name for j in await store.list_jobs()] == ["new", "seeded"]


async def test_due_jobs_are_enabled_due_free_and_most_urgent_first(store: Store) -> None:
    jobs = [
        make_job("low-early", priority=Priority.LOW, next_run_at=T0 - timedelta(minutes=9)),
        make_job("normal-late", next_run_at=T0 - timedelta(minutes=1)),
        make_job("normal-early", next_run_at=T0 - timedelta(minutes=2)),
        make_job("critical", priority=Priority.CRITICAL, next_run_at=T0),
        make_job("future", next_run_at=T0 + timedelta(seconds=1)),
        make_job("disabled", enabled=False, next_run_at=T0 - timedelta(hours=1)),
        make_job("never", next_run_at=None),
    ]
    for job in jobs:
        await store.insert_job(job)
    leased = make_job("leased", next_run_at=T0 - timedelta(hours=1))
    await store.insert_job(leased)
    await claimed(store, leased)

    due = await store.due_jobs(T0, 10)
    assert [j.name for j in due] == ["critical", "normal-early", "normal-late", "low-early"]
    assert [j.name for j in await store.due_jobs(T0, 2)] == ["critical", "normal-early"]
    assert await store.due_backlog(T0) == Backlog(due=4, oldest_due_at=T0 - timedelta(minutes=9))
    assert await store.due_backlog(T0 - timedelta(days=1)) == Backlog(due=0, oldest_due_at=None)


async def test_due_jobs_can_leave_out_saturated_handlers(store: Store) -> None:
    await store.insert_job(make_job("a", handler="busy"))
    await store.insert_job(make_job("b", handler="free"))
    due = await store.due_jobs(T0, 10, DueFilter(exclude_handlers=["busy"]))
    assert [j.name for j in due] == ["b"]


async def test_claim_hands_out_a_fresh_fencing_token(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    assert won.lease is not None
    assert (won.lease.owner, won.lease.token, won.fence) == (OWNER, 1, 1)
    assert await store.due_jobs(T0, 10) == []


async def test_only_one_of_two_claims_on_the_same_read_wins(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    first = await store.claim_jobs([claim_of(job, owner="a")], T0)
    second = await store.claim_jobs([claim_of(job, owner="b")], T0)
    assert [j.id for j in first] == [job.id]
    assert second == []


async def test_a_claim_on_a_stale_read_loses(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    stale_revision = replace(job, revision=job.revision - 1)
    moved = replace(job, next_run_at=T0 - timedelta(seconds=1))
    assert await store.claim_jobs([claim_of(stale_revision), claim_of(moved)], T0) == []
    assert (await store.get_job(job.id)).lease is None  # type: ignore[union-attr]


async def test_a_batch_claim_returns_only_the_winners(store: Store) -> None:
    jobs = [make_job(f"j{i}") for i in range(5)]
    for job in jobs:
        await store.insert_job(job)
    await store.claim_jobs([claim_of(jobs[1], owner="other")], T0)
    won = await store.claim_jobs([claim_of(j) for j in jobs], T0)
    assert sorted(j.name for j in won) == ["j0", "j2", "j3", "j4"]


async def test_finish_applies_the_advance_and_frees_the_job(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    execution = running(won, won.lease.token)  # type: ignore[union-attr]
    await store.insert_executions([execution])
    done = replace(execution, status=Status.SUCCESS, finished_at=T0, duration_ms=5.0, attempts=1)
    assert await finish_one(store, done, advance_to(T0 + timedelta(minutes=1), done))
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None
    assert after.next_run_at == T0 + timedelta(minutes=1)
    assert after.last_execution is not None and after.last_execution.execution_id == done.id
    assert await store.get_execution(done.id) == done


async def test_finish_with_a_stale_token_changes_nothing_but_its_execution(store: Store) -> None:
    job = make_job(max_retries=1)  # abandoned once, it runs again
    await store.insert_job(job)
    won = await claimed(store, job)
    token = won.lease.token  # type: ignore[union-attr]
    execution = running(won, token)
    await store.insert_executions([execution])
    await store.reap_expired_leases(T0 + timedelta(hours=1))  # our lease expires...
    retaken = await claimed(store, won)  # ...and someone else claims the job
    late = replace(execution, status=Status.SUCCESS, finished_at=T0)
    assert not await finish_one(store, late, advance_to(T0 + timedelta(days=1), late))
    job_now = await store.get_job(job.id)
    assert job_now is not None and job_now.lease == retaken.lease
    assert job_now.next_run_at == job.next_run_at
    assert (await store.get_execution(execution.id)).status is Status.SUCCESS  # type: ignore[union-attr]


async def test_finish_without_advance_gives_the_occurrence_back(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    execution = running(won, won.lease.token)  # type: ignore[union-attr]
    await store.insert_executions([execution])
    abandoned = replace(execution, status=Status.ABANDONED, finished_at=T0)
    assert await finish_one(store, abandoned, None)
    assert [j.id for j in await store.due_jobs(T0, 10)] == [job.id]


async def test_renew_lease_needs_the_current_token(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    later = T0 + timedelta(hours=2)
    assert not await store.renew_lease(job.id, 999, later)
    assert await store.renew_lease(job.id, won.lease.token, later)  # type: ignore[union-attr]
    assert (await store.get_job(job.id)).lease.until == later  # type: ignore[union-attr]


async def test_reap_marks_the_guarded_execution_abandoned_and_frees_the_job(store: Store) -> None:
    expiring, live = make_job("expiring", max_retries=1), make_job("live")
    for job in (expiring, live):
        await store.insert_job(job)
    [won_expiring] = await store.claim_jobs(
        [claim_of(expiring, until=T0 + timedelta(seconds=5))], T0
    )
    [won_live] = await store.claim_jobs([claim_of(live, until=T0 + timedelta(hours=1))], T0)
    runs = [running(won_expiring, 1), running(won_live, 1)]
    await store.insert_executions(runs)

    reaped = await store.reap_expired_leases(T0 + timedelta(seconds=6))

    assert [(e.id, e.status) for e in reaped] == [(runs[0].id, Status.ABANDONED)]
    assert reaped[0].error is not None and reaped[0].error.type == "LeaseExpired"
    assert [j.name for j in await store.due_jobs(T0 + timedelta(seconds=6), 10)] == ["expiring"]
    assert (await store.get_job(live.id)).lease is not None  # type: ignore[union-attr]
    assert await store.reap_expired_leases(T0 + timedelta(seconds=6)) == []


async def test_executions_list_newest_first_with_filters(store: Store) -> None:
    def execution(minute: int, status: Status, job_id: str = "j1") -> Execution:
        return Execution(
            job_id=job_id,
            job_name=job_id,
            handler="noop",
            scheduled_at=T0 + timedelta(minutes=minute),
            status=status,
            error=ExecutionError(type="E", message="m") if status is Status.FAILED else None,
            result={"n": minute},
        )

    runs = [
        execution(1, Status.SUCCESS),
        execution(2, Status.FAILED),
        execution(3, Status.SUCCESS),
        execution(4, Status.SUCCESS, job_id="j2"),
    ]
    await store.insert_executions(runs)
    newest_first = await store.list_executions(ExecutionQuery())
    assert [e.scheduled_at.minute for e in newest_first] == [4, 3, 2, 1]
    of_j1 = await store.list_executions(ExecutionQuery(job_id="j1", limit=2))
    assert [e.scheduled_at.minute for e in of_j1] == [3, 2]
    failed = await store.list_executions(ExecutionQuery(status=Status.FAILED))
    assert failed == [runs[1]]


async def test_delete_job(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    assert await store.delete_job(job.id)
    assert not await store.delete_job(job.id)
    assert await store.get_job(job.id) is None


async def test_delete_job_at_a_revision_is_a_compare_and_set(store: Store) -> None:
    job = make_job("nightly")
    await store.insert_job(job, change_of(job, "create"))
    edited = await store.replace_job(
        replace(job, timeout_seconds=20), job.revision, change_of(job, "update")
    )
    assert edited is not None and edited.revision == 2
    # A client that read revision 1 does not delete what another changed since, nor records it.
    stale = change_of(job, "delete", T0 + timedelta(minutes=1))
    assert not await store.delete_job(job.id, stale, expected_revision=1)
    assert await store.get_job(job.id) == edited
    assert [c.action for c in await store.list_changes(job.id)] == ["update", "create"]
    current = change_of(job, "delete", T0 + timedelta(minutes=2))
    assert await store.delete_job(job.id, current, expected_revision=2)
    assert await store.get_job(job.id) is None
    assert [c.action for c in await store.list_changes(job.id)] == ["delete", "update", "create"]
    assert not await store.delete_job(job.id, expected_revision=2)


async def test_delete_job_at_a_stale_revision_keeps_its_run_requests(store: Store) -> None:
    job = make_job("nightly")
    await store.insert_job(job)
    request = RunRequest(
        id=new_id(), job_id=job.id, scheduled_at=T0, reason="trigger", not_before=T0, created_at=T0
    )
    await store.insert_run_requests([request])
    assert not await store.delete_job(job.id, expected_revision=job.revision + 1)
    assert await store.run_request_pending(job.id, T0)
    assert await store.delete_job(job.id, expected_revision=job.revision)
    assert not await store.run_request_pending(job.id, T0)


def change_of(job: Job, action: str, at: datetime = T0, **changes: Any) -> JobChange:
    return JobChange(
        id=new_id(),
        job_id=job.id,
        job_name=job.name,
        at=at,
        actor="ops",
        action=action,
        changes={k: {"from": v[0], "to": v[1]} for k, v in changes.items()},
    )


async def test_jobs_list_with_filters_and_pages(store: Store) -> None:
    jobs = [
        make_job("billing-a", handler="webhook", next_run_at=T0),
        make_job("billing-b", handler="noop", next_run_at=T0 + timedelta(hours=2)),
        make_job("reports", handler="noop", enabled=False, next_run_at=T0 + timedelta(hours=1)),
        make_job("billing-c", handler="noop", next_run_at=T0 + timedelta(hours=3)),
    ]
    for job in jobs:
        await store.insert_job(job)

    async def names(**filters: Any) -> list[str]:
        return [j.name for j in await store.list_jobs(JobQuery(**filters))]

    assert await names() == ["billing-a", "billing-b", "billing-c", "reports"]
    assert await names(handler="noop") == ["billing-b", "billing-c", "reports"]
    assert await names(enabled=False) == ["reports"]
    assert await names(name_prefix="billing-") == ["billing-a", "billing-b", "billing-c"]
    assert await names(
        next_run_from=T0 + timedelta(hours=1), next_run_to=T0 + timedelta(hours=3)
    ) == ["billing-b", "reports"]
    assert await names(limit=2) == ["billing-a", "billing-b"]
    assert await names(limit=2, after_name="billing-b") == ["billing-c", "reports"]


async def test_replace_job_is_a_compare_and_set_on_the_revision(store: Store) -> None:
    job = make_job("nightly", timeout_seconds=10)
    await store.insert_job(job, change_of(job, "create"))
    edited = replace(job, timeout_seconds=20, enabled=False, paused_reason="by ops")
    stored = await store.replace_job(edited, job.revision, change_of(job, "update"))
    assert stored is not None
    assert (stored.timeout_seconds, stored.enabled, stored.revision) == (20, False, 2)
    # A second writer that read revision 1 loses, and changes nothing.
    lost = await store.replace_job(replace(job, timeout_seconds=99), 1, change_of(job, "update"))
    assert lost is None
    assert (await store.get_job(job.id)).timeout_seconds == 20  # type: ignore[union-attr]
    assert [c.action for c in await store.list_changes(job.id)] == ["update", "create"]


async def test_replace_job_keeps_the_engines_fields(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    stored = await store.replace_job(
        replace(job, max_retries=4), job.revision, change_of(job, "update")
    )
    assert stored is not None
    assert (stored.lease, stored.fence) == (won.lease, won.fence)


async def test_replace_job_refuses_a_taken_name(store: Store) -> None:
    first, second = make_job("first"), make_job("second")
    await store.insert_job(first)
    await store.insert_job(second)
    with pytest.raises(DuplicateJobName):
        await store.replace_job(replace(second, name="first"), 1, change_of(second, "update"))


async def test_a_change_made_during_a_run_wins_over_its_advance(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    execution = running(won, won.lease.token)  # type: ignore[union-attr]
    await store.insert_executions([execution])
    paused = replace(job, enabled=False, paused_reason="maintenance")
    assert await store.replace_job(paused, job.revision, change_of(job, "pause"))
    done = replace(execution, status=Status.SUCCESS, finished_at=T0)
    assert await finish_one(store, done, advance_to(T0 + timedelta(minutes=1), done, 1))
    after = await store.get_job(job.id)
    assert after is not None
    assert (after.enabled, after.paused_reason, after.next_run_at) == (False, "maintenance", T0)
    assert after.lease is None
    assert after.last_execution is not None and after.last_execution.execution_id == done.id


NEXT_MINUTE = T0 + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # (the change ops make during the run, (enabled, next_run_at) after the run's end)
        ({"enabled": False, "paused_reason": "maintenance"}, (False, T0)),
        ({"next_run_at": T0 + timedelta(hours=1)}, (True, T0 + timedelta(hours=1))),
        ({"max_retries": 5, "params": {"note": "edited"}}, (True, NEXT_MINUTE)),
    ],
    ids=["a pause wins", "a new schedule wins", "an edit of the rest lets the run move on"],
)
async def test_a_change_during_a_run_wins_over_its_advance_only_if_it_moves_when_the_job_runs(
    store: Store, edit: dict[str, Any], expected: tuple[bool, datetime]
) -> None:
    """A scheduled run knows the time it claimed the job at. An edit that leaves the job
    enabled and due then (its params, retries) must not keep the run from moving it on, or
    the occurrence that just ran is due again and runs twice."""
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    execution = running(won, won.lease.token)  # type: ignore[union-attr]
    await store.insert_executions([execution])
    assert await store.replace_job(replace(job, **edit), job.revision, change_of(job, "update"))
    done = replace(execution, status=Status.SUCCESS, finished_at=T0)
    advance = replace(advance_to(NEXT_MINUTE, done), claimed_next_run_at=job.next_run_at)
    assert await finish_one(store, done, advance)
    after = await store.get_job(job.id)
    assert after is not None
    assert (after.enabled, after.next_run_at) == expected
    assert after.lease is None
    assert after.last_execution is not None and after.last_execution.execution_id == done.id


async def test_an_edit_read_before_a_run_ended_does_not_put_back_what_the_end_moved(
    store: Store,
) -> None:
    """Ops read the job (due at T0), a run of T0 ends and moves it to the next minute, then
    the edit is written: it must not write T0 back (T0 would run twice), nor the rest of what
    the end moved, unless the edit itself changes it."""
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    read = await store.get_job(job.id)  # ops read it while the run runs
    assert read is not None
    done = replace(running(won, won.lease.token), status=Status.SUCCESS, finished_at=T0)  # type: ignore[union-attr]
    advance = replace(advance_to(NEXT_MINUTE, done), claimed_next_run_at=T0)
    assert await finish_one(store, done, advance)

    edited = replace(read, max_retries=5)
    stored = await store.replace_job(edited, read.revision, change_of(job, "update"), read=read)
    assert stored is not None and stored.max_retries == 5
    assert (stored.next_run_at, stored.enabled) == (NEXT_MINUTE, True)
    later = T0 + timedelta(hours=1)
    moved = replace(stored, next_run_at=later)  # a new schedule's first time
    again = await store.replace_job(moved, stored.revision, change_of(job, "update"), read=stored)
    assert again is not None and again.next_run_at == later


async def test_history_is_newest_first_and_pages(store: Store) -> None:
    job = make_job()
    await store.insert_job(job, change_of(job, "create", T0))
    for minute in (1, 2, 3):
        edited = replace(job, max_retries=minute)
        current = await store.get_job(job.id)
        assert current is not None
        await store.replace_job(
            edited,
            current.revision,
            change_of(
                job, "update", T0 + timedelta(minutes=minute), max_retries=(minute - 1, minute)
            ),
        )
    first_page = await store.list_changes(job.id, limit=2)
    assert [c.at.minute for c in first_page] == [3, 2]
    assert first_page[0].changes == {"max_retries": {"from": 2, "to": 3}}
    last = first_page[-1]
    second_page = await store.list_changes(job.id, limit=2, before=(last.at, last.id))
    assert [c.action for c in second_page] == ["update", "create"]
    assert await store.delete_job(job.id, change_of(job, "delete", T0 + timedelta(minutes=9)))
    assert (await store.list_changes(job.id, limit=1))[0].action == "delete"


async def test_run_requests_claim_the_job_without_moving_its_schedule(store: Store) -> None:
    job = make_job(next_run_at=T0 + timedelta(hours=1), enabled=False)
    await store.insert_job(job)
    requests = [
        RunRequest(
            id=new_id(),
            job_id=job.id,
            scheduled_at=T0 - timedelta(days=d),
            reason="backfill",
            not_before=T0 + timedelta(seconds=d),
            created_at=T0,
        )
        for d in (0, 1)
    ]
    await store.insert_run_requests(requests)
    due = await store.due_run_requests(T0 + timedelta(seconds=5), 10)
    assert [(r.id, j.id) for r, j in due] == [(r.id, job.id) for r in requests]
    claims = [
        Claim(
            job_id=job.id,
            revision=job.revision,
            next_run_at=None,
            owner=OWNER,
            until=T0 + timedelta(minutes=1),
        )
        for _ in due
    ]
    won = await store.claim_run_requests([r for r, _ in due], claims, T0)
    assert [(r.id, j.id) for r, j in won] == [(requests[0].id, job.id)], (
        "one run of a job at a time"
    )
    assert won[0][1].lease is not None and won[0][1].next_run_at == job.next_run_at
    assert await store.due_run_requests(T0 + timedelta(seconds=5), 10) == [], "leased job: wait"
    # The one being run stays queued (taken) until its end: both occurrences are asked for.
    times = [r.scheduled_at for r in requests]
    assert await store.executions_at(job.id, times) == set(times)
    assert await store.count_pending_requests(job.id, reason="backfill") == 1, "one is running"


async def test_a_request_read_before_another_instance_ran_it_is_not_claimed_again(
    store: Store,
) -> None:
    """Two instances read the same trigger. One claims it, runs it and frees the job; the
    other's claim, from its older read, finds the job free at the same revision: it must lose,
    or the trigger runs twice. The job is left free."""
    job = make_job(next_run_at=T0 + timedelta(days=1))
    await store.insert_job(job)
    await store.insert_run_requests([request_for(job)])
    [(request, read)] = await store.due_run_requests(T0, 10)
    [(stale, _)] = await store.due_run_requests(T0, 10)  # the other instance's read

    def claim_by(owner: str) -> Claim:
        until = T0 + timedelta(minutes=1)
        return Claim(
            job_id=job.id, revision=read.revision, next_run_at=None, owner=owner, until=until
        )

    [(_, won)] = await store.claim_run_requests([request], [claim_by("first")], T0)
    assert won.lease is not None
    done = replace(running(won, won.lease.token), status=Status.SUCCESS, finished_at=T0)
    [applied] = await store.write_ends([RunEnd(done, None, request_id=request.id)])
    assert applied

    assert await store.claim_run_requests([stale], [claim_by("second")], T0) == []
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None, "not held by the claim that lost"
    assert await store.due_run_requests(T0 + timedelta(days=1), 10) == []


async def test_pending_requests_are_counted_per_job_and_reason(store: Store) -> None:
    job, other = make_job("job"), make_job("other")
    await store.insert_job(job)
    await store.insert_job(other)

    def request(of: str, reason: str, minute: int) -> RunRequest:
        at = T0 + timedelta(minutes=minute)
        return RunRequest(
            id=new_id(), job_id=of, scheduled_at=at, reason=reason, not_before=at, created_at=T0
        )

    await store.insert_run_requests(
        [request(job.id, "trigger", m) for m in range(3)]
        + [request(job.id, "backfill", 5), request(other.id, "trigger", 0)]
    )
    assert await store.count_pending_requests(job.id, reason="trigger") == 3
    assert await store.count_pending_requests(job.id, reason="backfill") == 1
    assert await store.count_pending_requests(other.id, reason="retry") == 0
    [first] = [r for r, _ in await store.due_run_requests(T0, 10) if r.job_id == job.id]
    claim = Claim(job_id=job.id, revision=job.revision, next_run_at=None, owner=OWNER, until=T0)
    await store.claim_run_requests([first], [claim], T0)
    assert await store.count_pending_requests(job.id, reason="trigger") == 2, "taken: not pending"


async def test_deleting_a_job_drops_its_pending_requests(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    await store.insert_run_requests(
        [
            RunRequest(
                id=new_id(),
                job_id=job.id,
                scheduled_at=T0,
                reason="trigger",
                not_before=T0,
                created_at=T0,
            )
        ]
    )
    await store.delete_job(job.id)
    assert await store.due_run_requests(T0, 10) == []


async def test_executions_filter_by_time_and_page_by_cursor(store: Store) -> None:
    runs = [
        Execution(
            job_id="j",
            job_name="j",
            handler="noop",
            scheduled_at=T0 + timedelta(minutes=m),
            status=Status.SUCCESS,
        )
        for m in range(6)
    ]
    await store.insert_executions(runs)
    window = await store.list_executions(
        ExecutionQuery(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=5))
    )
    assert [e.scheduled_at.minute for e in window] == [4, 3, 2, 1]
    page = await store.list_executions(ExecutionQuery(limit=2))
    after = await store.list_executions(
        ExecutionQuery(limit=2, before=(page[-1].scheduled_at, page[-1].id))
    )
    assert [e.scheduled_at.minute for e in page + after] == [5, 4, 3, 2]


def request_for(
    job: Job, *, not_before: datetime = T0, request_id: str | None = None
) -> RunRequest:
    return RunRequest(
        id=request_id or new_id(),
        job_id=job.id,
        scheduled_at=T0,
        reason="trigger",
        not_before=not_before,
        created_at=T0,
    )


async def test_inserting_an_execution_again_keeps_the_first_and_raises_nothing(
    store: Store,
) -> None:
    """A batch replayed after a lost connection must not fail: duplicates are left alone."""
    first = Execution(
        job_id="j", job_name="j", handler="noop", scheduled_at=T0, status=Status.RUNNING
    )
    replayed = replace(first, status=Status.SUCCESS)
    other = replace(first, id=new_id())
    await store.insert_executions([first])
    await store.insert_executions([replayed, other])
    stored = await store.get_execution(first.id)
    assert stored is not None and stored.status is Status.RUNNING
    assert await store.get_execution(other.id) is not None


async def test_inserting_a_run_request_again_queues_it_once(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    request = request_for(job)
    await store.insert_run_requests([request])
    await store.insert_run_requests([request])
    assert [r.id for r, _ in await store.due_run_requests(T0, 10)] == [request.id]


async def test_the_request_limit_counts_only_requests_of_jobs_free_to_run(store: Store) -> None:
    """Requests of a leased job are left out before the limit applies, so a job with a long
    queue cannot hide the requests of others; the order is not_before, then id."""
    busy, free = make_job("busy"), make_job("free")
    for job in (busy, free):
        await store.insert_job(job)
    await claimed(store, busy)
    queued = [request_for(busy, not_before=T0 - timedelta(seconds=s)) for s in (3, 2)]
    wanted = request_for(free, not_before=T0 - timedelta(seconds=1))
    await store.insert_run_requests([*queued, wanted])
    assert [(r.id, j.id) for r, j in await store.due_run_requests(T0, 1)] == [(wanted.id, free.id)]
    tied = [request_for(free, request_id=f"r{i}") for i in (2, 1, 3)]
    await store.insert_run_requests(tied)
    due = await store.due_run_requests(T0, 10)
    assert [r.id for r, _ in due] == [wanted.id, "r1", "r2", "r3"]


async def test_a_constraint_violation_is_a_store_error_that_is_not_transient(store: Store) -> None:
    """Whatever the backend, callers see StoreError, never a driver's exception."""
    job = make_job()
    await store.insert_job(job)
    with pytest.raises(StoreError) as caught:
        await store.insert_job(replace(job, name="another-name"))  # the same id
    assert not caught.value.transient


async def test_a_batch_of_ends_says_which_applied_in_order(store: Store) -> None:
    """One call ends many runs; each is fenced by its own token, and a change ops made during a
    run keeps its schedule while the run's record still lands."""
    names = ("ours", "taken-over", "paused-meanwhile")
    ours, taken_over, paused = (make_job(n, max_retries=1) for n in names)
    for job in (ours, taken_over, paused):
        await store.insert_job(job)
    short = T0 + timedelta(seconds=1)
    won = [
        *await store.claim_jobs([claim_of(ours), claim_of(paused)], T0),
        *await store.claim_jobs([claim_of(taken_over, until=short)], T0),
    ]
    runs = [running(job, job.lease.token) for job in won]  # type: ignore[union-attr]
    await store.insert_executions(runs)
    later = T0 + timedelta(minutes=1)
    await store.reap_expired_leases(later)  # the short lease only: another instance...
    await store.claim_jobs([claim_of(taken_over, until=later + timedelta(hours=1))], later)
    stopped = replace(paused, enabled=False, paused_reason="maintenance")
    assert await store.replace_job(stopped, paused.revision, change_of(paused, "pause"))

    done = [replace(r, status=Status.SUCCESS, finished_at=later) for r in runs]
    ends = [RunEnd(d, advance_to(T0 + timedelta(hours=1), d)) for d in done]
    by_name = dict(zip([j.name for j in won], await store.write_ends(ends), strict=True))
    assert by_name == {"ours": True, "paused-meanwhile": True, "taken-over": False}
    after = {name: await store.get_job_by_name(name) for name in by_name}
    assert after["ours"] is not None and after["ours"].lease is None
    assert after["ours"].next_run_at == T0 + timedelta(hours=1)
    assert after["taken-over"] is not None and after["taken-over"].lease is not None
    kept = after["paused-meanwhile"]
    assert kept is not None and (kept.enabled, kept.next_run_at, kept.lease) == (False, T0, None)
    assert kept.last_execution is not None
    for end in ends:
        stored = await store.get_execution(end.execution.id)
        assert stored is not None and stored.status is Status.SUCCESS
    assert await store.write_ends([]) == []


# -- dead letters and retention ------------------------------------------------------------------


def ended(
    job: Job,
    at: datetime,
    status: Status = Status.SUCCESS,
    *,
    finished: datetime | None = None,
    dead_letter: DeadLetter | None = None,
) -> Execution:
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=at,
        status=status,
        started_at=at,
        finished_at=None if status is Status.RUNNING else (finished or at),
        dead_letter=dead_letter,
    )


async def stored_ids(store: Store, job: Job | None = None) -> set[str]:
    query = ExecutionQuery(job_id=job.id if job else None, limit=1000)
    return {e.id for e in await store.list_executions(query)}


async def test_a_redrive_policy_round_trips_and_is_part_of_the_definition(store: Store) -> None:
    job = make_job("policy", redrive=RedrivePolicy(max_attempts=3, backoff_seconds=7.5))
    await store.insert_job(job)
    assert await store.get_job(job.id) == job
    cleared = replace(job, redrive=None)
    stored = await store.replace_job(cleared, job.revision, change_of(job, "update"))
    assert stored is not None and stored.redrive is None


async def test_a_rerun_settles_the_earlier_dead_letters_of_its_occurrence(store: Store) -> None:
    """Dead letters are listed by a query; a later run of the occurrence (a run request)
    marks them redriven, whatever its own outcome; other occurrences are left alone."""
    job = make_job()
    await store.insert_job(job)
    failed = ended(job, T0, Status.FAILED, dead_letter=DeadLetter.OPEN)
    other = ended(job, T0 + timedelta(minutes=1), Status.TIMEOUT, dead_letter=DeadLetter.OPEN)
    await store.write_ends([RunEnd(failed, None), RunEnd(other, None)])
    open_ones = await store.list_executions(ExecutionQuery(dead_letter=DeadLetter.OPEN))
    assert [e.id for e in open_ones] == [other.id, failed.id]

    again = ended(job, T0, Status.FAILED, finished=T0 + timedelta(hours=1))
    again = replace(again, dead_letter=DeadLetter.OPEN)
    await store.write_ends([RunEnd(again, None, settles=True)])

    by_id = {e.id: e.dead_letter for e in await store.list_executions(ExecutionQuery())}
    assert by_id == {
        failed.id: DeadLetter.REDRIVEN,
        again.id: DeadLetter.OPEN,
        other.id: DeadLetter.OPEN,
    }
    assert await store.count_dead_letters() == {("noop", "default"): 2}


async def test_an_automatic_redrive_is_queued_once_with_its_history(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    failed = ended(job, T0, Status.FAILED, dead_letter=DeadLetter.REDRIVING)
    request = replace(request_for(job, not_before=T0 + timedelta(seconds=30)), redrives=1)
    change = replace(change_of(job, "redrive"), actor="tickd")
    end = RunEnd(failed, None, redrive=(request, change))
    await store.write_ends([end])
    await store.write_ends([end])  # a batch replayed after a lost connection

    assert await store.due_run_requests(T0, 10) == []
    [(due, _)] = await store.due_run_requests(T0 + timedelta(seconds=30), 10)
    assert due == request
    assert [c.action for c in await store.list_changes(job.id)] == ["redrive"]
    assert await store.count_dead_letters() == {}, "a dead letter being re-driven is handled"


async def test_marking_dead_letters_is_a_compare_and_set(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    dead = [ended(job, T0 + timedelta(minutes=i), Status.FAILED) for i in range(3)]
    dead = [replace(e, dead_letter=DeadLetter.OPEN) for e in dead]
    fine = ended(job, T0 + timedelta(minutes=9))
    await store.insert_executions([*dead, fine])
    ids = [e.id for e in dead]
    redriving = DeadLetter.REDRIVING
    assert await store.mark_dead_letters(ids[:2], states=[DeadLetter.OPEN], to=redriving) == set(
        ids[:2]
    )
    # The second of two racing re-drives wins nothing; a run that did not fail is no dead letter.
    assert await store.mark_dead_letters(
        [*ids, fine.id], states=[DeadLetter.OPEN], to=redriving
    ) == {ids[2]}
    discarded = await store.mark_dead_letters(
        ids, states=[DeadLetter.OPEN, redriving], to=DeadLetter.DISCARDED
    )
    assert discarded == set(ids)
    stored = await store.get_execution(fine.id)
    assert stored is not None and stored.dead_letter is None
    assert await store.mark_dead_letters([], states=[DeadLetter.OPEN], to=redriving) == set()


async def test_dead_letters_are_counted_open_only_by_handler_and_domain(store: Store) -> None:
    web, mail = replace(make_job("w", "webhook"), domain="team-a"), make_job("m", "mail")
    await store.insert_job(web)  # mail's job is gone: its dead letters are of no domain
    states = [DeadLetter.OPEN, DeadLetter.OPEN, DeadLetter.DISCARDED, DeadLetter.REDRIVEN]
    runs = [ended(web, T0 + timedelta(minutes=i), Status.FAILED, dead_letter=s) for i, s in
            enumerate(states)]  # fmt: skip
    runs.append(ended(mail, T0, Status.TIMEOUT, dead_letter=DeadLetter.OPEN))
    await store.insert_executions(runs)
    assert await store.count_dead_letters() == {("webhook", "team-a"): 2, ("mail", ""): 1}


async def test_pruning_by_age_spares_running_unhandled_and_each_jobs_newest(store: Store) -> None:
    job, quiet = make_job("busy"), make_job("quiet")
    old = T0 - timedelta(days=40)
    pruned_ok = [ended(job, old + timedelta(minutes=i)) for i in range(3)]
    keep = [
        ended(job, old + timedelta(minutes=10), Status.RUNNING),
        ended(job, old + timedelta(minutes=11), Status.FAILED, dead_letter=DeadLetter.OPEN),
        ended(job, old + timedelta(minutes=12), Status.FAILED, dead_letter=DeadLetter.REDRIVING),
        ended(job, T0 - timedelta(days=29)),  # young enough
        ended(quiet, old),  # old, but all that the quiet job has
    ]
    discarded = ended(job, old + timedelta(minutes=5), Status.FAILED)
    discarded = replace(discarded, dead_letter=DeadLetter.DISCARDED)
    await store.insert_executions([*pruned_ok, *keep, discarded])

    retention = Retention(days=30, max_per_job=0)
    assert await store.prune_executions(retention, T0, limit=2) == 2
    assert await store.prune_executions(retention, T0, limit=100) == 2
    assert await store.prune_executions(retention, T0, limit=100) == 0
    assert await stored_ids(store) == {e.id for e in keep}


async def test_pruning_by_count_keeps_each_jobs_newest_and_honours_the_handler_scope(
    store: Store,
) -> None:
    web, mail = make_job("w", "webhook"), make_job("m", "mail")
    web_runs = [ended(web, T0 + timedelta(minutes=i)) for i in range(5)]
    web_runs[0] = replace(web_runs[0], status=Status.FAILED, dead_letter=DeadLetter.OPEN)
    mail_runs = [ended(mail, T0 + timedelta(minutes=i)) for i in range(5)]
    await store.insert_executions([*web_runs, *mail_runs])

    webhook_only = Retention(days=0, max_per_job=2, handler="webhook")
    assert await store.prune_executions(webhook_only, T0, limit=100) == 2
    assert await stored_ids(store, web) == {web_runs[0].id, web_runs[3].id, web_runs[4].id}
    assert await stored_ids(store, mail) == {e.id for e in mail_runs}

    others = Retention(days=0, max_per_job=1, except_handlers=("webhook",))
    assert await store.prune_executions(others, T0, limit=100) == 4
    assert await stored_ids(store, mail) == {mail_runs[4].id}
    assert len(await stored_ids(store, web)) == 3
    assert await store.prune_executions(Retention(days=0, max_per_job=0), T0, limit=100) == 0


async def test_pruning_by_age_cuts_at_the_microsecond_across_an_hour_boundary(
    store: Store,
) -> None:
    """The cutoff falls inside an hour: what finished before it goes, in that hour and the one
    before it (MongoDB reads a whole hour, then the cutoff's hour by the minute), the rest stays."""
    job = make_job()
    now = T0 + timedelta(minutes=30, seconds=17, microseconds=5)
    before = now - timedelta(days=1)
    hour = before.replace(minute=0, second=0, microsecond=0)
    older = [hour - timedelta(minutes=59), hour - timedelta(microseconds=1), hour]
    older.append(before - timedelta(microseconds=1))
    younger = [before, before + timedelta(microseconds=1), hour + timedelta(hours=1)]
    runs = [ended(job, at, finished=at) for at in [*older, *younger]]
    await store.insert_executions(runs)

    assert await store.prune_executions(Retention(days=1, max_per_job=0), now, limit=100) == 4
    assert await stored_ids(store) == {e.id for e in runs[len(older) :]}


async def test_pruning_by_age_resumes_where_the_last_pass_stopped(store: Store) -> None:
    """Passes a minute apart, each with a small limit, over runs an hour apart: each pass takes
    up what the last left and what has grown old since; a job's newest, kept while it was, goes
    once the job has run again (a store may take until the cutoff's next hour to see it)."""
    busy, quiet = make_job("busy"), make_job("quiet")
    start = T0 - timedelta(days=2)
    runs = [ended(busy, start + timedelta(minutes=50 * i)) for i in range(40)]
    lone = ended(quiet, start)
    await store.insert_executions([*runs, lone])
    retention = Retention(days=1, max_per_job=0)

    def grown_old(now: datetime) -> set[str]:
        return {e.id for e in runs if e.finished_at and e.finished_at < now - timedelta(days=1)}

    now = T0
    assert await store.prune_executions(retention, now, limit=5) == 5
    assert await store.prune_executions(retention, now, limit=5) == 5
    assert await store.prune_executions(retention, now, limit=100) == len(grown_old(now)) - 10
    assert await store.prune_executions(retention, now, limit=100) == 0
    later = now + timedelta(hours=3, minutes=1)
    assert await store.prune_executions(retention, later, limit=100) == len(
        grown_old(later) - grown_old(now)
    )
    assert lone.id in await stored_ids(store, quiet)

    await store.insert_executions([ended(quiet, T0)])
    last = later + timedelta(hours=2)
    for minutes in range(0, 121, 30):
        await store.prune_executions(retention, later + timedelta(minutes=minutes), limit=100)
    assert lone.id not in await stored_ids(store, quiet)
    assert await stored_ids(store, busy) == {e.id for e in runs} - grown_old(last)


async def test_pruning_by_count_counts_the_runs_finished_since_the_last_pass(
    store: Store,
) -> None:
    """A job under its bound at one pass and over it at the next (its new runs finished in
    between) loses its oldest then."""
    job, other = make_job("job"), make_job("other")
    first = [ended(job, T0 + timedelta(minutes=i)) for i in range(3)]
    await store.insert_executions([*first, ended(other, T0)])
    retention = Retention(days=0, max_per_job=3)
    assert await store.prune_executions(retention, T0 + timedelta(minutes=3), limit=100) == 0

    more = [ended(job, T0 + timedelta(minutes=4 + i)) for i in range(2)]
    await store.insert_executions(more)
    # (A store may count a run up to two minutes after it finished.)
    assert await store.prune_executions(retention, T0 + timedelta(minutes=8), limit=100) == 2
    assert await stored_ids(store, job) == {first[2].id, *(e.id for e in more)}
    assert await store.prune_executions(retention, T0 + timedelta(minutes=9), limit=100) == 0


async def test_pruning_history_by_age_keeps_each_jobs_newest_entry(store: Store) -> None:
    job, other = make_job("a"), make_job("b")
    old = T0 - timedelta(days=40)
    entries = [
        replace(change_of(job, "update"), at=old + timedelta(minutes=i), id=f"a{i}")
        for i in range(3)
    ]
    entries.append(replace(change_of(other, "create"), at=old, id="b0"))
    for entry in entries:
        await store.record_change(entry)
    assert await store.prune_changes(T0 - timedelta(days=30), limit=100) == 2
    assert [c.id for c in await store.list_changes(job.id)] == ["a2"]
    assert [c.id for c in await store.list_changes(other.id)] == ["b0"]


async def test_giving_back_a_lease_needs_its_token_and_leaves_the_schedule(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    won = await claimed(store, job)
    assert won.lease is not None
    await store.give_back([(job.id, won.lease.token + 1)])  # a stale token: nothing happens
    held = await store.get_job(job.id)
    assert held is not None and held.lease == won.lease
    await store.give_back([(job.id, won.lease.token)])
    free = await store.get_job(job.id)
    assert free is not None and free.lease is None and free.next_run_at == job.next_run_at
    assert [j.id for j in await store.due_jobs(T0, 10)] == [job.id]
    await store.give_back([])


async def held_by_each(store: Store, owners: tuple[str, ...], until: datetime) -> dict[str, Job]:
    """A job for each owner, claimed by it until `until`, its run recorded as running."""
    jobs = {}
    for owner in owners:
        job = make_job(f"held-by-{owner}")
        await store.insert_job(job)
        [won] = await store.claim_jobs([claim_of(job, owner=owner, until=until)], T0)
        await store.insert_executions([running(won, won.lease.token)])  # type: ignore[union-attr]
        jobs[owner] = won
    return jobs


async def test_the_instances_beats_are_read_as_written(store: Store) -> None:
    assert await store.instances() == {}
    await store.beat("a", T0)
    await store.beat("b", T0 - timedelta(hours=1, microseconds=1))
    await store.beat("a", T0 + timedelta(seconds=3, microseconds=7))
    assert await store.instances() == {
        "a": T0 + timedelta(seconds=3, microseconds=7),
        "b": T0 - timedelta(hours=1, microseconds=1),
    }


async def test_a_beat_answers_every_instances_beat_its_own_at_now(store: Store) -> None:
    """What the heartbeat reads after each beat, with the beat itself (one round trip where
    the store can): its own beat as just written, the others' as stored."""
    assert await store.beat("a", T0) == {"a": T0}
    await store.beat("b", T0 - timedelta(hours=1, microseconds=1))
    later = T0 + timedelta(seconds=3, microseconds=7)
    expected = {"a": later, "b": T0 - timedelta(hours=1, microseconds=1)}
    assert await store.beat("a", later, InstanceStatus("1.4.0", T0, 2)) == expected
    assert await store.instances() == expected


async def test_instances_are_forgotten_only_while_their_beat_is_the_one_found_dead(
    store: Store,
) -> None:
    """A paused instance that beat again after it was found dead is not forgotten."""
    for instance in ("dead", "came-back", "alive"):
        await store.beat(instance, T0)
    await store.beat("came-back", T0 + timedelta(seconds=30))
    await store.forget_instances({"dead": T0, "came-back": T0})
    assert await store.instances() == {"came-back": T0 + timedelta(seconds=30), "alive": T0}
    await store.forget_instances({})
    assert set(await store.instances()) == {"came-back", "alive"}


async def test_the_leases_of_instances_found_dead_end_for_every_clock(store: Store) -> None:
    """Ended: reaped at once by any instance, whatever its clock (here a day behind the
    leases'), and only those: the caller's own, a live instance's and one that never beat are
    left alone."""
    jobs = await held_by_each(store, ("dead", "alive", "me", "unknown"), T0 + timedelta(hours=1))
    for owner in ("dead", "alive", "me"):
        await store.beat(owner, T0)
    ended = await store.end_leases(["dead", "gone-without-leases"])
    assert ended == [(jobs["dead"].id, None)], "the jobs whose leases ended, for their locks"
    behind = T0 - timedelta(days=1)
    reaped = await store.reap_expired_leases(behind, instance="me")
    assert [(e.job_name, e.status) for e in reaped] == [("held-by-dead", Status.ABANDONED)]
    for owner in ("alive", "me", "unknown"):
        kept = await store.get_job_by_name(f"held-by-{owner}")
        assert kept is not None and kept.lease is not None and kept.lease.owner == owner
    assert await store.end_leases(["dead"]) == []
    assert await store.end_leases([]) == []


async def test_the_reaper_judges_by_its_clock_only_its_own_leases_and_those_of_the_unbeating(
    store: Store,
) -> None:
    """An expiry is written by its owner's clock: a live instance's is never compared with the
    reaper's, which may be hours ahead of it (a wall clock stepped forward, or skewed)."""
    await held_by_each(store, ("me", "alive", "unknown"), T0 + timedelta(minutes=5))
    for owner in ("me", "alive"):
        await store.beat(owner, T0)
    ahead = T0 + timedelta(hours=1)
    reaped = await store.reap_expired_leases(ahead, instance="me")
    assert sorted(e.job_name for e in reaped) == ["held-by-me", "held-by-unknown"]
    kept = await store.get_job_by_name("held-by-alive")
    assert kept is not None and kept.lease is not None and kept.lease.owner == "alive"
    [execution] = await store.list_executions(ExecutionQuery(job_id=kept.id))
    assert execution.status is Status.RUNNING
    reaped = await store.reap_expired_leases(ahead, instance="alive")
    assert [e.job_name for e in reaped] == ["held-by-alive"], "its owner reaps it, by its clock"


async def test_starved_jobs_come_first_oldest_first_whatever_their_priority(store: Store) -> None:
    jobs = [
        make_job("critical-new", priority=Priority.CRITICAL, next_run_at=T0 - timedelta(seconds=5)),
        make_job("low-starved", priority=Priority.LOW, next_run_at=T0 - timedelta(minutes=3)),
        make_job("normal-starved", next_run_at=T0 - timedelta(minutes=2)),
        make_job("low-new", priority=Priority.LOW, next_run_at=T0 - timedelta(seconds=1)),
    ]
    for job in jobs:
        await store.insert_job(job)
    plain = [j.name for j in await store.due_jobs(T0, 10)]
    assert plain == ["critical-new", "normal-starved", "low-starved", "low-new"]
    bound = T0 - timedelta(minutes=1)
    aged = [j.name for j in await store.due_jobs(T0, 10, DueFilter(starved_before=bound))]
    assert aged == ["low-starved", "normal-starved", "critical-new", "low-new"]
    assert [j.name for j in await store.due_jobs(T0, 3, DueFilter(starved_before=bound))] == aged[
        :3
    ]


async def test_jobs_named_first_come_before_all_else_due_each_once(store: Store) -> None:
    """The jobs whose runs a crash stranded (the engine names them) go before the critical and
    the starved; those named but not due, or held, are left out; no job comes twice."""
    jobs = [
        make_job("critical", priority=Priority.CRITICAL, next_run_at=T0 - timedelta(seconds=5)),
        make_job("starved", priority=Priority.LOW, next_run_at=T0 - timedelta(minutes=3)),
        make_job("stranded-a", priority=Priority.LOW, next_run_at=T0 - timedelta(seconds=2)),
        make_job("stranded-b", next_run_at=T0 - timedelta(seconds=3)),
        make_job("not-due", next_run_at=T0 + timedelta(minutes=1)),
        make_job("held", next_run_at=T0 - timedelta(seconds=4)),
        make_job("normal", next_run_at=T0 - timedelta(seconds=1)),
    ]
    for job in jobs:
        await store.insert_job(job)
    await claimed(store, jobs[5])
    named = [job.id for job in jobs[2:6]]
    bound = T0 - timedelta(minutes=1)

    plain = [j.name for j in await store.due_jobs(T0, 10, DueFilter(first=named))]
    assert plain == ["stranded-b", "stranded-a", "critical", "normal", "starved"]
    aged = [
        j.name for j in await store.due_jobs(T0, 10, DueFilter(starved_before=bound, first=named))
    ]
    assert aged == ["stranded-b", "stranded-a", "starved", "critical", "normal"]
    assert [j.name for j in await store.due_jobs(T0, 3, DueFilter(first=named))] == plain[:3]
    assert [j.name for j in await store.due_jobs(T0, 1, DueFilter(first=named))] == ["stranded-b"]


# -- the outbox: execution events written with the executions -----------------------------------

SOURCE = "instance-a"


async def test_events_are_written_with_the_executions_and_listed_in_order(store: Store) -> None:
    first, second = make_job("first"), make_job("second")
    for job in (first, second):
        await store.insert_job(job)
    runs = [running(await claimed(store, job), 1) for job in (first, second)]
    await store.insert_executions(runs, event_source=SOURCE)
    ended = replace(runs[0], status=Status.SUCCESS, finished_at=T0 + timedelta(seconds=1))
    await store.write_ends([RunEnd(ended, None)], event_source=SOURCE)

    unsent = await store.unsent_events(10)

    assert [(e.job_id, e.event["type"]) for e in unsent] == [
        (first.id, "job.execution.started"),
        (second.id, "job.execution.started"),
        (first.id, "job.execution.success"),
    ]
    assert [e.id for e in unsent] == [e.event["id"] for e in unsent]
    assert unsent[0].id == f"{runs[0].id}:running", "stable: the execution and its status"
    assert unsent[2].event["source"] == "tickd/instance-a"
    assert unsent[2].event["data"]["id"] == runs[0].id
    assert unsent[2].written_at == T0 + timedelta(seconds=1)
    assert await store.outbox_backlog() == OutboxBacklog(unsent=3, oldest_written_at=T0)
    assert [e.id for e in await store.unsent_events(2)] == [e.id for e in unsent[:2]]


async def test_an_event_written_twice_is_stored_once(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    run = running(await claimed(store, job), 1)
    ended = replace(run, status=Status.FAILED, finished_at=T0 + timedelta(seconds=1))
    for _ in range(2):  # a replayed batch, after a lost connection
        await store.insert_executions([run], event_source=SOURCE)
        await store.write_ends([RunEnd(ended, None)], event_source=SOURCE)

    assert [e.event["type"] for e in await store.unsent_events(10)] == [
        "job.execution.started",
        "job.execution.failed",
    ]


async def test_reaped_executions_write_their_abandoned_events(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    [won] = await store.claim_jobs([claim_of(job, until=T0 + timedelta(seconds=5))], T0)
    run = running(won, 1)
    await store.insert_executions([run], event_source=SOURCE)

    await store.reap_expired_leases(T0 + timedelta(seconds=6), event_source=SOURCE)

    [_started, abandoned] = await store.unsent_events(10)
    assert abandoned.id == f"{run.id}:abandoned"
    assert abandoned.event["data"]["error"]["type"] == "LeaseExpired"


async def test_without_a_source_no_event_is_written(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    await store.insert_executions([running(await claimed(store, job), 1)])
    assert await store.unsent_events(10) == []
    assert await store.outbox_backlog() == OutboxBacklog(unsent=0, oldest_written_at=None)


async def test_sent_events_leave_the_backlog_and_are_pruned_later(store: Store) -> None:
    jobs = [make_job(f"job-{i}") for i in range(3)]
    for job in jobs:
        await store.insert_job(job)
    runs = [running(await claimed(store, job), 1) for job in jobs]
    await store.insert_executions(runs, event_source=SOURCE)
    events = await store.unsent_events(10)

    await store.mark_events_sent([events[0].id, events[2].id, "unknown"], T0)

    assert [e.id for e in await store.unsent_events(10)] == [events[1].id]
    assert (await store.outbox_backlog()).unsent == 1
    assert await store.prune_sent_events(T0, limit=10) == 0, "not sent before T0"
    assert await store.prune_sent_events(T0 + timedelta(minutes=5), limit=1) == 1
    assert await store.prune_sent_events(T0 + timedelta(minutes=5), limit=10) == 1
    assert [e.id for e in await store.unsent_events(10)] == [events[1].id], "unsent stays"


async def test_unsent_events_survive_a_reopen(store: Store) -> None:
    job = make_job()
    await store.insert_job(job)
    await store.insert_executions([running(await claimed(store, job), 1)], event_source=SOURCE)
    before = await store.unsent_events(10)

    reopened = reopen(store)
    await reopened.open()
    try:
        assert await reopened.unsent_events(10) == before
    finally:
        await reopened.close()


def reopen(store: Store) -> Store:
    """Another store on the same database, as after a restart."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(f"sqlite:///{store._path}")
    if isinstance(store, PostgresStore):
        return PostgresStore(store._url)
    assert isinstance(store, MongoStore)
    return MongoStore(store.database.client, database=store.database.name)


async def test_requests_of_handlers_at_their_limit_are_left_out_before_the_limit(
    store: Store,
) -> None:
    capped, other = make_job("capped", "capped"), make_job("other", "noop")
    for job in (capped, other):
        await store.insert_job(job)
    queued = [request_for(capped, not_before=T0 - timedelta(seconds=s)) for s in (3, 2)]
    wanted = request_for(other, not_before=T0 - timedelta(seconds=1))
    await store.insert_run_requests([*queued, wanted])
    due = await store.due_run_requests(T0, 1, exclude_handlers=["capped"])
    assert [(r.id, j.id) for r, j in due] == [(wanted.id, other.id)]
    assert len(await store.due_run_requests(T0, 10)) == 3


async def test_requests_of_domains_at_their_cap_are_left_out_before_the_limit(
    store: Store,
) -> None:
    capped = make_job("capped", domain="busy")
    other, default = make_job("other", domain="quiet"), make_job("in-default")
    for job in (capped, other, default):
        await store.insert_job(job)
    queued = [request_for(capped, not_before=T0 - timedelta(seconds=s)) for s in (3, 2)]
    wanted = request_for(other, not_before=T0 - timedelta(seconds=1))
    await store.insert_run_requests([*queued, wanted, request_for(default, not_before=T0)])
    due = await store.due_run_requests(T0, 1, exclude_domains=["busy"])
    assert [(r.id, j.id) for r, j in due] == [(wanted.id, other.id)]
    due = await store.due_run_requests(T0, 10, exclude_domains=["busy", "default"])
    assert [j.id for _, j in due] == [other.id]
    assert len(await store.due_run_requests(T0, 10)) == 4


# -- sharded occurrences (scheduler/schedule/shards.py) --------------------------------------------


async def test_shards_round_trip_on_jobs_executions_and_run_requests(store: Store) -> None:
    job = make_job("sharded", shards=8)
    await store.insert_job(job)
    assert await store.get_job(job.id) == job
    fewer = await store.replace_job(replace(job, shards=3), job.revision, change_of(job, "update"))
    assert fewer is not None and fewer.shards == 3, "shards are part of the definition"

    shard = replace(ended(job, T0, Status.FAILED), shard=5, shards=8)
    await store.insert_executions([shard])
    assert await store.get_execution(shard.id) == shard
    request = replace(request_for(job), shard=5, shards=8)
    await store.insert_run_requests([request])
    [(due, _)] = await store.due_run_requests(T0, 10)
    assert due == request


async def started(store: Store, shards: int) -> tuple[Job, list[RunRequest]]:
    """A sharded job claimed, its occurrence handed to its shards; with their entries."""
    job = make_job("sharded", shards=shards)
    await store.insert_job(job)
    won = await claimed(store, job)
    assert won.lease is not None
    entries = shard_entries(won, T0, T0, T0)
    until = T0 + timedelta(minutes=5)
    assert await store.start_occurrence(job.id, won.lease.token, until, entries)
    return won, entries


async def claimed_shards(
    store: Store, job: Job, entries: list[RunRequest], *, owner: str = OWNER, now: datetime = T0
) -> list[RunRequest]:
    claims = [claim_of(job, owner=owner, until=now + timedelta(minutes=1)) for _ in entries]
    won = await store.claim_run_requests(entries, claims, now, event_source=SOURCE)
    return [entry for entry, _ in won]


def shard_run(job: Job, entry: RunRequest) -> Execution:
    assert entry.lease is not None and entry.shard is not None
    return replace(running(job, entry.lease.token), shard=entry.shard, shards=entry.shards or 1)


async def test_a_started_occurrence_queues_its_shards_each_claimed_with_its_own_token(
    store: Store,
) -> None:
    job, entries = await started(store, 3)
    stored = await store.get_job(job.id)
    assert stored is not None and stored.lease is not None
    assert (stored.lease.owner, stored.lease.token) == (OCCURRENCE_OWNER, 1), "no instance's"
    assert await store.due_jobs(T0, 10) == [], "the occurrence holds the job"

    due = await store.due_run_requests(T0, 10)
    assert [(entry.shard, j.id) for entry, j in due] == [(0, job.id), (1, job.id), (2, job.id)]
    won = await claimed_shards(store, job, [entry for entry, _ in due])
    assert [entry.shard for entry in won] == [0, 1, 2]
    tokens = [entry.lease.token for entry in won if entry.lease is not None]
    assert tokens == [shard_fence(1, shard) + 1 for shard in range(3)], "a token per shard"
    assert await store.due_run_requests(T0, 10) == [], "each is leased now"
    assert await claimed_shards(store, job, entries, owner="b") == [], "compare-and-set"


async def test_an_occurrence_is_started_only_under_its_claims_token(store: Store) -> None:
    job = make_job("sharded", shards=2)
    await store.insert_job(job)
    won = await claimed(store, job)
    entries = shard_entries(won, T0, T0, T0)
    assert not await store.start_occurrence(job.id, 99, T0 + timedelta(minutes=5), entries)
    assert await store.due_run_requests(T0, 10) == []


async def test_the_last_shard_to_end_ends_the_occurrence_once(store: Store) -> None:
    job, entries = await started(store, 2)
    first, second = await claimed_shards(store, job, entries)
    runs = [shard_run(job, first), shard_run(job, second)]
    await store.insert_executions(runs)

    done = replace(runs[0], status=Status.SUCCESS, finished_at=T0, attempts=1)
    assert await store.write_ends([RunEnd(done, None, shard=first)]) == [True]
    assert await store.get_execution(done.id) == done
    assert [e.ended is not None for e in await store.occurrence_shards(job.id, 1)] == [True, False]
    still = await store.get_job(job.id)
    assert still is not None and still.lease is not None and still.next_run_at == T0

    fenced = replace(runs[1], token=first.lease.token if first.lease else 0, finished_at=T0)
    assert await store.write_ends([RunEnd(fenced, None, shard=second)]) == [False]
    last = replace(runs[1], status=Status.FAILED, finished_at=T0 + timedelta(seconds=5))
    assert await store.write_ends([RunEnd(last, None, shard=second)]) == [True]
    ended = await store.occurrence_shards(job.id, 1)
    assert [(e.shard, e.ended and e.ended.status) for e in ended] == [
        (0, Status.SUCCESS),
        (1, Status.FAILED),
    ]

    advance = advance_to(T0 + timedelta(minutes=1), last)
    assert await store.end_occurrence(job.id, 1, advance)
    assert not await store.end_occurrence(job.id, 1, advance), "two last shards end it once"
    after = await store.get_job(job.id)
    assert after is not None and after.lease is None
    assert after.next_run_at == T0 + timedelta(minutes=1)
    assert await store.occurrence_shards(job.id, 1) == []


async def test_a_shard_whose_lease_expired_is_taken_over_and_its_run_abandoned(
    store: Store,
) -> None:
    job, entries = await started(store, 2)
    [lost, kept] = await claimed_shards(store, job, entries)
    runs = [shard_run(job, lost), shard_run(job, kept)]
    await store.insert_executions(runs)
    assert await store.renew_shard_lease(
        kept, kept.lease.token if kept.lease else 0, T0 + timedelta(minutes=5), T0
    )

    later = T0 + timedelta(minutes=2)  # the first shard's lease (1 minute) has expired
    due = await store.due_run_requests(later, 10)
    assert [entry.id for entry, _ in due] == [lost.id], "the expired one only"
    [again] = await claimed_shards(store, job, [entry for entry, _ in due], owner="b", now=later)
    assert again.lease is not None and lost.lease is not None
    assert (again.lease.owner, again.lease.token) == ("b", lost.lease.token + 1)
    abandoned = await store.get_execution(runs[0].id)
    assert abandoned is not None and abandoned.status is Status.ABANDONED
    assert f"{runs[0].id}:abandoned" in {e.id for e in await store.unsent_events(10)}
    other = await store.get_execution(runs[1].id)
    assert other is not None and other.status is Status.RUNNING, "the other shard runs on"

    late = replace(runs[0], status=Status.SUCCESS, finished_at=later)
    assert await store.write_ends([RunEnd(late, None, shard=lost)]) == [False]
    held = await store.get_job(job.id)
    assert held is not None and held.lease is not None
    assert held.lease.until >= again.lease.until, "the occurrence outlives its shards"


async def test_the_shards_of_an_instance_found_dead_end_at_once(store: Store) -> None:
    job, entries = await started(store, 2)
    await store.beat("dead", T0)
    await store.beat("alive", T0)
    await claimed_shards(store, job, entries[:1], owner="dead")
    await claimed_shards(store, job, entries[1:], owner="alive")
    assert await store.end_leases(["dead"]) == [(job.id, 0)], "for its lock to be broken"
    before_its_expiry = T0 + timedelta(seconds=30)  # by the caller's clock
    due = await store.due_run_requests(before_its_expiry, 10, instance="alive")
    assert [entry.shard for entry, _ in due] == [0], "taken over, whatever the clock"
    stored = await store.get_job(job.id)
    assert stored is not None and stored.lease is not None, "the occurrence is no instance's"


async def test_the_shard_of_a_live_instance_is_not_taken_over_by_another_clock(
    store: Store,
) -> None:
    """Its lease looks expired to an instance whose clock is ahead: only its owner, or a
    heartbeat that found it dead, may say so."""
    job, entries = await started(store, 1)
    await store.beat("alive", T0)
    await claimed_shards(store, job, entries, owner="alive")
    ahead = T0 + timedelta(hours=1)
    assert await store.due_run_requests(ahead, 10, instance="other") == []
    assert await store.due_run_requests(ahead, 10) == []
    due = await store.due_run_requests(ahead, 10, instance="alive")
    assert [entry.shard for entry, _ in due] == [0], "its owner takes it back, by its clock"


async def test_an_occurrence_lives_while_a_shard_of_it_runs_on_a_live_instance(
    store: Store,
) -> None:
    """Its lease is no instance's and looks expired to a reaper whose clock is an hour ahead:
    not reaped (which would run the whole occurrence again) while a shard of it is leased by
    another instance that beats; once that instance is found dead, judged by time again."""
    job, entries = await started(store, 2)
    await store.beat("alive", T0)
    await claimed_shards(store, job, entries[:1], owner="alive")
    ahead = T0 + timedelta(hours=1)
    assert await store.reap_expired_leases(ahead, instance="other") == []
    held = await store.get_job(job.id)
    assert held is not None and held.lease is not None and held.lease.owner == OCCURRENCE_OWNER

    await store.end_leases(["alive"])
    await store.reap_expired_leases(ahead, instance="other")
    freed = await store.get_job(job.id)
    assert freed is not None and freed.lease is None


async def test_shards_given_back_are_due_again(store: Store) -> None:
    job, entries = await started(store, 2)
    won = await claimed_shards(store, job, entries)
    await store.give_back_shards([(entry, entry.lease.token) for entry in won if entry.lease])
    assert len(await store.due_run_requests(T0, 10)) == 2


async def test_a_rerun_of_a_shard_settles_only_that_shards_dead_letters(store: Store) -> None:
    job = make_job(shards=2)
    await store.insert_job(job)
    dead = [
        replace(ended(job, T0, Status.FAILED, dead_letter=DeadLetter.OPEN), shard=i, shards=2)
        for i in range(2)
    ]
    await store.write_ends([RunEnd(e, None) for e in dead])

    again = replace(ended(job, T0, finished=T0 + timedelta(hours=1)), shard=1, shards=2)
    await store.write_ends([RunEnd(again, None, settles=True)])

    by_id = {e.id: e.dead_letter for e in await store.list_executions(ExecutionQuery())}
    assert by_id == {dead[0].id: DeadLetter.OPEN, dead[1].id: DeadLetter.REDRIVEN, again.id: None}
