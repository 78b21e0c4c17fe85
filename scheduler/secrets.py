"""Keeping secrets out of logs, events, execution records and API responses.

Everything here runs on what clients and handlers send (params up to the 1 MiB request limit,
response bodies, exception messages), so it is linear in the length of its input, and fast: a
pattern is only tried where its anchor (`://`, `bearer`, the first letters of a secret name)
occurs, found by str.find at C speed, and no two attempts read the same characters twice over
(see secret_spans). docs/security.md says what is masked where.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from bisect import bisect_right
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import accumulate, chain
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
    return _merged(found)


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` sorted, those that overlap or touch made one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
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
        yield from value.strip().split(None, 1)[1:]  # and `Token abc` as `abc`
    elif value is not None and not isinstance(value, bool):
        yield str(value)  # a numeric PIN


def _text_secrets(text: str) -> Iterator[str]:
    for start, end in secret_spans(text):
        secret = text[start:end]
        yield secret
        yield unquote(secret)  # a server echoes `p@ss`, not the `p%40ss` of the URL
    yield from _basic_credentials(text)


def _basic_credentials(text: str) -> Iterator[str]:
    """What Basic authentication carries, as a far end may quote it back: `user:password` of a
    URL's credentials (an HTTP client sends them as a Basic Authorization header, in base64),
    and the decoded `user:password` and password of a `Basic ...` value."""
    lowered = _lower(text)
    for match in _anchored(_URL_PASSWORD, text, _starts(lowered, ["://"])):
        user = text[match.start() + len("://") : match.start("secret") - 1]
        if user:
            yield f"{unquote(user)}:{unquote(match['secret'])}"
    for match in _anchored(_BEARER, text, _starts(lowered, ["basic"])):
        decoded = _base64_text(match["secret"])
        if decoded is not None and ":" in decoded:
            yield decoded
            yield decoded.partition(":")[2]


def _base64_text(value: str) -> str | None:
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def scrub_values(value: Any, secrets: Collection[str]) -> Any:
    """A copy of a JSON-ready value with every occurrence of each secret masked, in its strings
    and keys, as it is and encoded (see mask_echoes). The strings are joined by a character none
    of them holds, so that the text is read once, whatever the number of strings."""
    if not secrets:
        return value
    strings = list(_strings_of(value))
    separator = _absent_character(strings)
    findable = [secret for secret in secrets if separator not in secret]
    text = mask_echoes(separator.join(strings), findable)
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


# -- a secret as a far end quotes it back, encoded ------------------------------------------------
#
# A far end quotes what it received in its own encoding. JSON escapes some characters with
# `\uXXXX`, which ones depending on the encoder, in lower or upper case hex: non-ASCII (Python,
# PHP), `<>&` (Go, Rails), `<>&'+"` and non-ASCII (.NET); PHP writes `/` as `\/`. A URL or a
# form percent-encodes (`%2F` or `%2f`, `+` for a space), again each encoder its own set of
# characters. Basic authentication sends base64 of `user:password`. Spelling every secret in
# every such mix would take a form per subset of its characters, so the text is read instead
# through views that undo these encodings (each escape decoded wherever it occurs), and each
# secret is looked for, as a literal, in the text and in each view. Base64 cannot be undone
# that way (it is not told apart from text), so it is a literal form of the secret: base64 of
# the secret alone, and the part of base64 that holds only the secret's bits at each of the
# three alignments the secret can have in a longer input, such as `user:password`.

# At most this many bytes of an echo stand for one byte of a secret: `\u0061` for `a`.
ECHO_BYTES_PER_SECRET_BYTE = 6

_JSON_ESCAPE = (
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a surrogate pair: one character
    r"|\\u[0-9a-fA-F]{4}"
    r"|\\[\\/\"bfnrt]"
)
_PERCENT_ESCAPE = (  # one character's UTF-8 bytes
    r"%[cdCD][0-9a-fA-F]%[89abAB][0-9a-fA-F]"
    r"|%[eE][0-9a-fA-F](?:%[89abAB][0-9a-fA-F]){2}"
    r"|%[fF][0-7](?:%[89abAB][0-9a-fA-F]){3}"
    r"|%[0-9a-fA-F]{2}"
)
# One group, so that re.split returns the escapes between the text around them.
_ESCAPES = re.compile(f"({_JSON_ESCAPE}|{_PERCENT_ESCAPE})")
_SHORT_ESCAPES = {f"\\{c}": d for c, d in zip('\\/"bfnrt', '\\/"\b\f\n\r\t', strict=True)}
# Escapes decoded once and kept: every `\u00XX`, `%XX` and short escape, and more besides.
_DECODED_ESCAPES_KEPT = 4096
# What an escape that is no character (`%FF` alone, an overlong UTF-8 form) decodes to.
_NO_CHARACTER = "\ufffd"
_URL_SAFE = str.maketrans("+/", "-_")


def mask_echoes(text: str, secrets: Collection[str]) -> str:
    """`text` with every occurrence of each secret masked, as it is and as a far end commonly
    quotes it back: JSON-escaped, percent-encoded, both, and in base64 (see above). Linear in
    the length of `text`: each view is made in one pass, and each form of each secret is found
    by str.find, once per occurrence."""
    forms = _echoed_forms(secrets)
    if not forms or not text:
        return text
    spans = []
    for view in _views(text):
        for form in forms:
            at = view.text.find(form)
            while at >= 0:
                spans.append(view.source(at, at + len(form)))
                at = view.text.find(form, at + len(form))
    return MASK.join(_split(text, _merged(spans))[0]) if spans else text


def longest_echo(secrets: Collection[str]) -> int:
    """How many bytes, at most, the echo of one of `secrets` takes in any form mask_echoes
    knows: a reader that cuts text keeps that much more, so as to mask a secret across the cut
    whole."""
    longest = max((len(secret.encode()) for secret in secrets), default=0)
    return longest * ECHO_BYTES_PER_SECRET_BYTE


def _echoed_forms(secrets: Collection[str]) -> list[str]:
    """Each secret as it is (however short: the caller chose it), and its base64 forms, those
    long enough to mean something."""
    forms = {secret for secret in secrets if secret}
    for secret in list(forms):
        # A secret that holds what reads as an escape (`p%41ss`) is found in a decoded view
        # as that view reads it.
        derived = [_decoded(secret, _ESCAPES).text, *_base64_forms(secret)]
        forms.update(form for form in derived if len(form) >= MIN_ECHOED_SECRET)
    return list(forms)


def _base64_forms(secret: str) -> Iterator[str]:
    data = secret.encode()
    whole = base64.b64encode(data).decode("ascii")
    yield whole
    yield whole.translate(_URL_SAFE)
    yield whole.translate(_URL_SAFE).rstrip("=")
    for offset in range(3):
        # base64 of `offset` bytes before the secret and any after it: the characters whose six
        # bits all come from the secret are the same whatever those bytes are.
        encoded = base64.b64encode(bytes(offset) + data + bytes(2)).decode("ascii")
        first = -(-8 * offset // 6)
        last = 8 * (offset + len(data)) // 6
        aligned = encoded[first:last]
        yield aligned
        yield aligned.translate(_URL_SAFE)


@dataclass(frozen=True, slots=True)
class _View:
    """A text with some escapes decoded, each into one character, and where each came from."""

    text: str
    # Per decoded escape, in order: where its character is in `text`, and where the escape
    # starts and ends in the original text.
    starts: list[int]
    source_starts: list[int]
    source_ends: list[int]

    def source(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that `text[start:end]` stands for."""
        return self._source_of(start)[0], self._source_of(end - 1)[1]

    def _source_of(self, at: int) -> tuple[int, int]:
        i = bisect_right(self.starts, at) - 1
        if i < 0:
            return at, at + 1
        if at == self.starts[i]:
            return self.source_starts[i], self.source_ends[i]
        origin = self.source_ends[i] + at - self.starts[i] - 1
        return origin, origin + 1


