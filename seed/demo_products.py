"""Demo parts and alerts for `make run`: the alert scanner has something to find at once.

Three users watch five parts with rules of every type. The parts' values arrive in the mixed
forms the real pipelines produce (`" 0.71 "`, `"usd"`, `"$2.95"`, `"HIGH"`, `true` for a flag,
`"end of life"`), each price with its currency (a code, or the symbol of a price string), and
the rules' cursors hold older values, so the first scan fires most of them: notifications in the
store and one .eml per user in the outbox. One rule uses an undefined pair (compliance `gt`) and
shows how a bad rule is reported on itself; one price rule has no baseline and only arms.

Seeding is idempotent: parts are upserted (current values), alerts inserted only when absent, so
a restart keeps the scanner's state and fires nothing again.

    await seed_demo_products(products)            # at boot, when seed_demo is on
    demo_scan_job(rules, now)                     # the demo job, seeded by name with the others
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from tickd.handlers.product_store import Doc, ProductStore
from tickd.scheduler.jobspec import JobRules, JobSpec
from tickd.scheduler.logs import log_event
from tickd.scheduler.model import IntervalSchedule, Job
from tickd.seed.jobs import seed_job

log = logging.getLogger("tickd.seed")

DEMO_SCAN_JOB = "demo-alert-scan"
# Often enough that the first notifications appear within a minute of `make run`.
DEMO_SCAN_EVERY_SECONDS = 15
DEMO_FROM_ADDRESS = "alerts@tickd.example"


async def seed_demo_products(products: ProductStore) -> int:
    """Upsert the demo parts, insert the demo alerts that are missing; returns alerts added."""
    await products.upsert_parts(demo_parts())
    added = await products.insert_missing_alerts(demo_alerts())
    log_event(log, "seed.demo_products", parts=len(demo_parts()), alerts_added=added)
    return added


def demo_scan_job(rules: JobRules, now: datetime) -> Job:
    """The alert scanner every 15 seconds (the system job runs it every five minutes)."""
    spec = JobSpec(
        name=DEMO_SCAN_JOB,
        handler="alert_scanner",
        schedule=IntervalSchedule(every_seconds=DEMO_SCAN_EVERY_SECONDS),
        params={"from_address": DEMO_FROM_ADDRESS},
        timeout_seconds=60,
    )
    return seed_job(rules, spec, now)


def demo_parts() -> list[Doc]:
    return [
        _part(
            "part-lm317t",
            "LM317T",
            price=" 0.71 ",
            priceCurrency="USD",
            riskScore="35",
            riskLevel="low",
            compliance={"RoHS": "yes", "REACH": "YES"},
            lifecycle="Active",
            alternates=["LM317TG", "lm317t-dg", "LM350T"],
        ),
        _part(
            "part-ne555p",
            "NE555P",
            price=0.45,
            priceCurrency="usd",
            riskScore=72,
            riskLevel="HIGH",
            compliance={"RoHS": True, "REACH": "no"},
            lifecycle="NRND",
            alternates=["TLC555CP", "LMC555CN"],
        ),
        _part(
            "part-atmega328p",
            "ATMEGA328P-PU",
            price="$2.95",
            riskScore=41,
            riskLevel="Medium",
            compliance={"RoHS": "Yes", "REACH": "Yes"},
            lifecycle="end of life",
            alternates=[],
        ),
        _part(
            "part-max232",
            "MAX232CPE",
            price=3.1,
            priceCurrency="EUR",
            riskScore=88,
            riskLevel="critical",
            compliance={"RoHS": "no", "REACH": "yes"},
            lifecycle="Obsolete",
            alternates=["MAX3232CPE"],
        ),
        _part(
            "part-stm32f103",
            "STM32F103C8T6",
            price=4.2,
            priceCurrency="EUR",
            riskScore=55,
            riskLevel="Medium",
            compliance={"RoHS": "YES"},
            lifecycle="production",
            alternates="GD32F103C8T6, APM32F103C8T6",
        ),
    ]


def demo_alerts() -> list[Doc]:
    ada, grace, linus = (
        ("user-ada", "ada@example.com"),
        ("user-grace", "grace@example.com"),
        ("user-linus", "linus@example.com"),
    )
    return [
        _alert(
            "demo-alert-ada-lm317t",
            ada,
            "part-lm317t",
            _rule("r1", "price_change", "gt", 10, baseline="0.62", cursor=0.62),
            _rule("r2", "newAlternate", "changed", None, cursor=["LM317TG", "LM317T-DG"]),
            _rule("r3", "risk_level", "gte", "High", cursor="Low"),
        ),
        _alert(
            "demo-alert-ada-ne555p",
            ada,
            "part-ne555p",
            _rule("r1", "risk", "gt", "70", cursor=64),
            _rule("r2", "lifecycle", "gte", "nrnd", cursor="Active"),
            _rule("r3", "compliance", "eq", "REACH=no", cursor="yes"),
        ),
        _alert(
            "demo-alert-grace-atmega328p",
            grace,
            "part-atmega328p",
            _rule("r1", "LIFECYCLE", "changed", None, cursor="Active"),
            _rule("r2", "price_change", "lt", "-5%", baseline=3.2, cursor=3.2),
        ),
        _alert(
            "demo-alert-grace-max232",
            grace,
            "part-max232",
            _rule("r1", "compliance", "changed", None, cursor={"ROHS": "YES", "REACH": "YES"}),
            _rule("r2", "compliance", "gt", "RoHS=no", notify_email=False),
        ),
        _alert(
            "demo-alert-linus-stm32f103",
            linus,
            "part-stm32f103",
            _rule("r1", "new_alternate", "gte", 1, cursor=["GD32F103C8T6"]),
            _rule("r2", "price_change", "gt", 5),
            _rule("r3", "risk", "changed", None, cursor="Medium"),
        ),
    ]


def _part(part_id: str, name: str, **values: Any) -> Doc:
    return {"_id": part_id, "name": name, **values}


def _alert(alert_id: str, user: tuple[str, str], part_id: str, *rules: Doc) -> Doc:
    user_id, email = user
    return {
        "_id": alert_id,
        "userId": user_id,
        "email": email,
        "partId": part_id,
        "active": True,
        "rules": list(rules),
    }


def _rule(
    rule_id: str,
    rule_type: str,
    operator: str,
    threshold: Any,
    *,
    baseline: Any = None,
    cursor: Any = None,
    notify_email: bool = True,
) -> Doc:
    """A rule as the product writes it; cooldown 0 so the demo's frequent scans check it."""
    return {
        "id": rule_id,
        "type": rule_type,
        "operator": operator,
        "threshold": threshold,
        "baseline": baseline,
        "cursor": cursor,
        "lastCheckedAt": None,
        "lastTriggeredAt": None,
        "cooldownMinutes": 0,
        "notifyEmail": notify_email,
        "active": True,
    }
