"""The alert email: one per user per scan, listing the rules of theirs that triggered.

Multipart: a plain-text part and an HTML part that say the same: the same items, values, links
and footer; their layouts, and how the HTML reflows on a phone, are in email_templates.py. What
it shows:

- The subject and the first item are what changed most (a part that lost a compliance flag
  before one that reached EOL, before a risk, before a price move, before new alternates):
  "MAX232CPE is no longer RoHS compliant, and 2 more".
- At most `max_items` items, most important first, then "and N more" (a link to the app's
  notifications when `app_base_url` is set): hundreds of triggered rules stay one readable
  email.
- Prices with their currency (the notification's: currency_of reads it from the part's
  `priceCurrency`, else from the symbol of a price string such as `"$2.95"`) and two decimals,
  changes as rounded percentages, the time in the alert's `timeZone` when it has a valid one,
  else UTC, the zone named either way.
- Names as docs/alert-rules.md writes them: compliance flags compare in canonical form (ROHS)
  but read as people write them (RoHS, FLAG_SPELLINGS); lifecycle stages and risk levels are
  shown in their canonical form, which is already theirs (EOL, NRND, High).
- From a named sender: the configured `from_address` with its own display name
  (`Acme alerts <alerts@acme.example>`), or a bare address under SENDER_NAME
  (`tickd alerts <alerts@tickd.example>`).
- Links only from configured base URLs (settings.py): each part to the app, the footer to the
  alerts page, and, when unsubscribing is configured, one link per alert shown and one for all
  of them, the latter also in RFC 8058's `List-Unsubscribe` header for the mail provider's
  button.

Every value that came from the product's data (part names, values, reasons) is untrusted: it is
made one line, and escaped in HTML. Headers take only one-line text, so a part named
`x\\r\\nBcc: someone` cannot add a header or a recipient; the recipient must be one plain
address. Bidirectional controls (BIDI_CONTROLS) are dropped, so that a name cannot reorder what
is shown around it, and lone surrogates, which no encoding holds, become U+FFFD. Any value at all
is shown, whatever its type or size (`$1e+30`, `nan`): rendering never raises on data.

Pure: the time is a parameter, nothing is sent here.
"""

from __future__ import annotations

import hashlib
import html
import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from email.errors import HeaderParseError
from email.headerregistry import Address, BaseHeader, HeaderRegistry, UnstructuredHeader
from email.message import EmailMessage
from email.policy import Policy
from email.policy import default as default_policy
from email.utils import format_datetime
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

from tickd.handlers.alert_scanner import normalize, tokens
from tickd.handlers.alert_scanner.email_templates import (
    HTML,
    HTML_FOOTER_LINE,
    HTML_LINK,
    HTML_MORE,
    HTML_ROW,
    TEXT,
    TEXT_ITEM,
)
from tickd.handlers.alert_scanner.normalize import NormalizationError
from tickd.handlers.alert_scanner.rules import (
    display,
    finite_number,
    format_money,
    percent_text,
)
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.product_store import Notification

HEADER_MAX_CHARS = 150
VALUE_MAX_CHARS = 500
SUBJECT_PART_CHARS = 40
TIME_ZONE_MAX_CHARS = 64
# Bidirectional controls (embeddings, overrides, isolates, marks): dropped from what the
# product's data puts in an email, where they could make a name read as something else.
BIDI_CONTROLS = frozenset(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
)
# The From's display name when the configured address has none of its own.
SENDER_NAME = "tickd alerts"
SENDER_NAME_MAX_CHARS = 64
# Compliance flags as docs/alert-rules.md writes them: the canonical form (ROHS) is for
# comparing, not for reading. Any other flag is shown in its canonical form (REACH, WEEE).
FLAG_SPELLINGS = {"ROHS": "RoHS"}

_WHITESPACE = re.compile(r"\s+")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_DROP_BIDI = dict.fromkeys(map(ord, BIDI_CONTROLS))
_CANONICAL_FLAG = re.compile(r"\b(?:" + "|".join(map(re.escape, FLAG_SPELLINGS)) + r")\b")
# `Name <address>`: a From with a display name of its own.
_NAMED_ADDRESS = re.compile(r'\s*"?(?P<name>[^"<>]*?)"?\s*<(?P<address>[^<>]*)>\s*')


