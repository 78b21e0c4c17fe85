"""A deleted job's dead letters, on every store backend: deleting the job discards the ones
still unhandled (nothing would re-drive them), they stay readable, retention prunes them as it
prunes any other run, and another job's dead letters are left as they are."""

from __future__ import annotations

from datetime import timedelta

from tests.conftest import T0, make_job
from tests.contract.test_store import ended, stored_ids
from tickd.scheduler.model import DeadLetter, Status
from tickd.scheduler.ports.backends import ExecutionQuery, Retention, Store


async def test_deleting_a_job_discards_its_unhandled_dead_letters_and_retention_prunes_them(
    store: Store,
) -> None:
    gone, kept = make_job("gone"), make_job("kept")
    for job in (gone, kept):
        await store.insert_job(job)
    at = [T0 + timedelta(minutes=i) for i in range(3)]
    open_, redriving, redriven = (
        ended(gone, at[0], Status.FAILED, dead_letter=DeadLetter.OPEN),
        ended(gone, at[1], Status.FAILED, dead_letter=DeadLetter.REDRIVING),
        ended(gone, at[2], Status.FAILED, dead_letter=DeadLetter.REDRIVEN),
    )
    other = ended(kept, at[0], Status.FAILED, dead_letter=DeadLetter.OPEN)
    await store.insert_executions([open_, redriving, redriven, other])

    assert await store.delete_job(gone.id)
    states = {
        e.id: e.dead_letter
        for e in await store.list_executions(ExecutionQuery(job_id=gone.id, limit=10))
    }
    assert states == {
        open_.id: DeadLetter.DISCARDED,
        redriving.id: DeadLetter.DISCARDED,
        redriven.id: DeadLetter.REDRIVEN,
    }
    assert await store.count_dead_letters() == {(kept.handler, kept.domain): 1}

    later = T0 + timedelta(days=31)
    assert await store.prune_executions(Retention(days=30, max_per_job=0), later, limit=100) == 2
    # As for any job, its newest run is kept; so is the open dead letter of the live job.
    assert await stored_ids(store) == {redriven.id, other.id}
