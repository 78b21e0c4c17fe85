"""The alert email as composed: subject, parts, numbers, links, unsubscribe headers, the "and N
more" bound, escaping and header safety (no server involved)."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from datetime import timedelta
from email import message_from_bytes, policy
from email.generator import BytesGenerator
from email.message import EmailMessage
from html.parser import HTMLParser
from typing import Any

import pytest

from tests.fixtures.times import T0
from tickd.handlers.alert_scanner import tokens
from tickd.handlers.alert_scanner.emails import (
    compose,
    describe,
    message_id,
    one_line,
    subject,
)
from tickd.handlers.alert_scanner.normalize import NormalizationError
from tickd.handlers.alert_scanner.rules import currency_of, format_money, percent_text
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.product_store import Notification

INJECTION = "LM317T\r\nBcc: eve@example.com\r\n\r\nfree text"
SECRET = "k" * 40
LINKED = EmailSettings(
    app_base_url="https://app.example",
    public_base_url="https://tickd.example/api",
    unsubscribe_secret=SECRET,
)


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
        "reason": "+15% against the baseline 0.62, more than +10%",
        "created_at": T0,
        "notify_email": True,
    }
    return Notification(**(values | fields))


def lifecycle(part_name: str = "NE555P", notification_id: str = "n2", **fields: Any) -> Any:
    values = {
        "type": "lifecycle",
        "previous_value": "Active",
        "current_value": "NRND",
        "reason": "the lifecycle stage is now at least NRND",
    }
    return notification(part_name, notification_id, **(values | fields))


def rohs_lost(part_name: str = "MAX232CPE", notification_id: str = "n3") -> Notification:
    return notification(
        part_name,
        notification_id,
        type="compliance",
        operator="changed",
        threshold=None,
        previous_value={"REACH": "YES", "RoHS": "YES"},
        current_value={"REACH": "YES", "RoHS": "NO"},
        reason="compliance flags flipped: RoHS YES -> NO",
    )


def sent(message: EmailMessage) -> EmailMessage:
    """The message as a server receives it: flattened as aiosmtplib does (policy.SMTP) and
    parsed back."""
    return message_from_bytes(flattened(message), policy=policy.default)


def flattened(message: EmailMessage) -> bytes:
    out = io.BytesIO()
    BytesGenerator(out, policy=policy.SMTP).flatten(message)
    return out.getvalue()


def parts(message: EmailMessage) -> tuple[str, str]:
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


class Page(HTMLParser):
    """The HTML part as a reader sees it: its text, its links, the rows of its items."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.links: list[str] = []
        self.rows = 0
        self.tags: set[str] = set()
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.rows += tag == "tr" and ("class", "item") in attrs
        self.links += [value or "" for name, value in attrs if name == "href"]

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def text_links(text: str) -> list[str]:
    return [word for word in text.split() if word.startswith("https://")]


def test_an_email_has_a_text_and_an_html_part_listing_every_rule() -> None:
    rules = [notification(currency="USD"), lifecycle()]
    message = sent(compose("ada@example.com", rules, now=T0, from_address="alerts@tickd.example"))
    assert message.get_content_type() == "multipart/alternative"
    assert message["To"] == "ada@example.com"
    assert message["From"] == "tickd alerts <alerts@tickd.example>"
    assert message["Subject"] == "NE555P is now NRND, and 1 more"
    assert message["Date"] == "Mon, 02 Mar 2026 09:00:00 +0000"
    assert message["Auto-Submitted"] == "auto-generated"
    text, html = parts(message)
    for body in (text, Page(html).words):
        for expected in (
            "LM317T price rose 15% to $0.71",
            "$0.62",
            "+15% against the baseline 0.62",
            "NE555P",
            "is now NRND",
            "Active",
            "2 March 2026 at 09:00 UTC",
        ):
            assert expected in body
    assert "before: $0.62" in text and "after:  $0.71" in text
    assert "LM317T price rose 15% to $0.71 Before: $0.62 After: $0.71 Why: +15%" in Page(html).words