# -- the message --------------------------------------------------------------------------------


class _OneLineHeader(UnstructuredHeader, BaseHeader):
    """A header written on one line whatever its length. Folded, a long List-Unsubscribe URL
    would become RFC 2047 encoded words, which no mail provider reads as a URL (RFC 2369 has it
    as is); it is ASCII, under 300 characters, far below the 998 a line may have."""

    def fold(self, *, policy: Policy) -> str:
        return f"{self.name}: {self}{policy.linesep}"


_HEADERS = HeaderRegistry()
_HEADERS.map_to_type("list-unsubscribe", _OneLineHeader)
POLICY = default_policy.clone(header_factory=_HEADERS)


def compose(
    recipient: str,
    notifications: Sequence[Notification],
    *,
    now: datetime,
    from_address: str | None = None,
    settings: EmailSettings | None = None,
) -> EmailMessage:
    """The email for one recipient (one user); NormalizationError if the address is not one
    plain address."""
    digest = Digest(list(notifications), settings or EmailSettings())
    sender = named_sender(from_address) if from_address else None
    message = EmailMessage(policy=POLICY)
    if sender is not None:
        message["From"] = sender
    message["To"] = address(recipient, "recipient")
    message["Subject"] = subject(notifications)
    message["Date"] = format_datetime(now)
    message["Message-ID"] = message_id(notifications, domain=sender.domain if sender else "")
    # RFC 3834: a machine wrote this; auto-responders should not answer it.
    message["Auto-Submitted"] = "auto-generated"
    everything = digest.unsubscribe_url(None)
    if everything is not None:
        # RFC 8058: the provider's own button POSTs `List-Unsubscribe=One-Click` to it. The
        # whole list, as a list's unsubscribe means: every alert email of this user.
        message["List-Unsubscribe"] = f"<{everything}>"
        message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message.set_content(digest.text())
    message.add_alternative(digest.html(), subtype="html")
    return message


def address(value: str, what: str) -> Address:
    """One plain address, or NormalizationError."""
    try:
        return Address(addr_spec=normalize.email_address(value, what))
    except (ValueError, HeaderParseError) as exc:
        raise NormalizationError(f"{what}: {value!r} is not an email address") from exc


def named_sender(value: str) -> Address:
    """The From: `Name <address>` as configured, or a bare address under SENDER_NAME, so that
    inboxes show who writes; NormalizationError if the address is not one plain address or the
    name is not one short line of text."""
    named = _NAMED_ADDRESS.fullmatch(value)
    name, plain = (named["name"], named["address"]) if named else ("", value)
    name = name.strip()
    if name != header_text(name) or len(name) > SENDER_NAME_MAX_CHARS:
        raise NormalizationError(
            f"from: the display name must be one line of at most {SENDER_NAME_MAX_CHARS}"
            " characters, without control characters"
        )
    spec = address(plain, "from").addr_spec
    return Address(display_name=name or SENDER_NAME, addr_spec=spec)


def subject(notifications: Sequence[Notification]) -> str:
    """What changed most, and how many more: "MAX232CPE is no longer RoHS compliant, and 2 more"."""
    ranked = by_importance(notifications)
    top = describe(ranked[0], part_chars=SUBJECT_PART_CHARS) if ranked else None
    head = top.sentence if top else "Part alert"
    more = len(ranked) - 1
    return header_text(head + (f", and {more} more" if more > 0 else ""))


def message_id(notifications: Sequence[Notification], *, domain: str) -> str:
    """The same for the same notifications: a re-send after a crash is recognisable as one."""
    ids = "\n".join(sorted(n.id for n in notifications))
    digest = hashlib.sha256(ids.encode("utf-8", "surrogatepass")).hexdigest()
    return f"<alerts.{digest[:32]}@{header_text(domain) or 'tickd.invalid'}>"


# -- what one item says -------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One triggered rule in words, every value one line of plain (unescaped) text."""

    part: str
    change: str
    before: str
    after: str
    reason: str
    importance: float

    @property
    def sentence(self) -> str:
        return f"{self.part} {self.change}"


