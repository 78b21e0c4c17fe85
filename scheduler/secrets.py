"""Keeping secrets out of logs, events, execution records and API responses.

Everything here runs on what clients and handlers send (params up to the 1 MiB request limit,
response bodies, exception messages), so it is linear in the length of its input, and fast: a
pattern is only tried where its anchor (`://`, `bearer`, the first letters of a secret name)
occurs, found by str.find at C speed, and no two attempts read the same characters twice over
(see secret_spans). docs/security.md says what is masked where.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from itertools import chain
from typing import Any
from urllib.parse import unquote

MASK = "***"
# A secret shorter than this is not looked for in what a run returns: masking every "abc" of a
# result would destroy it, and a secret that short protects nothing anyway.
MIN_ECHOED_SECRET = 4

# Parts that make a name secret wherever they appear in it, in any case, the words of a part
# joined by at most one separator: password, db_passwd, X-Auth-Token, client_secret, accessKey,
# PHPSESSID... `token` also catches counts such as `tokens_used`: a harmless value masked beats
# a leak.
_SECRET_PARTS = (
    ("passw",), ("pass", "phrase"), ("pass", "code"), ("pwd",), ("secret",), ("token",),
    ("credential",), ("authorization",), ("cookie",), ("bearer",), ("jwt",), ("signature",),
    ("api", "key"), ("access", "key"), ("priv", "key"), ("private", "key"), ("ssh", "key"),
    ("signing", "key"), ("encryption", "key"), ("session", "id"), ("sessid",),
)  # fmt: skip
# Short words that make a name secret only as a word of their own (`basic_auth`, `dbPass`,
# `?sig=`), not inside another (`author`, `bypass`, `signal`).
_SECRET_WORDS = ("auth", "pass", "pw", "sig")
# Where a secret name can start: every alternative below begins with one of these.
_SECRET_NAME_ANCHORS = (
    "pass", "pw", "secret", "token", "credential", "auth", "cookie", "bearer", "jwt", "sig",
    "api", "access", "priv", "ssh", "encryption", "sess", "key",
)  # fmt: skip


def _any_case(word: str) -> str:
    return "".join(f"[{c}{c.upper()}]" for c in word)


def _part(words: tuple[str, ...]) -> str:
    return "[-_.]?".join(_any_case(w) for w in words)


def _word(word: str) -> str:
    """`word` in lower, Title or UPPER case as a word of a name: after a non-alphanumeric
    character or at a camelCase hump, and not running on into more of the same word."""
    title, upper = word.title(), word.upper()
    return (
        rf"{word}(?<![A-Za-z0-9]{word})(?![a-z0-9])"
        rf"|{title}(?<![A-Z]{title})(?![a-z0-9])"
        rf"|{upper}(?<![A-Za-z0-9]{upper})(?![A-Za-z0-9])"
    )


# `key` alone is a secret (the `?key=` of many APIs); `partition_key`, `keyword`, `monkey` not.
_WHOLE_KEY = rf"{_any_case('key')}(?<![\w.\-]{_any_case('key')})(?![\w.\-])"
# A secret name that starts where it is matched.
_SECRET_NAME = re.compile(
    "|".join([*map(_part, _SECRET_PARTS), *map(_word, _SECRET_WORDS), _WHOLE_KEY])
)
# What follows a secret name in free text: the rest of its run of name characters, then
# `=VALUE` (query strings, form bodies: ?token=.., &api_key=.., password=..) or `": "VALUE"`
# (JSON, or `': '` in a dict's repr in an exception message).
_NAMED_SECRET = re.compile(
    rf"(?:{_SECRET_NAME.pattern})[\w.\-]*+"
    r"(?:=(?P<plain>[^&#\s\"'<>]++)"
    r"|(?P<q>[\"'])\s*+:\s*+(?P=q)(?P<quoted>(?:(?!(?P=q))[^\\]|\\.)++))"
)
_NAME_RUN = re.compile(r"[\w.\-]*+")
# scheme://user:PASSWORD@host: the password runs to the last @ of the authority (an unencoded
# @ in a password is common), which ends at / ? # or whitespace: an attempt never reads past
# the next `://`.
_URL_PASSWORD = re.compile(r"://[^:/@\s]*+:(?P<secret>[^/?#\s]+)(?=@)")
# Authorization header values quoted in text: Bearer TOKEN, Basic CREDENTIALS.
_BEARER = re.compile(r"\b(?i:bearer|basic)\s++(?P<secret>[A-Za-z0-9._~+/=*-]++)")
_ANY_ANCHOR = re.compile("|".join(["://", "bearer", "basic", *_SECRET_NAME_ANCHORS]))
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def is_secret_name(name: str, declared: Collection[str] = ()) -> bool:
    if name in declared:
        return True
    if len(name) <= _CACHED_NAME_LENGTH:
        return _is_secret_short_name(name)
    return _holds_secret_name(name)


# Documents repeat their keys: short names are looked up once.
_CACHED_NAME_LENGTH = 64


@functools.lru_cache(maxsize=4096)
def _is_secret_short_name(name: str) -> bool:
    return _holds_secret_name(name)


def _holds_secret_name(name: str) -> bool:
    lowered = _lower(name)
    return any(_SECRET_NAME.match(name, at) for at in _starts(lowered, _SECRET_NAME_ANCHORS))


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


def scrub_text(text: str) -> str:
    """Mask credentials that found their way into free text (an exception message, say)."""
    spans = secret_spans(text)
    return MASK.join(_split(text, spans)[0]) if spans else text


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Where in `text` the credentials are that scrub_text masks: sorted, overlaps merged.

    Each pattern is tried only where its anchor occurs, and no two attempts read the same
    characters twice over: a URL password ends before the `/` of the next `://`, a bearer
    token at the next space, and the attempts in a run of name characters that already led
    to a value, or nowhere, are skipped. So this is linear in the length of `text`.
    """
    lowered = _lower(text)
    if not _ANY_ANCHOR.search(lowered):
        return []  # most strings: one quick look, in C
    urls = _anchored(_URL_PASSWORD, text, _starts(lowered, ["://"]))
    bearers = _anchored(_BEARER, text, _starts(lowered, ["bearer", "basic"]))
    found = [m.span("secret") for m in chain(urls, bearers)] + _named_secrets(text, lowered)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _lower(text: str) -> str:
    """`text` lower-cased, each character where it was (str.lower turns a few characters into
    two: then only ASCII is lowered)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _starts(lowered: str, anchors: Iterable[str]) -> list[int]:
    """Every position where one of `anchors` occurs, in order."""
    found = set()
    for anchor in anchors:
        at = lowered.find(anchor)
        while at >= 0:
            found.add(at)
            at = lowered.find(anchor, at + 1)
    return sorted(found)


def _anchored(pattern: re.Pattern[str], text: str, starts: list[int]) -> Iterator[re.Match[str]]:
    after = 0
    for at in starts:
        if at >= after and (match := pattern.match(text, at)):
            after = match.end()
            yield match


def _named_secrets(text: str, lowered: str) -> list[tuple[int, int]]:
    spans = []
    after = 0
    for at in _starts(lowered, _SECRET_NAME_ANCHORS):
        if at < after or not _SECRET_NAME.match(text, at):
            continue
        match = _NAMED_SECRET.match(text, at)
        if match:
            spans.append(match.span("plain" if match["plain"] is not None else "quoted"))
            after = match.end()
        else:  # every later secret name in this run leads to the same nowhere
            after = _NAME_RUN.match(text, at).end()  # type: ignore[union-attr]
    return spans


def _split(text: str, spans: list[tuple[int, int]]) -> tuple[list[str], list[str]]:
    """`text` cut into the parts around its secrets and the secrets; plain has one more."""
    plain, secrets, at = [], [], 0
    for start, end in spans:
        plain.append(text[at:start])
        secrets.append(text[start:end])
        at = end
    plain.append(text[at:])
    return plain, secrets


def restore_masked(new: str, old: str | None) -> str | None:
    """`new` as a client sends it back after reading it masked: each `***` where a secret was
    shown is the stored secret again. That holds only where the rest of the string is the
    stored one, or a changed URL could carry the stored password to another host: None then.
    A string with no masked part (a new password, say) is taken as it is."""
    plain, secrets = _split(new, secret_spans(new))
    if MASK not in secrets:
        return new
    if old is None:
        return None
    if new == scrub_text(old):
        return old
    old_plain, old_secrets = _split(old, secret_spans(old))
    if plain != old_plain:
        return None
    kept = [was if now == MASK else now for now, was in zip(secrets, old_secrets, strict=True)]
    return "".join(p + s for p, s in zip(plain, [*kept, ""], strict=True))


# -- what a run returns: the job's own secrets, echoed back ---------------------------------------


def secret_values(params: Any, declared: Collection[str] = ()) -> list[str]:
    """The secrets a job's params hold, as literal strings to look for in what its runs return
    (a server that echoes a password back): the values of secret-named and declared params, and
    the parts scrub_text masks in the other strings. Longest first, so that a secret holding
    another is masked whole."""
    found = {v for v in _secrets_in(params, declared) if len(v) >= MIN_ECHOED_SECRET}
    return sorted(found, key=len, reverse=True)


def _secrets_in(value: Any, declared: Collection[str]) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if is_secret_name(str(key), declared):
                yield from _all_strings(item)
            else:
                yield from _secrets_in(item, declared)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secrets_in(item, declared)
    elif isinstance(value, str):
        yield from _text_secrets(value)


def _all_strings(value: Any) -> Iterator[str]:
    """Everything under a secret name is secret: `{"credentials": {"user": .., "pass": ..}}`."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _all_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _all_strings(item)
    elif isinstance(value, str):
        yield value
        yield from _text_secrets(value)  # `Bearer abc` is also echoed as `abc`
    elif value is not None and not isinstance(value, bool):
        yield str(value)  # a numeric PIN