def test_the_subject_says_what_changed_most_and_counts_the_rest() -> None:
    assert subject([notification()]) == "LM317T price rose 15% to 0.71"
    mixed = [notification(), lifecycle(), rohs_lost()]
    assert subject(mixed) == "MAX232CPE is no longer RoHS compliant, and 2 more"
    big_drop = notification("ATMEGA", "n4", previous_value=3.2, current_value=0.32)
    assert subject([notification(), big_drop]) == "ATMEGA price fell 90% to 0.32, and 1 more"
    flag = notification(
        "NE555P", type="compliance", threshold="REACH=no", previous_value="YES", current_value="NO"
    )
    assert subject([flag]) == "NE555P is no longer REACH compliant"


@pytest.mark.parametrize(
    ("value", "currency", "shown"),
    [
        (0.71, "USD", "$0.71"),
        (3.2, "EUR", "€3.20"),
        (1234.5, "GBP", "£1,234.50"),
        (12.5, "CHF", "12.50 CHF"),
        (2.95, None, "2.95"),
        (2.95, "dollars!", "2.95"),
        (3, "usd", "$3.00"),
    ],
)
def test_prices_have_their_currency_and_two_decimals(
    value: float, currency: str | None, shown: str
) -> None:
    assert format_money(value, currency) == shown


@pytest.mark.parametrize(
    ("price_currency", "price", "code"),
    [
        ("USD", 0.71, "USD"),
        (" eur ", "3.20", "EUR"),
        (None, "$2.95", "USD"),
        (None, " €3.20", "EUR"),
        ("dollars!", "£1", "GBP"),
        ("CHF", "$2.95", "CHF"),
        (None, "¥300", None),
        (None, 2.95, None),
        (None, None, None),
    ],
)
def test_a_parts_currency_is_its_price_currency_else_the_symbol_of_its_price(
    price_currency: Any, price: Any, code: str | None
) -> None:
    assert currency_of(price_currency, price) == code
    assert format_money(2.95, currency_of(None, "$2.95")) == "$2.95"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (14.52, "+15%"),
        (12.5, "+13%"),
        (-90.0, "-90%"),
        (4.44, "+4.4%"),
        (-7.8125, "-7.8%"),
        (0.25, "+0.25%"),
        (0.0, "0%"),
    ],
)
def test_percentages_are_rounded_as_people_write_them(value: float, shown: str) -> None:
    assert percent_text(value) == shown


@pytest.mark.parametrize(
    ("zone", "when", "shown"),
    [
        ("Europe/Berlin", T0, "2 March 2026 at 10:00 CET (Europe/Berlin)"),
        ("Europe/Berlin", T0 + timedelta(days=120), "30 June 2026 at 11:00 CEST (Europe/Berlin)"),
        ("America/New_York", T0, "2 March 2026 at 04:00 EST (America/New_York)"),
        (None, T0, "2 March 2026 at 09:00 UTC"),
        ("Mars/Olympus_Mons", T0, "2 March 2026 at 09:00 UTC"),
        ("../../etc/passwd", T0, "2 March 2026 at 09:00 UTC"),
    ],
)
def test_times_are_in_the_recipients_zone_else_utc_named(
    zone: str | None, when: Any, shown: str
) -> None:
    message = compose("ada@example.com", [notification(time_zone=zone, created_at=when)], now=T0)
    text, html = parts(sent(message))
    assert shown in text and shown in Page(html).words


def test_values_are_escaped_in_html() -> None:
    rules = [notification("<script>alert('x')</script>", reason='a "quoted" & <b>bold</b> reason')]
    _, html = parts(sent(compose("ada@example.com", rules, now=T0, settings=LINKED)))
    assert "<script>" not in html and "<b>bold" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "a &quot;quoted&quot; &amp; &lt;b&gt;bold&lt;/b&gt; reason" in html
    page = Page(html)
    assert "script" not in page.tags and "b" not in page.tags


def test_a_part_id_cannot_break_out_of_its_link() -> None:
    hostile = notification(part_id='x" onclick="steal()"/../../admin?<>')
    text, html = parts(sent(compose("ada@example.com", [hostile], now=T0, settings=LINKED)))
    part_link = (
        "https://app.example/parts/x%22%20onclick%3D%22steal%28%29%22%2F..%2F..%2Fadmin%3F%3C%3E"
    )
    assert part_link in Page(html).links and part_link in text_links(text)
    assert "onclick=" not in html.replace("%3D", "")