def describe(n: Notification, *, part_chars: int = VALUE_MAX_CHARS) -> Item:
    """The item for a notification: a sentence with the part as its subject, and the values in
    the form people read them."""
    describer = DESCRIBERS.get(n.type, _describe_other)
    change, importance, shown = describer(n)
    before, after = (one_line(shown(v)) for v in (n.previous_value, n.current_value))
    reason = spelled_flags(n.reason) if n.type == "compliance" else n.reason
    return Item(
        part=one_line(n.part_name, part_chars),
        change=one_line(change),
        before=before,
        after=after,
        reason=one_line(reason),
        importance=importance,
    )


def by_importance(notifications: Sequence[Notification]) -> list[Notification]:
    """Most important first; equals keep their order (the reading order they came in)."""
    return sorted(notifications, key=lambda n: -describe(n).importance)


Description = tuple[str, float, Callable[[Any], str]]


def _describe_price(n: Notification) -> Description:
    def money(value: Any) -> str:
        return format_money(value, n.currency)

    previous, current = finite_number(n.previous_value), finite_number(n.current_value)
    if current is None:
        return "price changed", 20.0, money
    if not previous:
        return f"price is now {money(current)}", 20.0, money
    # Infinite when the ratio is beyond a float (1e-300 to 1e300): then said without a number.
    change = abs((current - previous) / previous * 100)
    verb = "rose" if current > previous else "fell" if current < previous else "is still"
    moved = f" {percent_text(change).lstrip('+')}" if change and math.isfinite(change) else ""
    # Up to 10 more for the size of the move: a 90 % drop before a 5 % rise.
    return f"price {verb}{moved} to {money(current)}", 20.0 + min(change, 100) / 10, money


def _describe_compliance(n: Notification) -> Description:
    before, after = _flags(n.previous_value, n), _flags(n.current_value, n)
    lost = [f for f, v in after.items() if before.get(f) == "YES" and v != "YES"]
    gained = [f for f, v in after.items() if before.get(f) not in (None, "YES") and v == "YES"]
    if lost:
        return f"is no longer {_joined(lost)} compliant", 100.0, _flag_values
    if gained:
        return f"is {_joined(gained)} compliant again", 50.0, _flag_values
    changed = [f"{f} {v}" for f, v in after.items() if before.get(f) != v]
    everything = _flag_values(n.current_value)
    return f"compliance changed: {_joined(changed) or everything}", 55.0, _flag_values


def _describe_lifecycle(n: Notification) -> Description:
    stage = display(n.current_value)
    rank = normalize.LIFECYCLE_STAGES.index(stage) if stage in normalize.LIFECYCLE_STAGES else 0
    return f"is now {stage}", 60.0 + rank, display


def _describe_risk(n: Notification) -> Description:
    current, previous = finite_number(n.current_value), finite_number(n.previous_value)
    if current is None:  # a level: Low, Medium, High, Critical
        level = display(n.current_value)
        rank = normalize.RISK_LEVELS.index(level) if level in normalize.RISK_LEVELS else 0
        return f"is now {level} risk", 40.0 + rank, display
    if previous is None or current == previous:
        return f"risk score is now {display(current)}", 40.0, display
    verb = "rose" if current > previous else "fell"
    return f"risk score {verb} to {display(current)}", 40.0 + current / 100, display


def _describe_alternates(n: Notification) -> Description:
    before = set(_items(n.previous_value))
    new = [item for item in _items(n.current_value) if item not in before]
    count = len(new) or 1
    return f"has {count} new alternate{'s' if count > 1 else ''}", 10.0, display


def _describe_other(n: Notification) -> Description:
    return f"{n.type} changed", 0.0, display


DESCRIBERS: dict[str, Callable[[Notification], Description]] = {
    "price_change": _describe_price,
    "compliance": _describe_compliance,
    "lifecycle": _describe_lifecycle,
    "risk": _describe_risk,
    "new_alternate": _describe_alternates,
}


