"""Unsubscribe tokens: who (a user), what (one alert, or all of the user's alerts), signed.

    <payload>.<mac>    both base64url without padding

The payload is the JSON `["u1", scope, user id, alert id]` (scope `alert` or `all`, the alert id
empty for `all`); the MAC is HMAC-SHA256 over a purpose label and the payload, keyed with
`unsubscribe_secret`, cut to 128 bits (forging one is still out of reach, and the link stays
short). A token never expires: an email read a year later still unsubscribes. Nothing but the
signature makes a token valid; the ids in it are only believed once it checks out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass

VERSION = "u1"
PURPOSE = b"tickd alert email unsubscribe\x00"
MAC_BYTES = 16
MAX_TOKEN_CHARS = 1024
ALERT, ALL = "alert", "all"


class MalformedToken(ValueError):
    """Not a token at all (cut off, wrong alphabet): a 400."""


class ForgedToken(ValueError):
    """Well formed, but not signed with our secret (forged, altered, or an old secret): a 403."""


@dataclass(frozen=True)
class Unsubscribe:
    user_id: str
    # None: every alert of the user.
    alert_id: str | None

    @property
    def scope(self) -> str:
        return ALL if self.alert_id is None else ALERT


def sign(secret: str, user_id: str, alert_id: str | None) -> str:
    scope = ALL if alert_id is None else ALERT
    payload = _b64(
        json.dumps([VERSION, scope, user_id, alert_id or ""], separators=(",", ":")).encode()
    )
    return f"{payload}.{_b64(_mac(secret, payload))}"


def verify(secret: str, token: str) -> Unsubscribe:
    """The request a token carries; MalformedToken or ForgedToken otherwise."""
    if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise MalformedToken("not an unsubscribe token")
    payload, mac = token.split(".")
    given = _unb64(mac)
    if not hmac.compare_digest(given, _mac(secret, payload)):
        raise ForgedToken("the token's signature does not match")
    try:
        version, scope, user_id, alert_id = json.loads(_unb64(payload))
    except (ValueError, TypeError):
        raise MalformedToken("not an unsubscribe token") from None
    if version != VERSION or scope not in (ALERT, ALL) or not isinstance(user_id, str):
        raise MalformedToken("not an unsubscribe token")
    if not isinstance(alert_id, str) or (scope == ALERT) != bool(alert_id):
        raise MalformedToken("not an unsubscribe token")
    return Unsubscribe(user_id, alert_id if scope == ALERT else None)


def _mac(secret: str, payload: str) -> bytes:
    digest = hmac.new(secret.encode(), PURPOSE + payload.encode(), hashlib.sha256).digest()
    return digest[:MAC_BYTES]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    if not text or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        raise MalformedToken("not an unsubscribe token")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise MalformedToken("not an unsubscribe token") from None
    # The last character may carry unused bits: only the one spelling of the bytes is a token,
    # so that no altered link works.
    if _b64(data) != text:
        raise MalformedToken("not an unsubscribe token")
    return data
