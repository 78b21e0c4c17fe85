"""A job's own secrets as its runs may return them: the secrets its params hold
(secret_values), and every occurrence of them masked in what a far end sends back, as it is and
encoded (mask_echoes, scrub_values), linear in the length of the text; and in the lines a run
logs (EchoMaskingLogger)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import logging
import re
from bisect import bisect_right
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import Any
from urllib.parse import unquote

from tickd.scheduler.secrets.text import (
    AUTH_VALUE,
    MASK,
    URL_PASSWORD,
    find_all,
    is_secret_name,
    lower_in_place,
    matches_at,
    merged_spans,
    secret_spans,
    split_around,
)

# A secret shorter than this is not looked for in what a run returns: masking every "abc" of a
# result would destroy it, and a secret that short protects nothing anyway.
MIN_ECHOED_SECRET = 4


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
    lowered = lower_in_place(text)
    for match in matches_at(URL_PASSWORD, text, find_all(lowered, ["://"])):
        user = text[match.start() + len("://") : match.start("secret") - 1]
        if user:
            yield f"{unquote(user)}:{unquote(match['secret'])}"
    for match in matches_at(AUTH_VALUE, text, find_all(lowered, ["basic"])):
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


class EchoMaskingLogger(logging.LoggerAdapter[logging.Logger]):
    """A run's logger (a handler's ctx.logger): each line, its arguments put in, with the run's
    secrets masked (mask_echoes), as a far end that echoed them may have put them there."""

    def __init__(
        self, logger: logging.Logger, extra: Mapping[str, object], secrets: Collection[str]
    ) -> None:
        super().__init__(logger, extra)
        self.secrets = secrets

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if self.secrets and self.isEnabledFor(level):
            line = logging.LogRecord(self.logger.name, level, "", 0, msg, args, None)
            # A bad format string is left as it is: logging reports it when the line is written.
            with contextlib.suppress(Exception):
                msg, args = mask_echoes(line.getMessage(), self.secrets), ()
        super().log(level, msg, *args, **kwargs)

    def masked(self, text: str) -> str:
        """`text` with the run's secrets masked."""
        return mask_echoes(text, self.secrets) if self.secrets else text


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
    return MASK.join(split_around(text, merged_spans(spans))[0]) if spans else text


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
