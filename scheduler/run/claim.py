"""Claiming due runs: each run's lock (the lock service), then its lease (a fenced
compare-and-set in the store), both in batches; and giving them back when a run never starts."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import Claim, Lock, LockUnavailable, StoreError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_api import RunRequestStore
from tickd.scheduler.ports.store_engine import DispatchStore
from tickd.scheduler.run.ledger import DueRun

log = logging.getLogger("tickd.engine")


# A lock taken for a claim lives this long at most until the claim is written; then it is
# extended through the run (its wait, its timeout and the lock margin).
CLAIM_LOCK_SECONDS = 30.0


class Claimer:
    def __init__(
        self,
        *,
        settings: Settings,
        store: DispatchStore,
        requests: RunRequestStore,
        lock: Lock,
        clock: Clock,
        metrics: Metrics,
        event_source: str | None,
    ) -> None:
        self.settings = settings
        # The store's roles the claimer uses: claims and leases, and the requests it puts back.
        self.store = store
        self.requests = requests
        self.lock = lock
        self.clock = clock
        self.metrics = metrics
        self.event_source = event_source  # a request's claim writes its event

    async def claim(self, runs: list[DueRun], now: datetime, token: str) -> list[DueRun]:
        """The runs this instance won: locked, then claimed (fenced); the locks of the runs lost
        go back, those of the runs won are held through them."""
        locked = await self._lock(runs, token)
        try:
            won = await self._claim(locked, now)
        except StoreError:  # the locks go back at once, not when their time-to-live runs out
            await self.give_back([(run, token) for run in locked], "claim_failed")
            raise
        await self._release_lost(locked, won, token)
        await self._hold_through_the_runs(won, token)
        return won

    async def _claim(self, runs: list[DueRun], now: datetime) -> list[DueRun]:
        """A scheduled run claims its job as the due query read it; a requested one claims the
        job whenever it is due, and takes its request off the queue with it."""
        requested = [run for run in runs if run.request is not None]
        scheduled = [run.job for run in runs if run.request is None and not run.claimed]
        won: list[DueRun] = [run for run in runs if run.claimed]  # as they were read
        if requested:
            requests = [run.request for run in requested if run.request is not None]
            claims = [self._claim_of(run.job, now, None) for run in requested]
            pairs = await self.store.claim_run_requests(
                requests, claims, now, event_source=self.event_source
            )
            won += [DueRun(job, r) for r, job in pairs]
        if scheduled:
            claims = [self._claim_of(job, now, job.next_run_at) for job in scheduled]
            won += [DueRun(job) for job in await self.store.claim_jobs(claims, now)]
        return won

    async def _release_lost(self, locked: list[DueRun], won: list[DueRun], token: str) -> None:
        won_keys = {run.lock_key for run in won}
        lost = {run.lock_key for run in locked if run.lock_key not in won_keys}
        self.metrics.claims_lost.inc(len(lost))
        if lost:
            await self.lock.release_many(list(lost), token)

    def _lock_ttls(self, runs: list[DueRun]) -> dict[str, float]:
        """Each lock lives through the wait for the run's time, its timeout and a margin."""
        margin = self.settings.lock_margin_seconds
        now = self.clock.now()
        return {
            run.lock_key: run.wait_seconds(now) + run.job.timeout_seconds + margin for run in runs
        }

    async def _lock(self, runs: list[DueRun], token: str) -> list[DueRun]:
        """Locks are taken for the claim only (CLAIM_LOCK_SECONDS at most), and extended through
        the runs once they are claimed (_hold_through_the_runs): an instance killed between its
        locks and its claim, which leaves no lease for a takeover to end, would otherwise keep
        those jobs from everyone for their whole timeout."""
        keys = [run.lock_key for run in runs]  # each made once: a property, made anew each time
        ttls = {
            key: min(CLAIM_LOCK_SECONDS, ttl)
            for key, ttl in zip(keys, self._lock_ttls(runs).values(), strict=True)
        }
        held = await self.lock.acquire_many(ttls, token)
        self.metrics.lock_contention.inc(len(runs) - len(held))
        return [run for key, run in zip(keys, runs, strict=True) if key in held]

    async def _hold_through_the_runs(self, won: list[DueRun], token: str) -> None:
        """One round trip for the batch. Should it fail, the claims stand: the leases fence the
        runs, and the locks expire within CLAIM_LOCK_SECONDS."""
        if not won:
            return
        try:
            await self.lock.extend_many(self._lock_ttls(won), token)
        except LockUnavailable as exc:
            log_event(log, "lock.extend_failed", level=logging.WARNING, error=str(exc))

    def _claim_of(self, job: Job, now: datetime, next_run_at: datetime | None) -> Claim:
        """The lease covers the wait for the run's time (lookahead), its timeout and a margin."""
        margin = self.settings.lease_margin_seconds
        starts = max(now, next_run_at) if next_run_at is not None else now
        return Claim(
            job_id=job.id,
            revision=job.revision,
            next_run_at=next_run_at,
            owner=self.settings.instance_id,
            until=starts + timedelta(seconds=job.timeout_seconds + margin),
        )

    async def let_go(self, runs: list[DueRun]) -> None:
        """Runs the store claimed as it read them that the fetch left (over their handler's
        limit, beyond the pool's room): their leases go back at once, in one statement, so that
        the next fetch, here or elsewhere, finds them due. They took no lock."""
        leases = [(run.job.id, run.job.lease.token) for run in runs if run.job.lease]
        if not leases:
            return
        try:
            await self.store.give_back(leases)
        except StoreError as exc:
            log_event(log, "fetch.leases_left_to_expire", level=logging.WARNING, error=str(exc))

    async def give_back(self, held: list[tuple[DueRun, str]], why: str) -> None:
        """The leases and locks of runs claimed but never started, each with its lock token."""
        shards = [(run.shard_entry, run.token) for run, _ in held if run.shard_entry is not None]
        jobs = [run for run, _ in held if run.shard_entry is None]
        leases = [(run.job.id, run.job.lease.token) for run in jobs if run.job.lease]
        # A request was taken off the queue with its claim: asked for again (the same id, so
        # never queued twice), or it would be lost. A shard entry stays queued: its lease goes.
        requests = [run.request for run in jobs if run.request is not None]
        try:
            if requests:
                await self.requests.insert_run_requests(requests)
            await self.store.give_back(leases)
            if shards:
                await self.store.give_back_shards(shards)
            for token in {token for _, token in held}:
                keys = [run.lock_key for run, lock in held if lock == token]
                await self.lock.release_many(keys, token)
        except (StoreError, LockUnavailable) as exc:
            log_event(log, f"{why}.leases_left_to_expire", level=logging.WARNING, error=str(exc))
