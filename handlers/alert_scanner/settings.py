"""The alert emails' settings, from the daemon's `[handler_settings.alert_scanner]` (or
`TICKD_HANDLER_SETTINGS__ALERT_SCANNER__<NAME>`): read by the scanner, which writes the emails,
and by the API, which answers their unsubscribe links.

- `app_base_url`: the product app. Each part in an email links to `<app>/parts/<part id>`, the
  footer to `<app>/alerts`, and "and N more" to `<app>/notifications`. Unset: no links at all.
- `public_base_url`: where tickd's API is reachable from the internet (behind its proxy); the
  unsubscribe links point at `<public>/unsubscribe?token=...`.
- `unsubscribe_secret`: the key the unsubscribe tokens are signed with (HMAC-SHA256), at least
  32 characters (`openssl rand -hex 32`). Changing it voids the links of every email sent.
  Without it, or without `public_base_url`, emails carry no unsubscribe link and no
  `List-Unsubscribe` header (the daemon says so at boot).
- `max_items`: triggered rules listed in one email (default 25); the rest are counted.

A bad value is a ValueError naming the setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tickd.scheduler.plugin.api import is_loopback

CONFIG_TABLE = "handler_settings.alert_scanner"
MIN_SECRET_CHARS = 32
DEFAULT_MAX_ITEMS = 25
MAX_ITEMS_LIMIT = 500
URL_MAX_CHARS = 200


@dataclass(frozen=True, kw_only=True)
class EmailSettings:
    app_base_url: str | None = None
    public_base_url: str | None = None
    unsubscribe_secret: str | None = field(default=None, repr=False)
    max_items: int = DEFAULT_MAX_ITEMS

    @property
    def unsubscribe_base(self) -> str | None:
        """`<public>/unsubscribe` when both halves of unsubscribing are configured."""
        if self.public_base_url is None or self.unsubscribe_secret is None:
            return None
        return f"{self.public_base_url}/unsubscribe"

    def missing_for_unsubscribe(self) -> list[str]:
        """The settings still needed for unsubscribe links (none once both are set)."""
        given = {
            "public_base_url": self.public_base_url,
            "unsubscribe_secret": self.unsubscribe_secret,
        }
        return [f"{CONFIG_TABLE}.{name}" for name, value in given.items() if value is None]

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> EmailSettings:
        unknown = set(config) - {
            "app_base_url",
            "public_base_url",
            "unsubscribe_secret",
            "max_items",
        }
        if unknown:
            raise ValueError(f"{CONFIG_TABLE}: unknown {', '.join(sorted(unknown))}")
        return cls(
            app_base_url=_base_url(config, "app_base_url"),
            public_base_url=_base_url(config, "public_base_url"),
            unsubscribe_secret=_secret(config.get("unsubscribe_secret")),
            max_items=_max_items(config.get("max_items", DEFAULT_MAX_ITEMS)),
        )


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _base_url(config: Mapping[str, Any], name: str) -> str | None:
    """https://host[:port][/path], no trailing slash; http only for a loopback host (a
    developer's machine). Nothing a browser or a mail client could read in two ways."""
    value = config.get(name)
    if not _given(value):
        return None
    where = f"{CONFIG_TABLE}.{name}"
    if not isinstance(value, str) or len(value) > URL_MAX_CHARS or not value.isascii():
        raise ValueError(f"{where}: an https:// URL of at most {URL_MAX_CHARS} ASCII characters")
    url = value.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ValueError(f"{where}: not a URL") from None
    if any(c.isspace() or c in "<>\"'\\" or ord(c) < 32 for c in url):
        raise ValueError(f"{where}: spaces, quotes, angle brackets and control characters")
    if parts.query or parts.fragment or parts.username is not None or not parts.hostname:
        raise ValueError(f"{where}: scheme, host and path only (no query, fragment or login)")
    if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback(parts.hostname)):
        raise ValueError(f"{where}: https:// (http:// only for a loopback host)")
    return url


def _secret(value: Any) -> str | None:
    if not _given(value):
        return None
    if not isinstance(value, str) or len(value.strip()) < MIN_SECRET_CHARS:
        # The value itself is never part of the message.
        raise ValueError(
            f"{CONFIG_TABLE}.unsubscribe_secret: at least {MIN_SECRET_CHARS} characters"
            " (e.g. openssl rand -hex 32)"
        )
    return value.strip()


def _max_items(value: Any) -> int:
    number = value
    if isinstance(value, str) and value.strip().isdigit():  # from the environment
        number = int(value.strip())
    if isinstance(number, bool) or not isinstance(number, int):
        number = 0
    if not 1 <= number <= MAX_ITEMS_LIMIT:
        raise ValueError(f"{CONFIG_TABLE}.max_items: a whole number from 1 to {MAX_ITEMS_LIMIT}")
    return number