def _items(value: Any) -> list[str]:
    return [display(item) for item in value] if isinstance(value, list | tuple) else []


def _flags(value: Any, n: Notification) -> dict[str, str]:
    """Compliance flags as a map, names as people write them: all of them (a map), or the one
    flag the rule watches."""
    if isinstance(value, Mapping):
        return {flag_spelling(flag): display(v) for flag, v in value.items()}
    flag = _watched_flag(n.threshold)
    return {flag: display(value)} if flag and value is not None else {}


def _flag_values(value: Any) -> str:
    """A compliance value in words: `REACH: YES, RoHS: NO` for a map of flags."""
    if isinstance(value, Mapping):
        return display({flag_spelling(flag): v for flag, v in value.items()})
    return display(value)


def _watched_flag(threshold: Any) -> str | None:
    """The flag of a one-flag rule's threshold (`"RoHS=no"`, `{"flag": "RoHS"}`)."""
    name = threshold.get("flag") if isinstance(threshold, Mapping) else threshold
    if not isinstance(name, str):
        return None
    return flag_spelling(name.partition("=")[0])


def flag_spelling(name: Any) -> str:
    """A flag's name as docs/alert-rules.md writes it, whatever the stored spelling: `ROHS`,
    `rohs` and `RoHS` are all `RoHS`; a name that is not one is shown as it is."""
    try:
        canonical = normalize.flag_name(name)
    except NormalizationError:
        return display(name)
    return FLAG_SPELLINGS.get(canonical, canonical)


def spelled_flags(text: str) -> str:
    """The text with each canonical flag name that has a spelling of its own written so: the
    rules' reasons name flags canonically (`ROHS YES -> NO`)."""
    return _CANONICAL_FLAG.sub(lambda found: FLAG_SPELLINGS[found[0]], text)


def _joined(names: list[str]) -> str:
    """`A`, `A and B`, `A, B and C`; empty for none."""
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def recipient_zone(notifications: Sequence[Notification]) -> tzinfo | None:
    """The first valid `timeZone` of the recipient's alerts, or None (then UTC)."""
    for n in notifications:
        name = n.time_zone
        if not name or len(name) > TIME_ZONE_MAX_CHARS:
            continue
        try:
            return ZoneInfo(name)
        except (ValueError, KeyError, OSError):  # not a zone, or not a name at all
            continue
    return None


