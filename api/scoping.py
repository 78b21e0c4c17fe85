"""Tokens limited to domains (`domains` of an API token): such a token sees and changes only the
jobs of its domains, their executions, dead letters, history and run requests, and those domains'
settings; lists and figures leave the rest out.

Anything of another domain is answered as if it did not exist: the same 404 a missing one gets,
so a limited token cannot tell another domain's job from no job. An execution belongs to its
job's domain, read with the job: one whose job was deleted belongs to none, and only unlimited
tokens see it. Writing a job into a domain the token does not hold (a create, or a move) is a
403 naming `domain`: the client named that domain itself, so nothing of it is revealed, and the
body is valid; it is the token that lacks the right.
"""

from __future__ import annotations

from tickd.api.problems import ApiError, field_error
from tickd.api.routing import B, Call, Q
from tickd.scheduler.model import Execution, Job
from tickd.scheduler.ports.store_api import JobStore


def sees(call: Call[Q, B], domain: str) -> bool:
    """Whether the caller's token reaches `domain` (an unlimited one reaches every domain)."""
    return call.domains is None or domain in call.domains


def within(call: Call[Q, B], domain: str | None) -> frozenset[str] | None:
    """The domains a list reads: the token's (None: every one), narrowed to `domain` when the
    query names one; none at all when the token does not hold it, as for a domain without
    jobs."""
    if domain is None:
        return call.domains
    return frozenset({domain}) & call.domains if call.domains is not None else frozenset({domain})


def job_not_found(job_id: str) -> ApiError:
    return ApiError(404, "Not Found", f"no job with id {job_id!r}")


def execution_not_found(execution_id: str) -> ApiError:
    return ApiError(404, "Not Found", f"no execution with id {execution_id!r}")


def domain_not_found(name: str) -> ApiError:
    return ApiError(404, "Not Found", f"domain {name!r} has no settings stored")


def visible(call: Call[Q, B], job: Job | None) -> Job | None:
    """The job if the caller may see it; None, as if there were none, otherwise."""
    return job if job is not None and sees(call, job.domain) else None


def refuse_foreign_domain(call: Call[Q, B], domain: str) -> None:
    """403 naming `domain` for a job written into a domain the token does not hold."""
    if not sees(call, domain):
        held = ", ".join(sorted(call.domains or ()))
        raise field_error(
            "domain",
            f"this token writes jobs in its domains only ({held}), not in {domain!r}",
            403,
        )


async def executions_seen(
    call: Call[Q, B],
    jobs: JobStore,
    executions: list[Execution],
    domains: frozenset[str] | None = None,
) -> list[Execution]:
    """Those of `executions` the caller may see (their job is in one of its domains), each job
    read once; an unlimited token sees every one without a read. `domains` narrows them to
    those domains besides (a list's `domain`)."""
    if call.domains is None and domains is None:
        return executions
    seen = {}
    for job_id in dict.fromkeys(e.job_id for e in executions):
        job = visible(call, await jobs.get_job(job_id))
        seen[job_id] = job is not None and (domains is None or job.domain in domains)
    return [e for e in executions if seen[e.job_id]]
