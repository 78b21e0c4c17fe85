"""Fire times ahead: of a stored job, or of a schedule before it is saved (DST transitions
marked)."""

from __future__ import annotations

from datetime import datetime

from api.jobs import to_schedule
from api.models import CountQuery, FireTime, PreviewOut, PreviewRequest
from api.routing import Call, Reply, Route
from api.v1 import JOB, load_job, state
from scheduler.model import Schedule
from scheduler.schedules import next_fire, zone


async def preview_job(call: Call[CountQuery, None]) -> Reply:
    job = await load_job(call)
    q = call.query
    return Reply(preview(job.schedule, job.name, state(call).clock.now(), q.count))


async def preview_schedule(call: Call[None, PreviewRequest]) -> Reply:
    body = call.body
    schedule = to_schedule(body.schedule)
    state(call).builder.check_schedule(schedule, body.name)
    return Reply(preview(schedule, body.name, body.after or state(call).clock.now(), body.count))


def preview(schedule: Schedule, name: str, after: datetime, count: int) -> PreviewOut:
    tz = zone(getattr(schedule, "timezone", "UTC"))
    times: list[FireTime] = []
    previous_offset = after.astimezone(tz).utcoffset()
    current: datetime | None = after
    while current is not None and len(times) < count:
        current = next_fire(schedule, current, job_name=name)
        if current is None:
            break
        local = current.astimezone(tz)
        times.append(
            FireTime(
                at=current,
                local=local.isoformat(),
                dst_transition=local.utcoffset() != previous_offset,
            )
        )
        previous_offset = local.utcoffset()
    return PreviewOut(times=times)


JOB_PREVIEW_ROUTE = Route(
    "GET",
    JOB + "/preview",
    preview_job,
    "The job's next fire times",
    "read",
    PreviewOut,
    query=CountQuery,
    tag="schedules",
)


SCHEDULE_PREVIEW_ROUTE = Route(
    "POST",
    "/v1/schedules/preview",
    preview_schedule,
    "Fire times of a schedule before saving it, DST transitions marked",
    "read",
    PreviewOut,
    body=PreviewRequest,
    tag="schedules",
)