def format_time(moment: datetime, zone: tzinfo | None) -> str:
    """The moment for a reader: `2 March 2026 at 10:00 CET (Europe/Berlin)`, or with no zone
    known, or none that can hold the moment (the year 9999 at +14:00), `2 March 2026 at 09:00
    UTC`."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    try:
        local = moment.astimezone(zone or UTC)
    except OverflowError:
        local, zone = moment.astimezone(UTC), None
    named = f"{local.tzname()} ({zone})" if zone is not None else "UTC"
    return f"{local.day} {local:%B %Y} at {local:%H:%M} {named}"


# -- the digest ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Digest:
    """One recipient's email: their notifications as items, the links the settings allow."""

    notifications: list[Notification]
    settings: EmailSettings

    @property
    def ranked(self) -> list[Notification]:
        return by_importance(self.notifications)

    @property
    def shown(self) -> list[Notification]:
        return self.ranked[: self.settings.max_items]

    @property
    def hidden(self) -> int:
        return max(0, len(self.notifications) - self.settings.max_items)

    def headline(self) -> str:
        count = len(self.notifications)
        when = format_time(
            max(n.created_at for n in self.notifications), recipient_zone(self.notifications)
        )
        rules = "One of your part alerts" if count == 1 else f"{count} of your part alerts"
        return f"{rules} triggered, checked on {when}:"

    # links: None when the setting behind them is missing

    def app_url(self, path: str) -> str | None:
        base = self.settings.app_base_url
        return None if base is None else f"{base}{path}"

    def part_url(self, n: Notification) -> str | None:
        return self.app_url(f"/parts/{quote(safe_text(n.part_id), safe='')}")

    def unsubscribe_url(self, alert_id: str | None) -> str | None:
        base, secret = self.settings.unsubscribe_base, self.settings.unsubscribe_secret
        if base is None or secret is None or not self.notifications:
            return None
        token = tokens.sign(secret, self.notifications[0].user_id, alert_id)
        return f"{base}?token={token}"

    def alerts_shown(self) -> list[tuple[str, str]]:
        """(alert id, part name) of each alert among the items shown, in their order."""
        seen: dict[str, str] = {}
        for n in self.shown:
            seen.setdefault(n.alert_id, one_line(n.part_name, SUBJECT_PART_CHARS))
        return list(seen.items())

    def footer_lines(self) -> list[tuple[str, str | None]]:
        """(text, link) lines of the footer, the same in both parts."""
        lines: list[tuple[str, str | None]] = [
            ("You get this email because these alerts ask for one.", None)
        ]
        manage = self.app_url("/alerts")
        if manage is not None:
            lines.append(("Manage your alerts", manage))
        for alert_id, part in self.alerts_shown():
            stop = self.unsubscribe_url(alert_id)
            if stop is not None:
                lines.append((f"Stop emails for the alert on {part}", stop))
        everything = self.unsubscribe_url(None)
        if everything is not None:
            lines.append(("Stop all alert emails", everything))
        if manage is None and everything is None:
            lines[0] = (lines[0][0] + " Change that in the app.", None)
        return lines

    def more(self) -> tuple[str, str | None] | None:
        """ "and N more", linked to the app's notifications when there is an app."""
        if not self.hidden:
            return None
        return f"and {self.hidden} more", self.app_url("/notifications")

    # the two parts

    def text(self) -> str:
        items = "".join(self._text_item(n) for n in self.shown)
        more = self.more()
        more_text = "" if more is None else _text_line(*more) + "\n"
        footer = "".join(_text_line(text, link) + "\n" for text, link in self.footer_lines())
        return TEXT.substitute(headline=self.headline(), items=items, more=more_text, footer=footer)

    def _text_item(self, n: Notification) -> str:
        item = describe(n)
        link = self.part_url(n)
        return TEXT_ITEM.substitute(
            summary=item.sentence,
            before=item.before,
            after=item.after,
            reason=item.reason,
            link="" if link is None else f"    see:    {link}\n",
        )

    def html(self) -> str:
        rows = "\n".join(self._html_row(n) for n in self.shown)
        more = self.more()
        more_html = "" if more is None else HTML_MORE.substitute(link=_html_link(*more))
        footer = "".join(
            HTML_FOOTER_LINE.substitute(line=_html_link(text, link))
            for text, link in self.footer_lines()
        )
        return HTML.substitute(
            title=html.escape(subject(self.notifications)),
            headline=html.escape(self.headline()),
            rows=rows,
            more=more_html,
            footer=footer,
        )

    def _html_row(self, n: Notification) -> str:
        item = describe(n)
        escaped = {
            "part": _html_link(item.part, self.part_url(n)),
            "change": html.escape(item.change),
            "before": html.escape(item.before),
            "after": html.escape(item.after),
            "reason": html.escape(item.reason),
        }
        return HTML_ROW.substitute(escaped)


def _text_line(text: str, link: str | None) -> str:
    return text if link is None else f"{text}: {link}"


def _html_link(text: str, link: str | None) -> str:
    shown = html.escape(text)
    return shown if link is None else HTML_LINK.substitute(href=html.escape(link), text=shown)


# -- text hygiene -------------------------------------------------------------------------------


def safe_text(value: str) -> str:
    """The text without bidirectional controls, and with U+FFFD for each lone surrogate: what
    any encoding holds, read in the order it is written."""
    return _LONE_SURROGATE.sub("\ufffd", str(value).translate(_DROP_BIDI))


def one_line(value: str, limit: int = VALUE_MAX_CHARS) -> str:
    """safe_text, then control and line-separator characters become spaces, runs of space one
    space; cut at `limit` characters."""
    cleaned = "".join(
        " " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in safe_text(value)
    )
    text = _WHITESPACE.sub(" ", cleaned).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def header_text(value: str) -> str:
    """Safe as a header value: one line, no control characters, bounded."""
    return one_line(value, HEADER_MAX_CHARS)
