"""What both product backends write the same way: notification documents, rule writes, which
alerts the due query scans, and what a price check writes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tickd.handlers.product_store import (
    Bounce,
    Doc,
    Notification,
    PriceCheck,
    RuleUpdate,
    Unreadable,
    is_true,
)
from tickd.scheduler.store.kit import as_datetime, exact_micros


def notification_to_doc(notification: Notification) -> Doc:
    """camelCase, as the product's backend reads it; times as datetimes."""
    n = notification
    return {
        "_id": n.id,
        "userId": n.user_id,
        "email": n.email,
        "alertId": n.alert_id,
        "ruleId": n.rule_id,
        "partId": n.part_id,
        "partName": n.part_name,
        "type": n.type,
        "operator": n.operator,
        "threshold": n.threshold,
        "previousValue": n.previous_value,
        "currentValue": n.current_value,
        "message": n.message,
        "reason": n.reason,
        "createdAt": n.created_at,
        "read": n.read,
        "notifyEmail": n.notify_email,
        "emailedAt": n.emailed_at,
        "emailAttempts": n.email_attempts,
        "emailError": n.email_error,
        "emailFailedAt": n.email_failed_at,
        "currency": n.currency,
        "timeZone": n.time_zone,
    }


def notification_from_doc(doc: Mapping[str, Any]) -> Notification:
    """From a stored document; times may be datetimes (MongoDB) or ISO strings (SQLite)."""
    return Notification(
        id=str(doc["_id"]),
        user_id=str(doc["userId"]),
        email=doc.get("email"),
        alert_id=str(doc["alertId"]),
        rule_id=str(doc["ruleId"]),
        part_id=str(doc["partId"]),
        part_name=str(doc.get("partName") or doc["partId"]),
        type=str(doc["type"]),
        operator=str(doc["operator"]),
        threshold=doc.get("threshold"),
        previous_value=doc.get("previousValue"),
        current_value=doc.get("currentValue"),
        message=str(doc.get("message", "")),
        reason=str(doc.get("reason", "")),
        created_at=as_datetime(doc["createdAt"], "createdAt"),
        read=bool(doc.get("read", False)),
        notify_email=bool(doc.get("notifyEmail", False)),
        emailed_at=_maybe_time(doc.get("emailedAt"), "emailedAt"),
        email_attempts=int(doc.get("emailAttempts") or 0),
        email_error=doc.get("emailError"),
        email_failed_at=_maybe_time(doc.get("emailFailedAt"), "emailFailedAt"),
        currency=_maybe_text(doc.get("currency")),
        time_zone=_maybe_text(doc.get("timeZone")),
    )


# The length of the reason kept when a stored document cannot be decoded.
REASON_MAX_CHARS = 300


