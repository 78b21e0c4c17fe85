"""Keeping secrets out of logs, events, execution records and API responses."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

MASK = "***"
# Names that hold a secret whatever the handler says: password, api_key, X-Auth-Token, secret...
_SECRET_NAME = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[-_]?key|private[-_]?key|credential|authorization"
    r"|^auth$|cookie|session[-_]?id",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]+@", re.I)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def is_secret_name(name: str, declared: Collection[str] = ()) -> bool:
    return name in declared or bool(_SECRET_NAME.search(name))


def mask(value: Any, declared: Collection[str] = ()) -> Any:
    """A copy with the values of secret-named keys masked, at any depth, and passwords in URLs
    and bearer tokens in strings masked."""
    if isinstance(value, Mapping):
        return {
            key: MASK if is_secret_name(str(key), declared) else mask(item, declared)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask(item, declared) for item in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value


def scrub_text(text: str) -> str:
    """Mask credentials that found their way into free text (an exception message, say)."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)