def _views(text: str) -> list[_View]:
    """`text` itself, and with its JSON and percent escapes decoded, a `+` kept and a `+` read
    as a space, those that differ from it. Not every `+` is a space: a form writes a space as
    `+`, but encodeURI writes it as `%20` and leaves a `+` as it is."""
    views = [_View(text, [], [], [])]
    if "\\" in text or "%" in text:
        views.append(_decoded(text, _ESCAPES))
    if "+" in text:
        views.append(_decoded(text.replace("+", " "), _ESCAPES))
    return views


def _decoded(text: str, escapes: re.Pattern[str]) -> _View:
    """`text` with each escape that `escapes` finds decoded. Made by loops in C (split, map,
    accumulate), not a Python step per escape: a text can hold hundreds of thousands."""
    pieces = escapes.split(text)  # text, escape, text, escape, ..., text
    if len(pieces) == 1:
        return _View(text, [], [], [])
    ends = list(accumulate(map(len, pieces)))
    pieces[1::2] = map(_decode_escape, pieces[1::2])
    view_ends = list(accumulate(map(len, pieces)))
    return _View("".join(pieces), view_ends[0:-1:2], ends[0:-1:2], ends[1::2])


@functools.lru_cache(maxsize=_DECODED_ESCAPES_KEPT)
def _decode_escape(escape: str) -> str:
    """The one character an escape stands for."""
    if escape.startswith("\\u"):
        decoded = bytes.fromhex(escape.replace("\\u", "")).decode("utf-16-be", "surrogatepass")
    elif escape.startswith("%"):
        decoded = bytes.fromhex(escape.replace("%", "")).decode("utf-8", "replace")
    else:
        decoded = _SHORT_ESCAPES[escape]
    return decoded if len(decoded) == 1 else _NO_CHARACTER
