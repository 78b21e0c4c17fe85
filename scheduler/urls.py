"""Backend URLs: the local path in an embedded one, and a form safe to log."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def local_path(url: str) -> str:
    """`scheme:///relative/path` -> `relative/path`; `scheme:////abs/path` -> `/abs/path`.

    Three slashes then the path as written, as SQLAlchemy's sqlite URLs do."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ValueError(f"{url!r}: expected {parts.scheme}:///path (no host)")
    return parts.path[1:] if parts.path.startswith("/") else parts.path


def redact_url(url: str) -> str:
    """The URL with any password replaced, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
