"""Backend URLs: the local path in an embedded one."""

from __future__ import annotations

from urllib.parse import urlsplit


def local_path(url: str) -> str:
    """`scheme:///relative/path` -> `relative/path`; `scheme:////abs/path` -> `/abs/path`.

    Three slashes then the path as written, as SQLAlchemy's sqlite URLs do."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ValueError(f"{url!r}: expected {parts.scheme}:///path (no host)")
    return parts.path[1:] if parts.path.startswith("/") else parts.path