def test_a_part_name_cannot_inject_a_header_or_a_recipient() -> None:
    message = compose("ada@example.com", [notification(INJECTION)], now=T0)
    raw = flattened(message)
    assert b"\nBcc:" not in raw and b"\nbcc:" not in raw.lower()
    received = sent(message)
    assert received["Bcc"] is None
    assert received["Subject"] == "LM317T Bcc: eve@example.com free text price rose 15% to 0.71"
    assert received.get_all("To") == ["ada@example.com"]
    text, _ = parts(received)
    assert "* LM317T Bcc: eve@example.com free text price rose 15% to 0.71" in text


@pytest.mark.parametrize(
    "recipient",
    ["", "ada", "ada@example.com\r\nBcc: eve@example.com", "ada@example.com, eve@example.com"],
)
def test_the_recipient_must_be_one_plain_address(recipient: str) -> None:
    with pytest.raises(NormalizationError, match="recipient"):
        compose(recipient, [notification()], now=T0)


@pytest.mark.parametrize(
    "from_address", ["alerts", "Acme <alerts>", "A\r\nBcc: eve@example.com <a@tickd.example>"]
)
def test_a_bad_from_address_is_refused(from_address: str) -> None:
    with pytest.raises(NormalizationError, match="from"):
        compose("ada@example.com", [notification()], now=T0, from_address=from_address)


@pytest.mark.parametrize(
    ("from_address", "shown"),
    [
        ("alerts@tickd.example", "tickd alerts <alerts@tickd.example>"),
        ("Acme part alerts <alerts@acme.example>", "Acme part alerts <alerts@acme.example>"),
        ('"Acme, Inc." <alerts@acme.example>', '"Acme, Inc." <alerts@acme.example>'),
    ],
)
def test_the_sender_has_a_display_name(from_address: str, shown: str) -> None:
    message = sent(compose("ada@example.com", [notification()], now=T0, from_address=from_address))
    assert message["From"] == shown
    assert message["Message-ID"].endswith(shown.rpartition("@")[2])


def rohs_lost_as_stored(flags: str = "changed") -> Notification:
    """RoHS lost, as the scanner stores it: flag names canonical (ROHS), in the values and the
    reason alike."""
    return notification(
        "MAX232CPE",
        "n5",
        type="compliance",
        operator=flags,
        threshold=None,
        previous_value={"REACH": "YES", "ROHS": "YES"},
        current_value={"REACH": "YES", "ROHS": "NO"},
        reason="compliance flags flipped: ROHS YES -> NO",
    )


def test_flags_are_named_as_people_write_them() -> None:
    message = sent(compose("ada@example.com", [rohs_lost_as_stored()], now=T0))
    assert message["Subject"] == "MAX232CPE is no longer RoHS compliant"
    text, html = parts(message)
    for body in (text, Page(html).words):
        assert "REACH: YES, RoHS: NO" in body
        assert "compliance flags flipped: RoHS YES -> NO" in body
        assert "ROHS" not in body
    one_flag = notification(
        "NE555P",
        type="compliance",
        threshold="ROHS=no",
        previous_value="YES",
        current_value="NO",
        reason="the ROHS flag is now equal to NO",
    )
    item = describe(one_flag)
    assert (item.change, item.reason) == (
        "is no longer RoHS compliant",
        "the RoHS flag is now equal to NO",
    )
    # Only flags are respelled, and only in what a compliance rule says.
    named = describe(notification("ROHS-LM317T", reason="ROHS stays"))
    assert (named.part, named.reason) == ("ROHS-LM317T", "ROHS stays")


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


# -- size ---------------------------------------------------------------------------------------


def many(count: int) -> list[Notification]:
    return [
        notification(f"PART-{i:03d}", f"n{i:03d}", part_id=f"p{i}", alert_id=f"a{i}")
        for i in range(count)
    ]


def test_hundreds_of_rules_show_the_first_ones_then_and_n_more_with_a_link() -> None:
    settings = replace(LINKED, max_items=25)
    message = sent(compose("ada@example.com", many(300), now=T0, settings=settings))
    text, html = parts(message)
    assert text.count("\n* ") == 25 and Page(html).rows == 25
    assert "PART-024" in text and "PART-025" not in text and "PART-025" not in html
    assert "and 275 more: https://app.example/notifications" in text
    assert "https://app.example/notifications" in Page(html).links
    assert re.search(r'<a href="https://app.example/notifications"[^>]*>and 275 more</a>', html)
    assert "300 of your part alerts triggered" in text
    assert len(flattened(message)) < 100_000
    assert message["Subject"] == "PART-000 price rose 15% to 0.71, and 299 more"


