"""The alert scanner's value path, from what the product store holds to a rendered email, on
extreme, malformed and hostile numbers, strings and dates in every field: it never raises, and
the email (subject, text and HTML) is text any encoding holds, with no bidirectional control.

A value without a canonical form is an error on its rule (NormalizationError, InvalidRule):
foreseen, and recorded. Anything else would be logged as a failure nobody foresaw, and is
asserted never to happen."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from email import message_from_bytes, policy
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.emails import compose
from tickd.handlers.alert_scanner.normalize import LIFECYCLE_ALIASES, RISK_LEVELS
from tickd.handlers.alert_scanner.rules import OPERATOR_NAMES, TYPE_NAMES
from tickd.handlers.alert_scanner.scan import check, due_rules, reschedules, rule_updates
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.product_store import Alert, Notification

BIDI_CONTROLS = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
SETTINGS = EmailSettings(
    app_base_url="https://app.example",
    public_base_url="https://tickd.example",
    unsubscribe_secret="s" * 32,
    max_items=3,
)

# -- values as a store may hold them ------------------------------------------------------------

SPECIAL_CHARACTERS = [*BIDI_CONTROLS, "\ud800", "\udfff", "\x00", "\r", "\n", "\u2028", "\ufeff"]
texts = st.text(
    st.characters(exclude_categories=()) | st.sampled_from(SPECIAL_CHARACTERS), max_size=12
)
numbers = st.one_of(
    st.floats(),  # NaN, infinities, -0.0, subnormals
    st.sampled_from([1e30, 1e308, -1e308, 5e-324, -0.0, 0.0, 1.0]),
    # SQLite's JSON holds any int of up to 4300 digits; a float holds none beyond 1e308.
    st.integers() | st.sampled_from([10**400, -(10**309), 2**63]),
    st.decimals(),  # MongoDB's Decimal128: NaN, sNaN, Infinity, any exponent
)
numeric_texts = st.sampled_from(
    ["1e30", "1e-320", "NaN", "-inf", "inf", "1_000", "-0", " 4.20 ", "4,20", "$1e308", "€-1",
     "1e999999", "0x1F", "\u0669", "9" * 400, "+.5", "5.", "10 %", "%", ""]
)  # fmt: skip
times = st.one_of(
    st.datetimes(),  # naive: as MongoDB gives them back
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=14))])),
    st.sampled_from(
        [
            datetime.min,
            datetime.max,
            datetime.max.replace(tzinfo=UTC),
            *("9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+01:00", "2026-03-02T08:00:00Z"),
            *("2026-02-30T00:00:00", "yesterday"),
        ]
    ),
)
words = st.sampled_from(
    ["Low", "medium", "HIGH", "Critical", "YES", "no", "exempt", "true", "RoHS=no"]
    + [alias for aliases in LIFECYCLE_ALIASES.values() for alias in aliases]
)
scalars = st.one_of(st.none(), st.booleans(), numbers, numeric_texts, texts, times, words)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts | words, inner, max_size=3),
    max_leaves=4,
)


# Each field of a part: a value of its kind, often, so that rules fire and emails are made
# (extreme and malformed ones among them), or any value at all.
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "price": st.floats(min_value=0) | numbers | numeric_texts,
    "riskScore": st.floats() | numbers,
    "riskLevel": st.sampled_from(RISK_LEVELS) | words,
    "compliance": st.dictionaries(st.sampled_from(["RoHS", "REACH"]) | texts, words, max_size=3),
    "lifecycle": words,
    "alternates": st.lists(texts | numeric_texts, max_size=3) | texts,
    "name": texts,
    "partNumber": texts,
    "priceCurrency": st.sampled_from(["USD", "eur", "CHF"]) | texts,
}
# The field each rule type watches.
WATCHED = {
    "price_change": "price",
    "risk": "riskScore",
    "risk_level": "riskLevel",
    "compliance": "compliance",
    "lifecycle": "lifecycle",
    "new_alternate": "alternates",
}


def mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` most of the time: a rule with every field hostile only ever reaches
    its first error, never an email."""
    return st.integers(0, 7).flatmap(lambda pick: usual if pick else other)


# A previous value of each type, which most current values differ from: the rule fires.
PREVIOUS: dict[str, Any] = {
    "price_change": 1.0,
    "risk": 42.0,
    "risk_level": "Low",
    "compliance": {"ROHS": "NO", "REACH": "NO"},
    "lifecycle": "Preview",
    "new_alternate": [],
}


def field_values(field: str) -> st.SearchStrategy[Any]:
    return mostly(FIELDS[field], values)


