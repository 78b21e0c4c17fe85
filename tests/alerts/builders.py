"""Documents as the product writes them, with defaults a test overrides where it matters."""

from __future__ import annotations

from typing import Any

from tickd.handlers.product_store import Doc


def part(part_id: str = "part-1", **values: Any) -> Doc:
    doc: Doc = {
        "_id": part_id,
        "name": part_id.upper(),
        "price": 10.0,
        "riskScore": 50,
        "riskLevel": "Medium",
        "compliance": {"RoHS": "YES", "REACH": "YES"},
        "lifecycle": "Active",
        "alternates": ["ALT-1"],
    }
    return doc | values


def rule(
    rule_id: str = "r1",
    rule_type: str = "price_change",
    operator: str = "gt",
    threshold: Any = 10,
    **fields: Any,
) -> Doc:
    doc: Doc = {
        "id": rule_id,
        "type": rule_type,
        "operator": operator,
        "threshold": threshold,
        "baseline": None,
        "cursor": None,
        "lastCheckedAt": None,
        "lastTriggeredAt": None,
        "cooldownMinutes": 60,
        "notifyEmail": True,
        "active": True,
    }
    return doc | fields


def price_rule(
    rule_id: str = "r1", *, baseline: float = 10.0, threshold: Any = 10, **fields: Any
) -> Doc:
    """Fires when the price rises more than `threshold` % above `baseline` (the cursor too)."""
    fields.setdefault("cursor", baseline)
    return rule(rule_id, "price_change", "gt", threshold, baseline=baseline, **fields)


def alert(
    alert_id: str = "alert-1",
    *rules: Doc,
    user: str = "user-1",
    part_id: Any = "part-1",
    **fields: Any,
) -> Doc:
    doc: Doc = {
        "_id": alert_id,
        "userId": user,
        "email": f"{user}@example.com",
        "partId": part_id,
        "active": True,
        "rules": list(rules) or [price_rule()],
    }
    return doc | fields
