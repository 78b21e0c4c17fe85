"""How an error nobody foresaw is kept: on its rule or notification, and in the scan's result."""

from __future__ import annotations

# The length of an unforeseen error's message kept.
ERROR_MAX_CHARS = 300


def unforeseen(exc: Exception) -> str:
    """Its type and the start of its message, in text any store and log can hold (a lone
    surrogate in the message is written as its escape)."""
    message = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
    if len(message) > ERROR_MAX_CHARS:
        message = message[: ERROR_MAX_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {message}"
