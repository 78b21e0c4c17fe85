"""The store's roles ops reach through the API (and the CLI, and seeding): jobs and their
history, the runs asked for, executions and their dead letters, the views, the domains' settings.
Part of the store's contract (scheduler/ports/store.py, Store), each method documented once,
here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.model import CancelRequest, DeadLetter, Execution, Job
from tickd.scheduler.ports.store_values import (
    Attention,
    ExecutionQuery,
    ExecutionStats,
    JobChange,
    JobQuery,
    JobSearch,
    RunRequest,
)


class JobStore(Protocol):
    """Jobs and their history, as ops change them: the API's jobs, the CLI, seeding."""

    async def insert_job(self, job: Job, change: JobChange | None = None) -> None:
        """Add a job, and its history entry with it; DuplicateJobName if its name is taken."""

    async def replace_job(
        self, job: Job, expected_revision: int, change: JobChange, *, read: Job | None = None
    ) -> Job | None:
        """Write a job's definition (not its lease, fence or run state) if its revision is still
        `expected_revision`; the stored revision becomes expected_revision + 1. Returns the job
        as stored, or None if it changed meanwhile or is gone. DuplicateJobName on a taken name.

        With `read` (the job as the caller read it), the fields a run's end also moves
        (SCHEDULE_STATE) are written only where `job` changes them: a run's end does not bump
        the revision, and what it wrote since the read must not be put back (the occurrence it
        ran would be due again)."""

    async def insert_missing_jobs(self, jobs: Sequence[Job]) -> list[Job]:
        """Add the jobs whose names are not taken yet, leave the others as they are (seeding).

        Returns the jobs that were added."""

    async def get_job(self, job_id: str) -> Job | None:
        """The job as stored now (lease and run state included); None if there is none."""

    async def get_job_by_name(self, name: str) -> Job | None:
        """The job of that exact name (names are unique); None if there is none."""

    async def list_jobs(self, query: JobQuery | None = None) -> list[Job]:
        """Jobs ordered by name, filtered and paged by the query."""

    async def delete_job(
        self, job_id: str, change: JobChange | None = None, *, expected_revision: int | None = None
    ) -> bool:
        """Remove a job (its executions and history stay), and with it its pending run requests;
        its unhandled dead letters (open, redriving) become discarded. False if there was none.
        With `expected_revision`, only if the job is still at that revision (compare-and-set, as
        replace_job): False, and nothing removed, otherwise."""

    async def list_changes(
        self, job_id: str, *, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[JobChange]:
        """A job's history, newest first; `before` is the (at, id) of the previous page's last."""

    async def record_change(self, change: JobChange) -> None:
        """A history entry for an action that does not change the job (trigger, retry...)."""


class RunRequestStore(Protocol):
    """Runs asked for outside the schedule (trigger, retry, backfill, re-drive): the API queues
    them and asks what is queued; the engine queues the re-drives and the requests it gives
    back."""

    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        """Queue runs outside the schedule, in one batch. A request whose id is queued already
        is left as it is (idempotent)."""

    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        """Whether a run of this occurrence is queued and not yet taken."""

    async def count_pending_requests(self, job_id: str, *, reason: str) -> int:
        """How many of a job's requests for this reason (trigger...) are queued, not yet taken."""

    async def executions_at(self, job_id: str, scheduled_ats: Sequence[datetime]) -> set[datetime]:
        """Which of these occurrences of a job already have an execution or a run request."""


class ExecutionStore(Protocol):
    """Executions and their dead letters, as the API reads and re-drives them."""

    async def get_execution(self, execution_id: str) -> Execution | None:
        """The execution as stored now; None if there is none."""

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        """Newest first (by scheduled_at, then id)."""

    async def mark_dead_letters(
        self, execution_ids: Sequence[str], *, states: Sequence[DeadLetter], to: DeadLetter
    ) -> set[str]:
        """Compare-and-set: move each of these executions whose dead letter is in one of
        `states` to `to`. Returns the ids moved: of two callers racing on one dead letter (two
        re-drives), one wins, so an occurrence is never re-driven twice by one action. On
        FerretDB a filtered update is not atomic (see Store), so there the lock of the
        run, not this, keeps two runs of one job apart."""


class CancelRequestStore(Protocol):
    """Requests to stop a run: the API records them, the engine reads those of the runs on its
    workers once a tick, and the running view shows who asked."""

    async def request_cancel(self, request: CancelRequest) -> None:
        """Record that someone asked for this execution to stop; the first request for an
        execution stands (a second one changes nothing)."""

    async def cancel_requests(self, execution_ids: Sequence[str]) -> list[CancelRequest]:
        """The cancel requests of these executions, in one query: most have none."""


class ViewStore(Protocol):
    """The API's jobs list and the dashboard's overview (off the hot path)."""

    async def search_jobs(self, search: JobSearch) -> list[Job]:
        """A page of jobs: those the search's filters keep, in its order, after its cursor, at
        most `limit`; read through an index in that order, never every job."""

    async def count_jobs(self, search: JobSearch) -> int:
        """How many jobs the search's filters keep, whatever its cursor and limit."""

    async def execution_stats(
        self,
        since: datetime,
        until: datetime,
        bucket_seconds: int,
        *,
        domains: frozenset[str] | None = None,
    ) -> ExecutionStats:
        """Every execution due in [since, until), aggregated (see ExecutionStats); with
        `domains`, only those of jobs in them, as ExecutionQuery.domains. A store that bounds
        its reads in time counts the newest buckets first and, stopped, answers with those it
        counted whole and since when (`counted_since`), never with a stall."""

    async def attention(
        self,
        since: datetime,
        until: datetime,
        late_before: datetime,
        *,
        limit: int,
        domains: frozenset[str] | None = None,
    ) -> Attention:
        """What needs ops now, grouped by job (see Attention); failures are those due in
        [since, until). With `domains`, only the jobs of those domains and their executions."""


class DomainStore(Protocol):
    """The domains' settings (scheduler/domain_settings.py), one record a domain that has any,
    and how many jobs each domain holds: the API's domains, and its job writes, which check a
    domain's max_jobs."""

    async def list_domains(self) -> list[DomainSettings]:
        """Every record, by name (a domain without one has the defaults and is not listed)."""

    async def get_domain(self, name: str) -> DomainSettings | None:
        """The record of domain `name`; None if it has none (it then has the defaults)."""

    async def put_domain(self, settings: DomainSettings) -> DomainSettings:
        """Insert the record of `settings.name`, or replace it whole; returns it as stored."""

    async def delete_domain(self, name: str) -> bool:
        """Remove the record of domain `name` (it has the defaults again, and its jobs stay);
        False if it had none."""

    async def count_jobs_by_domain(self) -> dict[str, int]:
        """How many jobs each domain holds, in one read (a domain with none is not a key); the
        jobs stored before domains count in the default one."""
