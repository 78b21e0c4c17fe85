"""Fire times ahead: of a stored job, or of a schedule before it is saved (DST transitions
marked)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickd.api.jobs import to_schedule
from tickd.api.models import FireTime, JobPreviewQuery, PreviewOut, PreviewRequest
from tickd.api.routing import Call, Reply, Route
from tickd.api.v1 import JOB, load_job, state
from tickd.scheduler.model import CronSchedule, Schedule
from tickd.scheduler.schedule.schedules import NoFireTime, clock_changed, next_fire, zone


async def preview_job(call: Call[JobPreviewQuery, None]) -> Reply:
    job = await load_job(call)
    q = call.query
    return Reply(preview(job.schedule, job.name, q.after or state(call).clock.now(), q.count))


async def preview_schedule(call: Call[None, PreviewRequest]) -> Reply:
    body = call.body
    schedule = to_schedule(body.schedule)
    state(call).builder.check_schedule(schedule, body.name)
    return Reply(preview(schedule, body.name, body.after or state(call).clock.now(), body.count))


# A preview lists the fire times within a hundred years of `after`: a search walks the zone's
# clock changes one by one, and a hundred fire times of a date that recurs every 28 years (the
# fifth Monday of February) would walk 2,800 years of them, a second on the loop, per request.
PREVIEW_SPAN = timedelta(days=366 * 100)


def preview(schedule: Schedule, name: str, after: datetime, count: int) -> PreviewOut:
    # Only cron reads a wall clock; the others are on UTC, where the clocks never change.
    tz = zone(schedule.timezone) if isinstance(schedule, CronSchedule) else None
    horizon = after + min(PREVIEW_SPAN, datetime.max.replace(tzinfo=UTC) - after)
    times: list[FireTime] = []
    previous = after
    while len(times) < count:
        try:
            current = next_fire(schedule, previous, job_name=name)
        except NoFireTime:  # none left before the calendar ends
            break
        if current is None or current > horizon:
            break
        times.append(
            FireTime(
                at=current,
                local=current.astimezone(tz or UTC).isoformat(),
                # Marked where a change is crossed, even by a job whose UTC offset comes back the
                # same (a yearly one crosses two changes).
                dst_transition=tz is not None and clock_changed(tz, previous, current),
            )
        )
        previous = current
    return PreviewOut(times=times)


JOB_PREVIEW_ROUTE = Route(
    "GET",
    JOB + "/preview",
    preview_job,
    "The job's next fire times",
    "read",
    PreviewOut,
    query=JobPreviewQuery,
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