@st.composite
def parts(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {"_id": "p1"}
    for field in FIELDS:
        if draw(mostly(st.just(True), st.booleans())):
            doc[field] = draw(field_values(field))
    return doc


@st.composite
def rules(draw: st.DrawFn) -> dict[str, Any]:
    rule_type = draw(
        mostly(st.sampled_from(sorted(WATCHED)), st.sampled_from(sorted(TYPE_NAMES)) | texts)
    )
    watched = field_values(WATCHED.get(rule_type, "price"))
    return {
        "id": draw(mostly(st.just("r1"), scalars)),
        "type": rule_type,
        "operator": draw(
            mostly(st.just("changed"), st.sampled_from(sorted(OPERATOR_NAMES)) | texts)
        ),
        "threshold": draw(mostly(st.none(), watched)),
        "baseline": draw(mostly(st.none(), watched)),
        "cursor": draw(mostly(st.just(PREVIOUS.get(rule_type, 1.0)), watched)),
        "lastCheckedAt": draw(mostly(st.none(), times | scalars)),
        "lastTriggeredAt": draw(mostly(st.none(), times)),
        "cooldownMinutes": draw(mostly(st.none(), numbers | numeric_texts)),
        "notifyEmail": True,
        "active": True,
    }


@st.composite
def alerts(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "_id": "a1",
        "userId": draw(mostly(st.just("ada"), scalars)),
        "email": draw(mostly(st.just("ada@example.com"), texts)),
        "partId": "p1",
        "timeZone": draw(st.sampled_from(["Europe/Berlin", "Pacific/Kiritimati"]) | scalars),
        "active": True,
        "rules": draw(st.lists(rules(), min_size=1, max_size=3)),
    }


@st.composite
def stored_notifications(draw: st.DrawFn) -> Notification:
    """A notification document as the store gives it back, every field as hostile as it can
    hold."""
    return Notification(
        id=draw(texts),
        user_id=draw(texts),
        email="ada@example.com",
        alert_id=draw(texts),
        rule_id=draw(texts),
        part_id=draw(texts),
        part_name=draw(texts),
        type=draw(st.sampled_from(["price_change", "compliance", "lifecycle", "risk"]) | texts),
        operator=draw(texts),
        threshold=draw(values),
        previous_value=draw(values),
        current_value=draw(values),
        message=draw(texts),
        reason=draw(texts),
        created_at=draw(
            st.datetimes(timezones=st.just(UTC))
            | st.sampled_from([datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)])
        ),
        notify_email=True,
        currency=draw(st.none() | st.sampled_from(["USD", "eur", "CHF"]) | texts),
        time_zone=draw(st.none() | st.sampled_from(["Pacific/Kiritimati", "Etc/GMT+12"]) | texts),
    )


# -- the properties -----------------------------------------------------------------------------


class Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        # A foreseen failure (bad data) is a warning without a traceback, recorded on its rule;
        # one nobody foresaw carries the traceback of what raised.
        if record.exc_info:
            self.records.append(record)


@contextmanager
def failures_logged() -> Iterator[list[logging.LogRecord]]:
    """The warnings the scanner logs for failures nobody foresaw."""
    handler = Recorded()
    logger = logging.getLogger("tickd.handler.alert_scanner")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


def assert_renders(notifications: list[Notification]) -> None:
    """The email made, serialised and read back: its subject, text and HTML are one-line (the
    subject), encodable text without bidirectional controls."""
    message = compose(
        "ada@example.com",
        notifications,
        now=T0,
        from_address="alerts@tickd.example",
        settings=SETTINGS,
    )
    received = message_from_bytes(message.as_bytes(), policy=policy.default)
    text, html = received.get_body(("plain",)), received.get_body(("html",))
    assert text is not None and html is not None
    subject = str(received["Subject"])
    assert "\n" not in subject and "\r" not in subject
    for shown in (subject, text.get_content(), html.get_content()):
        shown.encode("utf-8")
        assert not BIDI_CONTROLS & set(shown), ascii(shown)


@settings(max_examples=60, deadline=None)
@given(part=parts(), alert=alerts())
def test_any_part_and_rule_make_an_error_on_the_rule_or_an_email(
    part: dict[str, Any], alert: dict[str, Any]
) -> None:
    read = Alert(id="a1", doc=alert)
    with failures_logged() as failures:
        due = due_rules(read, T0)
        checks = [check(rule, part, T0) for rule in due]
        rule_updates(checks, T0, "scan-1")
        reschedules([read], due, T0)
    assert failures == []
    notifications = [c.notification for c in checks if c.notification is not None]
    note(f"notifications: {notifications}")
    for n in notifications:
        for stored_text in (n.part_name, n.message, n.reason):
            stored_text.encode("utf-8")
    if notifications:
        assert_renders(notifications)


@settings(max_examples=40, deadline=None)
@given(notifications=st.lists(stored_notifications(), min_size=1, max_size=4))
def test_any_stored_notification_renders(notifications: list[Notification]) -> None:
    assert_renders(notifications)
