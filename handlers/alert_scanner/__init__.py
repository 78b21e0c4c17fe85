"""`alert_scanner`: evaluates users' alert rules on parts and tells them, in the app and by email,
when something they care about happened.

A system job: seeded at boot as `alert_scanner` once `[handler_settings.alert_scanner]` is
configured or the demo runs (an unused feature stays out of the way), every five minutes (so it
first runs five minutes after a new deployment starts), a ten-minute timeout and no retries (the
next run is the retry; a scan is idempotent, so a retry would be harmless but is not needed). A
run scans back to back while more is due (scan.scan_until_done), in the first half of its time,
then sends the emails: a backlog is worked off run after run, and a run with nothing due costs
two indexed queries. The work is in scan.py, which takes its ports explicitly and is tested
without the engine; the rule semantics are in rules.py and docs/alert-rules.md.

Params (all optional; the defaults are the seed's numbers): `alerts_per_scan`, `max_rules`,
`lookup_concurrency`, `parts_per_lookup`, `scans_per_run`, `smtp_concurrency`,
`emails_per_scan` (per run), `send_attempts`, `email_scans` (runs with a failed delivery before
a notification is given up) and `from_address`.

Settings, from `[handler_settings.alert_scanner]` (settings.py): `app_base_url` (links to the
product app), `public_base_url` and `unsubscribe_secret` (one-click unsubscribe links, answered
by tickd's API at /unsubscribe), `max_items` (items listed in one email).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits, scan_until_done
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.product_store import PRODUCTS
from tickd.scheduler.plugin.api import HandlerContext, IntervalSchedule, Result, SystemJob, handler


def _bounded(default: int, maximum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "maximum": maximum, "default": default}


LIMITS = ScanLimits()
PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "alerts_per_scan": _bounded(LIMITS.alerts_per_scan, 10_000),
        "max_rules": _bounded(LIMITS.max_rules, 100_000),
        "lookup_concurrency": _bounded(LIMITS.lookup_concurrency, 200),
        "parts_per_lookup": _bounded(LIMITS.parts_per_lookup, 1_000),
        "scans_per_run": _bounded(LIMITS.scans_per_run, 10_000),
        "smtp_concurrency": _bounded(LIMITS.email.concurrency, 50),
        "emails_per_scan": _bounded(LIMITS.email.notifications_per_scan, 10_000),
        "send_attempts": _bounded(LIMITS.email.send_attempts, 10),
        "email_scans": _bounded(LIMITS.email.scans_before_giving_up, 100),
        "from_address": {"type": "string", "maxLength": 254},
    },
    "additionalProperties": False,
}
# Names of the integer params, and where they go.
SCAN_PARAMS = (
    "alerts_per_scan",
    "max_rules",
    "lookup_concurrency",
    "parts_per_lookup",
    "scans_per_run",
)
EMAIL_PARAMS = {
    "smtp_concurrency": "concurrency",
    "emails_per_scan": "notifications_per_scan",
    "send_attempts": "send_attempts",
    "email_scans": "scans_before_giving_up",
}
SYSTEM_JOB = SystemJob(
    # Often, because a run with nothing due is cheap, and a rule's cooldown (60 minutes by
    # default) is only kept if its alert is read soon after it falls due.
    schedule=IntervalSchedule(every_seconds=300),
    timeout_seconds=600,
    max_retries=0,
)


# The share of a run's time that scans may start in; the rest is the emails'.
SCANNING_SHARE = 0.5


def limits_from(params: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> ScanLimits:
    """The scan's limits from a job's params and the handler's settings. The API checks the
    schema on the way in; this guards against what reached the store another way, with a
    message naming the param or the setting."""
    unknown = set(params) - set(PARAMS["properties"])
    if unknown:
        raise ValueError(f"params: unknown {', '.join(sorted(unknown))}")
    scan_limits = {name: _positive(params, name) for name in SCAN_PARAMS if name in params}
    email_limits = {
        field: _positive(params, name) for name, field in EMAIL_PARAMS.items() if name in params
    }
    from_address = params.get("from_address")
    if from_address is not None and not isinstance(from_address, str):
        raise ValueError("params.from_address: a string")
    settings = EmailSettings.parse(config or {})
    email = EmailPolicy(**email_limits, from_address=from_address, settings=settings)
    return ScanLimits(**scan_limits, email=email)


def _positive(params: Mapping[str, Any], name: str) -> int:
    value = params[name]
    maximum = PARAMS["properties"][name]["maximum"]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValueError(f"params.{name}: a whole number from 1 to {maximum}")
    return value


# One scan at a time per daemon: a second would only lose every conditional write to the first.
@handler(params_schema=PARAMS, max_concurrency=1, system_job=SYSTEM_JOB, resources=(PRODUCTS,))
async def alert_scanner(ctx: HandlerContext) -> Result:
    limits = limits_from(ctx.params, ctx.config)
    now = ctx.clock.now()
    result = await scan_until_done(
        ctx.resource(PRODUCTS),
        ctx.mailer,
        ctx.clock,
        limits,
        until=now + (ctx.deadline - now) * SCANNING_SHARE,
        logger=ctx.logger,
    )
    return result.as_dict()