def test_without_an_app_there_are_no_links_at_all() -> None:
    settings = EmailSettings(max_items=2)
    text, html = parts(sent(compose("ada@example.com", many(5), now=T0, settings=settings)))
    assert "and 3 more" in text and "and 3 more" in Page(html).words
    assert "http" not in text and "http" not in html and Page(html).links == []
    assert "Change that in the app." in text


# -- links, and the plain text saying what the HTML says ----------------------------------------


def test_parts_link_to_the_app_and_the_footer_to_the_alerts() -> None:
    rules = [notification(part_id="part-lm317t"), lifecycle(part_id="part-ne555p", alert_id="a2")]
    text, html = parts(sent(compose("ada@example.com", rules, now=T0, settings=LINKED)))
    page = Page(html)
    for link in (
        "https://app.example/parts/part-lm317t",
        "https://app.example/parts/part-ne555p",
        "https://app.example/alerts",
    ):
        assert link in page.links and link in text_links(text)


def test_the_text_part_says_what_the_html_part_says() -> None:
    rules = [notification(currency="EUR"), lifecycle(alert_id="a2"), rohs_lost(), *many(30)]
    settings = replace(LINKED, max_items=10)
    text, html = parts(sent(compose("ada@example.com", rules, now=T0, settings=settings)))
    page = Page(html)
    assert sorted(text_links(text)) == sorted(page.links)
    shown = [describe(n) for n in (rohs_lost(), lifecycle(), notification(currency="EUR"))]
    for item in shown:
        for value in (item.part, item.change, item.before, item.after, item.reason):
            assert value in text and value in page.words
    for line in ("and 23 more", "Manage your alerts", "Stop all alert emails"):
        assert line in text and line in page.words


# -- unsubscribe --------------------------------------------------------------------------------


def test_the_unsubscribe_headers_are_rfc_8058_one_click() -> None:
    rules = [notification(), lifecycle(alert_id="a2")]
    message = compose("ada@example.com", rules, now=T0, settings=LINKED)
    raw = flattened(message).decode()
    (line,) = [x for x in raw.split("\r\n") if x.startswith("List-Unsubscribe:")]
    match = re.fullmatch(
        r"List-Unsubscribe: <(https://tickd\.example/api/unsubscribe\?token=(\S+))>", line
    )
    assert match is not None, line  # one line, the URL as is: no encoded words, no folding
    assert "List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" in raw
    assert "DKIM" not in raw  # signing (which must cover both headers) is the mail server's
    # The provider's button stops every alert email of this user.
    assert tokens.verify(SECRET, match[2]) == tokens.Unsubscribe("ada", None)
    received = sent(message)
    assert received["List-Unsubscribe"] == f"<{match[1]}>"


def test_each_alert_shown_has_its_own_unsubscribe_link_and_the_footer_one_for_all() -> None:
    rules = [notification(), notification("LM317T", "n9", rule_id="r2"), lifecycle(alert_id="a2")]
    text, html = parts(sent(compose("ada@example.com", rules, now=T0, settings=LINKED)))
    stops = [link for link in Page(html).links if "/unsubscribe?token=" in link]
    requests = [tokens.verify(SECRET, link.split("token=")[1]) for link in stops]
    assert requests == [
        tokens.Unsubscribe("ada", "a2"),  # NE555P first: its change matters more
        tokens.Unsubscribe("ada", "a1"),
        tokens.Unsubscribe("ada", None),
    ]
    assert "Stop emails for the alert on NE555P: https://tickd.example/api/unsubscribe" in text


@pytest.mark.parametrize(
    "settings",
    [
        EmailSettings(),
        EmailSettings(public_base_url="https://tickd.example"),
        EmailSettings(unsubscribe_secret=SECRET),
    ],
)
def test_without_a_secret_and_a_public_url_there_is_no_unsubscribe(
    settings: EmailSettings,
) -> None:
    message = sent(compose("ada@example.com", [notification()], now=T0, settings=settings))
    assert message["List-Unsubscribe"] is None and message["List-Unsubscribe-Post"] is None
    text, html = parts(message)
    assert "unsubscribe" not in text.lower() and "unsubscribe" not in html.lower()
