"""The alert email: one per user per scan, listing every rule of theirs that triggered.

Multipart: a plain-text part and an HTML part, from the templates below. Every value that came
from the product's data (part names, values, reasons) is untrusted: it is made one line, and
escaped in HTML. Headers take only one-line text, so a part named `x\\r\\nBcc: someone` cannot add
a header or a recipient; the recipient must be one plain address.

Pure: the time is a parameter, nothing is sent here.
"""

from __future__ import annotations

import hashlib
import html
import re
import unicodedata
from collections.abc import Sequence
from datetime import datetime
from email.errors import HeaderParseError
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime
from string import Template

from handlers.alert_scanner import normalize
from handlers.alert_scanner.normalize import NormalizationError
from handlers.alert_scanner.rules import display
from handlers.product_store import Notification

SUBJECT_PARTS_SHOWN = 2
HEADER_MAX_CHARS = 150
VALUE_MAX_CHARS = 500
TYPE_LABELS = {
    "price_change": "price",
    "risk": "risk",
    "compliance": "compliance",
    "lifecycle": "lifecycle stage",
    "new_alternate": "alternates",
}

TEXT = Template("""\
Hello,

$headline

$items
You get this email because these alerts ask for one; change that in the app.
""")

TEXT_ITEM = Template("""\
* $part ($what)
    before: $before
    after:  $after
    why:    $reason
""")

HTML = Template("""\
<!DOCTYPE html>
<html>
<body style="font-family: sans-serif">
<p>Hello,</p>
<p>$headline</p>
<table cellpadding="6" style="border-collapse: collapse">
<tr><th align="left">Part</th><th align="left">What</th><th align="left">Before</th>\
<th align="left">After</th><th align="left">Why</th></tr>
$rows
</table>
<p style="color: #666">You get this email because these alerts ask for one; change that in the
app.</p>
</body>
</html>
""")

HTML_ROW = Template(
    "<tr><td><b>$part</b></td><td>$what</td><td>$before</td><td>$after</td><td>$reason</td></tr>"
)

_WHITESPACE = re.compile(r"\s+")


def compose(
    recipient: str,
    notifications: Sequence[Notification],
    *,
    now: datetime,
    from_address: str | None = None,
) -> EmailMessage:
    """The email for one recipient; NormalizationError if the address is not one plain address."""
    sender = address(from_address, "from") if from_address else None
    message = EmailMessage()
    if sender is not None:
        message["From"] = sender
    message["To"] = address(recipient, "recipient")
    message["Subject"] = subject(notifications)
    message["Date"] = format_datetime(now)
    message["Message-ID"] = message_id(notifications, domain=sender.domain if sender else "")
    # RFC 3834: a machine wrote this; auto-responders should not answer it.
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(text_body(notifications))
    message.add_alternative(html_body(notifications), subtype="html")
    return message


def address(value: str, what: str) -> Address:
    """One plain address, or NormalizationError."""
    try:
        return Address(addr_spec=normalize.email_address(value, what))
    except (ValueError, HeaderParseError) as exc:
        raise NormalizationError(f"{what}: {value!r} is not an email address") from exc


def subject(notifications: Sequence[Notification]) -> str:
    names = list(dict.fromkeys(one_line(n.part_name, 40) for n in notifications))
    shown = ", ".join(names[:SUBJECT_PARTS_SHOWN])
    more = len(names) - SUBJECT_PARTS_SHOWN
    count = len(notifications)
    head = "Part alert" if count == 1 else f"{count} part alerts"
    return header_text(f"{head}: {shown}" + (f" and {more} more" if more > 0 else ""))


def message_id(notifications: Sequence[Notification], *, domain: str) -> str:
    """The same for the same notifications: a re-send after a crash is recognisable as one."""
    digest = hashlib.sha256("\n".join(sorted(n.id for n in notifications)).encode()).hexdigest()
    return f"<alerts.{digest[:32]}@{header_text(domain) or 'tickd.invalid'}>"


def headline(notifications: Sequence[Notification]) -> str:
    count = len(notifications)
    return (
        "One of your part alerts triggered:"
        if count == 1
        else f"{count} of your part alerts triggered:"
    )


def text_body(notifications: Sequence[Notification]) -> str:
    items = "".join(TEXT_ITEM.substitute(_fields(n)) for n in notifications)
    return TEXT.substitute(headline=headline(notifications), items=items)


def html_body(notifications: Sequence[Notification]) -> str:
    rows = "\n".join(HTML_ROW.substitute(_escaped(_fields(n))) for n in notifications)
    return HTML.substitute(headline=html.escape(headline(notifications)), rows=rows)


def _fields(notification: Notification) -> dict[str, str]:
    """What one item shows, every value one line of text."""
    return {
        "part": one_line(notification.part_name),
        "what": one_line(TYPE_LABELS.get(notification.type, notification.type)),
        "before": one_line(display(notification.previous_value)),
        "after": one_line(display(notification.current_value)),
        "reason": one_line(notification.reason),
    }


def _escaped(fields: dict[str, str]) -> dict[str, str]:
    return {name: html.escape(value, quote=True) for name, value in fields.items()}


def one_line(value: str, limit: int = VALUE_MAX_CHARS) -> str:
    """Control and line-separator characters become spaces, runs of space one space; cut at
    `limit` characters."""
    cleaned = "".join(
        " " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in str(value)
    )
    text = _WHITESPACE.sub(" ", cleaned).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def header_text(value: str) -> str:
    """Safe as a header value: one line, no control characters, bounded."""
    return one_line(value, HEADER_MAX_CHARS)
