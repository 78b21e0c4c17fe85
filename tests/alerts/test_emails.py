"""The alert email as composed: subject, parts, escaping, header safety (no server involved)."""

from __future__ import annotations

from dataclasses import replace
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest

from handlers.alert_scanner.emails import compose, message_id, one_line, subject
from handlers.alert_scanner.normalize import NormalizationError
from handlers.product_store import Notification
from tests.fixtures.times import T0

INJECTION = "LM317T\r\nBcc: eve@example.com\r\n\r\nfree text"


def notification(
    part_name: str = "LM317T", notification_id: str = "n1", **fields: Any
) -> Notification:
    values: dict[str, Any] = {
        "id": notification_id,
        "user_id": "ada",
        "email": "ada@example.com",
        "alert_id": "a1",
        "rule_id": "r1",
        "part_id": "part-1",
        "part_name": part_name,
        "type": "price_change",
        "operator": "gt",
        "threshold": 10,
        "previous_value": 0.62,
        "current_value": 0.71,
        "message": f"{part_name}: price 0.62 -> 0.71",
        "reason": "+14.52% against the baseline 0.62, more than +10%",
        "created_at": T0,
        "notify_email": True,
    }
    return Notification(**(values | fields))


def sent(message: EmailMessage) -> EmailMessage:
    """The message as a server would receive it: flattened to bytes and parsed back."""
    return message_from_bytes(message.as_bytes(), policy=policy.default)


def parts(message: EmailMessage) -> tuple[str, str]:
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


def test_an_email_has_a_text_and_an_html_part_listing_every_rule() -> None:
    rules = [
        notification(),
        notification(
            "NE555P",
            "n2",
            type="lifecycle",
            previous_value="Active",
            current_value="NRND",
            reason="the lifecycle stage is now at least NRND",
        ),
    ]
    message = sent(compose("ada@example.com", rules, now=T0, from_address="alerts@tickd.example"))
    assert message.get_content_type() == "multipart/alternative"
    assert (message["To"], message["From"]) == ("ada@example.com", "alerts@tickd.example")
    assert message["Subject"] == "2 part alerts: LM317T, NE555P"
    assert message["Date"] == "Mon, 02 Mar 2026 09:00:00 +0000"
    assert message["Auto-Submitted"] == "auto-generated"
    text, html = parts(message)
    for body in (text, html):
        for expected in (
            "LM317T",
            "0.62",
            "0.71",
            "+14.52%",
            "NE555P",
            "Active",
            "NRND",
            "lifecycle stage",
        ):
            assert expected in body
    assert "before: 0.62" in text and "after:  0.71" in text
    assert "<td>0.62</td><td>0.71</td>" in html


def test_values_are_escaped_in_html() -> None:
    rules = [notification("<script>alert('x')</script>", reason='a "quoted" & <b>bold</b> reason')]
    _, html = parts(sent(compose("ada@example.com", rules, now=T0)))
    assert "<script>" not in html and "<b>bold" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "a &quot;quoted&quot; &amp; &lt;b&gt;bold&lt;/b&gt; reason" in html


def test_a_part_name_cannot_inject_a_header_or_a_recipient() -> None:
    message = compose("ada@example.com", [notification(INJECTION)], now=T0)
    raw = message.as_bytes()
    assert b"\nBcc:" not in raw and b"\nbcc:" not in raw.lower()
    received = sent(message)
    assert received["Bcc"] is None
    assert received["Subject"] == "Part alert: LM317T Bcc: eve@example.com free text"
    assert received.get_all("To") == ["ada@example.com"]
    text, _ = parts(received)
    assert "* LM317T Bcc: eve@example.com free text (price)" in text


@pytest.mark.parametrize(
    "recipient",
    ["", "ada", "ada@example.com\r\nBcc: eve@example.com", "ada@example.com, eve@example.com"],
)
def test_the_recipient_must_be_one_plain_address(recipient: str) -> None:
    with pytest.raises(NormalizationError, match="recipient"):
        compose(recipient, [notification()], now=T0)


def test_a_bad_from_address_is_refused() -> None:
    with pytest.raises(NormalizationError, match="from"):
        compose("ada@example.com", [notification()], now=T0, from_address="alerts")


def test_the_subject_names_the_first_parts_and_counts_the_rest() -> None:
    assert subject([notification()]) == "Part alert: LM317T"
    names = ["A", "B", "C", "D", "A"]
    many = [notification(name, f"n{i}") for i, name in enumerate(names)]
    assert subject(many) == "5 part alerts: A, B and 2 more"


def test_the_message_id_is_the_same_for_the_same_notifications() -> None:
    one, two = notification(notification_id="n1"), notification(notification_id="n2")
    assert message_id([one, two], domain="x.example") == message_id([two, one], domain="x.example")
    assert message_id([one], domain="x.example") != message_id([two], domain="x.example")
    assert message_id([one], domain="").endswith("@tickd.invalid>")


def test_long_values_are_cut_and_control_characters_dropped() -> None:
    assert one_line("a\tb\x00c\u2028d  e") == "a b c d e"
    assert one_line("x" * 600) == "x" * 499 + "…"
    long_name = replace(notification(), part_name="P" * 300)
    assert len(subject([long_name])) <= 150