def _text_secrets(text: str) -> Iterator[str]:
    for start, end in secret_spans(text):
        secret = text[start:end]
        yield secret
        yield unquote(secret)  # a server echoes `p@ss`, not the `p%40ss` of the URL


def scrub_values(value: Any, secrets: Collection[str]) -> Any:
    """A copy of a JSON-ready value with every occurrence of each secret masked, in its strings
    and keys. The strings are joined by a character none of them holds, so that each secret is
    searched for once, whatever the number of strings."""
    if not secrets:
        return value
    strings = list(_strings_of(value))
    separator = _absent_character(strings)
    text = separator.join(strings)
    for secret in secrets:  # longest first
        if separator not in secret and secret in text:
            text = text.replace(secret, MASK)
    return _rebuilt(value, iter(text.split(separator)))


def _strings_of(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings_of(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings_of(item)
    elif isinstance(value, str):
        yield value


def _rebuilt(value: Any, scrubbed: Iterator[str]) -> Any:
    """`value` with its strings taken, in the order _strings_of gave them, from `scrubbed`."""
    if isinstance(value, Mapping):
        rebuilt = {}
        for item in value.values():
            key = next(scrubbed)
            rebuilt[key] = _rebuilt(item, scrubbed)
        return rebuilt
    if isinstance(value, list | tuple):
        return [_rebuilt(item, scrubbed) for item in value]
    if isinstance(value, str):
        return next(scrubbed)
    return value


def _absent_character(strings: Iterable[str]) -> str:
    """A character that occurs in none of `strings` (so in none of the secrets found in them):
    the first of the private use areas that is free. There are more of them than characters
    in any record, so one is always free."""
    used = set("".join(strings))
    return next(chr(c) for c in chain(*_PRIVATE_USE) if chr(c) not in used)


_PRIVATE_USE = (range(0xE000, 0xF900), range(0xF0000, 0xFFFFE), range(0x100000, 0x10FFFE))
