"""Keeping secrets out of logs, events, execution records and API responses.

Here: mask, which masks a value's secrets at any depth, and restore_masked, which takes back
what a client returns masked. Finding secrets in names and text is in secret_text, and a job's
own secrets echoed back by its runs in secret_echoes; the names most callers use are exported
here too. docs/security.md says what is masked where.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from tickd.scheduler.secrets.echoes import scrub_values, secret_values
from tickd.scheduler.secrets.text import (
    MASK,
    is_secret_name,
    scrub_text,
    secret_spans,
    split_around,
)

__all__ = [
    "MASK",
    "is_secret_name",
    "mask",
    "restore_masked",
    "scrub_text",
    "scrub_values",
    "secret_values",
    "with_settings_secrets",
]


def mask(value: Any, declared: Collection[str] = ()) -> Any:
    """A copy with the values of secret-named keys masked, at any depth, and credentials in
    strings (scrub_text) masked."""
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


def with_settings_secrets(
    found: list[str], settings: Mapping[str, Any], declared: Collection[str] = ()
) -> list[str]:
    """`found` (a job's secrets) with those of its handler's settings ([handler_settings.<name>]:
    secret-named and declared ones), which a far end echoes back as readily as the job's own.
    Longest first, as secret_values gives them."""
    if not settings:
        return found
    return sorted({*found, *secret_values(settings, declared)}, key=len, reverse=True)


def restore_masked(new: str, old: str | None) -> str | None:
    """`new` as a client sends it back after reading it masked: each `***` where a secret was
    shown is the stored secret again. That holds only where the rest of the string is the
    stored one, or a changed URL could carry the stored password to another host: None then.
    A string with no masked part (a new password, say) is taken as it is."""
    plain, secrets = split_around(new, secret_spans(new))
    if MASK not in secrets:
        return new
    if old is None:
        return None
    if new == scrub_text(old):
        return old
    old_plain, old_secrets = split_around(old, secret_spans(old))
    if plain != old_plain:
        return None
    kept = [was if now == MASK else now for now, was in zip(secrets, old_secrets, strict=True)]
    return "".join(p + s for p, s in zip(plain, [*kept, ""], strict=True))