def decode_failure(exc: BaseException) -> str:
    """Why a stored document cannot be decoded: the error's type and the start of its message,
    in text any store and log can hold (a lone surrogate is written as its escape)."""
    message = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
    if len(message) > REASON_MAX_CHARS:
        message = message[: REASON_MAX_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {message}"


def decoded_notification(
    notification_id: Any, stored: Any, load: Callable[[Any], Mapping[str, Any]] = dict
) -> Notification | Unreadable:
    """The notification `load` reads from what is stored, or, when any step of reading it fails
    (the JSON, a time, a field of the wrong type), why it cannot be read: one stored record
    stops only itself."""
    try:
        return notification_from_doc(load(stored))
    except Exception as exc:
        reason = f"not sent: the stored notification cannot be read: {decode_failure(exc)}"
        return Unreadable(str(notification_id), reason)


def _maybe_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def bounce_from_doc(doc: Mapping[str, Any]) -> Bounce:
    return Bounce(
        address=str(doc["address"]),
        count=int(doc["count"]),
        first_at=as_datetime(doc["firstAt"], "firstAt"),
        last_at=as_datetime(doc["lastAt"], "lastAt"),
        last_error=str(doc.get("lastError") or ""),
    )


def rules_sending_email(alert: Mapping[str, Any]) -> list[int]:
    """Positions of the alert's rules whose `notifyEmail` is not false yet (what an unsubscribe
    sets to false; a rule without the field is set too, to say so)."""
    rules = alert.get("rules")
    return [
        index
        for index, rule in enumerate(rules if isinstance(rules, list) else [])
        if isinstance(rule, Mapping) and rule.get("notifyEmail") is not False
    ]


def _maybe_time(value: Any, field: str) -> datetime | None:
    return None if value is None else as_datetime(value, field)


def rule_fields(update: RuleUpdate) -> Doc:
    """The fields an update sets on its rule, the scan's id included."""
    return {**update.changes, "lastScanId": update.scan_id}


def is_scannable(alert: Mapping[str, Any]) -> bool:
    """What the due query scans: an active alert with an active rule (`is_true`, in every form
    the product writes; MongoDB's query matches exactly these)."""
    rules = alert.get("rules")
    return (
        is_true(alert.get("active"))
        and isinstance(rules, list)
        and any(isinstance(rule, Mapping) and is_true(rule.get("active")) for rule in rules)
    )


def by_alert(updates: Sequence[RuleUpdate]) -> dict[str, list[RuleUpdate]]:
    """The updates of each alert, which are applied together."""
    grouped: dict[str, list[RuleUpdate]] = {}
    for update in updates:
        grouped.setdefault(update.alert_id, []).append(update)
    return grouped


def rule_is_as_read(alert: Mapping[str, Any] | None, update: RuleUpdate) -> bool:
    """Whether the alert still holds, at the update's position, a rule whose every field read
    has the value read."""
    rules = None if alert is None else alert.get("rules")
    if not isinstance(rules, list) or not 0 <= update.index < len(rules):
        return False
    stored = rules[update.index]
    return isinstance(stored, Mapping) and all(
        same_value(stored.get(field), value)
        for field, value in rule_conditions(update.rule_as_read).items()
    )


def same_value(stored: Any, as_read: Any) -> bool:
    """Equality in which NaN equals NaN, at any depth: a rule holding NaN is still as it was
    read (with `==` its write would lose every scan, and its alert be read again each time)."""
    if isinstance(stored, float) and isinstance(as_read, float):
        return stored == as_read or (math.isnan(stored) and math.isnan(as_read))
    if isinstance(stored, Mapping) and isinstance(as_read, Mapping):
        return stored.keys() == as_read.keys() and all(
            same_value(stored[key], as_read[key]) for key in stored
        )
    if isinstance(stored, list) and isinstance(as_read, list):
        return len(stored) == len(as_read) and all(map(same_value, stored, as_read))
    return bool(stored == as_read)


def rule_conditions(rule_as_read: Mapping[str, Any]) -> dict[str, Any]:
    """The fields compared: every field read, and `id` even when it was missing (a rule at the
    same position without an id is not taken for another one)."""
    return {"id": None, **rule_as_read}


@dataclass
class PriceWrite:
    """What a part's price checks of one batch write to it: fields to set, fields to remove."""

    sets: Doc = field(default_factory=dict)
    unsets: set[str] = field(default_factory=set)


def price_writes(checks: Sequence[PriceCheck]) -> dict[str, PriceWrite]:
    """One write per part, its checks folded in the order given (the last one's
    `priceCheckedAt` stays; a success clears an earlier error, an error keeps an earlier price):
    the writes of a batch then need no order among themselves."""
    writes: dict[str, PriceWrite] = {}
    for check in checks:
        write = writes.setdefault(check.part_id, PriceWrite())
        if not check.keep_place:
            write.sets["priceCheckedAt"] = check.checked_at
        if check.error is None:
            write.sets |= {"price": check.price, "priceCurrency": check.currency}
            write.sets.pop("priceError", None)
            write.unsets.add("priceError")
        else:
            error: Doc = {"message": check.error, "at": check.checked_at}
            if check.vendor_failures:
                error["vendorFailures"] = check.vendor_failures
            write.sets["priceError"] = error
            write.unsets.discard("priceError")
    return writes


def price_entry_id(part_id: str, checked_at: datetime) -> str:
    """Derived from the check: a check recorded twice makes one entry."""
    return f"{part_id}@{exact_micros(checked_at)}"


def price_entries(checks: Sequence[PriceCheck]) -> list[Doc]:
    """The price history entries of the successful checks."""
    return [
        {
            "_id": price_entry_id(check.part_id, check.checked_at),
            "partId": check.part_id,
            "price": check.price,
            "currency": check.currency,
            "checkedAt": check.checked_at,
            "source": check.source,
        }
        for check in checks
        if check.error is None
    ]
