"""Backend URLs (the local path in an embedded one) and loopback hosts."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """`localhost`, or an address in 127.0.0.0/8 or ::1 (brackets allowed)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def local_path(url: str) -> str:
    """`scheme:///relative/path` -> `relative/path`; `scheme:////abs/path` -> `/abs/path`.

    Three slashes then the path as written, as SQLAlchemy's sqlite URLs do."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ValueError(f"{url!r}: expected {parts.scheme}:///path (no host)")
    return parts.path[1:] if parts.path.startswith("/") else parts.path
