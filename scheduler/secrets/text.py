"""Finding secrets: names that mark a value as secret, and credentials in free text (a URL's
password, an Authorization value, `name=value` and `"name": "value"` pairs), with scrub_text to
mask them.

Everything here runs on what clients and handlers send (params up to the 1 MiB request limit,
response bodies, exception messages), so it is linear in the length of its input, and fast: a
pattern is only tried where its anchor (`://`, `bearer`, the first letters of a secret name)
occurs, found by str.find at C speed, and no two attempts read the same characters twice over
(see secret_spans). docs/security.md says what is masked where.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Iterator
from itertools import chain

MASK = "***"

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
URL_PASSWORD = re.compile(r"://[^:/@\s]*+:(?P<secret>[^/?#\s]+)(?=@)")
# Authorization header values quoted in text: Bearer TOKEN, Basic CREDENTIALS.
AUTH_VALUE = re.compile(r"\b(?i:bearer|basic)\s++(?P<secret>[A-Za-z0-9._~+/=*-]++)")
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
    lowered = lower_in_place(name)
    return any(_SECRET_NAME.match(name, at) for at in find_all(lowered, _SECRET_NAME_ANCHORS))


def scrub_text(text: str) -> str:
    """Mask credentials that found their way into free text (an exception message, say)."""
    spans = secret_spans(text)
    return MASK.join(split_around(text, spans)[0]) if spans else text


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Where in `text` the credentials are that scrub_text masks: sorted, overlaps merged.

    Each pattern is tried only where its anchor occurs, and no two attempts read the same
    characters twice over: a URL password ends before the `/` of the next `://`, a bearer
    token at the next space, and the attempts in a run of name characters that already led
    to a value, or nowhere, are skipped. So this is linear in the length of `text`.
    """
    lowered = lower_in_place(text)
    if not _ANY_ANCHOR.search(lowered):
        return []  # most strings: one quick look, in C
    urls = matches_at(URL_PASSWORD, text, find_all(lowered, ["://"]))
    bearers = matches_at(AUTH_VALUE, text, find_all(lowered, ["bearer", "basic"]))
    found = [m.span("secret") for m in chain(urls, bearers)] + _named_secrets(text, lowered)
    return merged_spans(found)


def merged_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` sorted, those that overlap or touch made one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def lower_in_place(text: str) -> str:
    """`text` lower-cased, each character where it was (str.lower turns a few characters into
    two: then only ASCII is lowered)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def find_all(lowered: str, anchors: Iterable[str]) -> list[int]:
    """Every position where one of `anchors` occurs, in order."""
    found = set()
    for anchor in anchors:
        at = lowered.find(anchor)
        while at >= 0:
            found.add(at)
            at = lowered.find(anchor, at + 1)
    return sorted(found)


def matches_at(pattern: re.Pattern[str], text: str, starts: list[int]) -> Iterator[re.Match[str]]:
    after = 0
    for at in starts:
        if at >= after and (match := pattern.match(text, at)):
            after = match.end()
            yield match


def _named_secrets(text: str, lowered: str) -> list[tuple[int, int]]:
    spans = []
    after = 0
    for at in find_all(lowered, _SECRET_NAME_ANCHORS):
        if at < after or not _SECRET_NAME.match(text, at):
            continue
        match = _NAMED_SECRET.match(text, at)
        if match:
            spans.append(match.span("plain" if match["plain"] is not None else "quoted"))
            after = match.end()
        else:  # every later secret name in this run leads to the same nowhere
            after = _NAME_RUN.match(text, at).end()  # type: ignore[union-attr]
    return spans


def split_around(text: str, spans: list[tuple[int, int]]) -> tuple[list[str], list[str]]:
    """`text` cut into the parts around its secrets and the secrets; plain has one more."""
    plain, secrets, at = [], [], 0
    for start, end in spans:
        plain.append(text[at:start])
        secrets.append(text[start:end])
        at = end
    plain.append(text[at:])
    return plain, secrets
