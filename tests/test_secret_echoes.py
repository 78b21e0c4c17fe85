"""A job's secrets, quoted back by a far end in its own encoding, are masked as surely as when
quoted as they are: JSON escapes, percent-encoding, base64, and their common mixes."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import EngineFactory, make_job
from tickd.scheduler.model import Execution
from tickd.scheduler.ports.backends import ExecutionQuery, JobQuery
from tickd.scheduler.secrets.echoes import longest_echo, mask_echoes
from tickd.scheduler.secrets.masking import MASK, scrub_values


def json_escaped(secret: str) -> str:
    """As Python's json.dumps writes it: non-ASCII as `\\u00e9`, lower case hex."""
    return json.dumps(secret)[1:-1]


def php_json(secret: str) -> str:
    """As PHP's json_encode writes it: also `/` as `\\/`."""
    return json_escaped(secret).replace("/", "\\/")


def go_json(secret: str) -> str:
    """As Go's encoding/json writes it: `<>&` as `\\u003c`..., non-ASCII as it is."""
    escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
    return re.sub("[<>&]", lambda m: f"\\u{ord(m[0]):04x}", escaped)


def dotnet_json(secret: str) -> str:
    """As .NET's System.Text.Json writes it: `<>&'+"` and non-ASCII as `\\u002B`, upper hex."""
    return (
        "".join(f"\\u{ord(c):04X}" if c in "<>&'+\"`" or not c.isascii() else c for c in secret)
        .replace("\\", "\\\\")
        .replace("\\\\u", "\\u")
    )


def every_character_escaped(secret: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in secret)


def lower_hex_percent(secret: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(secret, safe=""))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


ENCODINGS: dict[str, tuple[str, Callable[[str], str]]] = {
    "PHP json_encode": ("abc/def+ghi/jkl==", php_json),
    "Go encoding/json": ("t0k&<en>&x", go_json),
    ".NET, upper hex": ("p+ss<w>&'rd\"x", dotnet_json),
    "non-ASCII, lower hex": ("pässwörd-ü", json_escaped),
    "non-ASCII, upper hex": ("pässwörd-ü", dotnet_json),
    "a surrogate pair": ("key-\U0001f511-value", json_escaped),
    "every character": ("s3cret-Val", every_character_escaped),
    "quotes and backslashes": ('a"b\\c-d/e', php_json),
    "percent, upper hex": ("p@ss/w:rd?&=", lambda s: quote(s, safe="")),
    "percent, lower hex": ("p@ss/w:rd?&=", lower_hex_percent),
    "percent, UTF-8": ("pässwörd-ü", lambda s: quote(s, safe="")),
    "a form, + for a space": ("my pass+word/1", quote_plus),
    "encodeURI, + kept": ("a+b c/d-e", lambda s: quote(s, safe="+/")),
    "a URL in PHP JSON": ("p@ss/w rd", lambda s: php_json(quote(s, safe="/"))),
    "base64": ("hunter2-secret", b64),
    "base64 in PHP JSON": ("tok?>>~~?", lambda s: php_json(b64(s))),
    "base64url": ("tok?>>~~?", lambda s: base64.urlsafe_b64encode(s.encode()).decode()),
    "base64 in a URL": ("tok?>>~~?", lambda s: quote(b64(s), safe="")),
    "a secret that reads as an escape, in JSON": ("p%41ss/w0rd", php_json),
}


@pytest.mark.parametrize(("secret", "encode"), ENCODINGS.values(), ids=ENCODINGS.keys())
def test_an_encoded_echo_is_masked_whole(secret: str, encode: Callable[[str], str]) -> None:
    echoed = encode(secret)
    assert echoed != secret or "every" in echoed, "the encoding changes the secret"
    assert mask_echoes(f"before {echoed} after", [secret]) == f"before {MASK} after"


def test_text_around_an_echo_is_left_as_it_is() -> None:
    text = 'path a\\/b, caf\\u00e9 50% off, a+b, %zz, "\\\\"'
    assert mask_echoes(text, ["unrelated-secret"]) == text
    assert mask_echoes(f"{text} {php_json('s/cret-1')}", ["s/cret-1"]) == f"{text} {MASK}"


def test_basic_credentials_of_a_known_user_are_masked_whole() -> None:
    header = f"Authorization: Basic {b64('alice:pw-secret-1')}"
    assert mask_echoes(header, ["alice:pw-secret-1"]) == f"Authorization: Basic {MASK}"


@pytest.mark.parametrize("before", ["", "a", "ab", "alice:", "someone:"])
@pytest.mark.parametrize("after", ["", "x", "xy", "!trailer"])
def test_a_secret_inside_longer_base64_leaves_none_of_its_own_characters(
    before: str, after: str
) -> None:
    """Base64 of `user:secret` for a user not known: every base64 character that holds the
    secret's bits only is masked, whatever the secret's alignment; at most the one character
    at each edge that it shares with its neighbours is shown."""
    secret = "pw-secret-1"
    encoded = b64(before + secret + after)
    head, tail = mask_echoes(encoded, [secret]).split(MASK)
    secret_bits = (8 * len(before), 8 * (len(before) + len(secret)))
    assert len(head) <= -(-secret_bits[0] // 6), "no character of the secret's bits only"
    assert len(encoded) - len(tail) >= secret_bits[1] // 6
    assert (head, tail) == (encoded[: len(head)], encoded[len(encoded) - len(tail) :])


@given(
    secret=st.text(
        alphabet=st.characters(blacklist_characters='\\%"+', blacklist_categories=["Cs"]),
        min_size=4,
        max_size=20,
    ),
    choices=st.lists(st.integers(0, 4), min_size=20, max_size=20),
)
def test_any_mix_of_escaped_characters_is_masked(secret: str, choices: list[int]) -> None:
    """Which characters an encoder escapes, and in which case, varies: each character here is
    left as it is or escaped one way or another, at random."""
    echoed = "".join(_escaped(c, way) for c, way in zip(secret, choices, strict=False))
    assert mask_echoes(f"<{echoed}>", [secret]) == f"<{MASK}>"


def _escaped(character: str, way: int) -> str:
    utf16 = character.encode("utf-16-be")
    units = [utf16[i : i + 2].hex() for i in range(0, len(utf16), 2)]
    percent = "".join(f"%{byte:02X}" for byte in character.encode())
    return [
        character,
        "".join(f"\\u{unit}" for unit in units),
        "".join(f"\\u{unit.upper()}" for unit in units),
        percent,
        percent.lower(),
    ][way]


def test_every_string_and_key_of_a_result_is_masked() -> None:
    secret = "abc/def&ghi"
    result = {"body": f"x {php_json(secret)} y", go_json(secret): [quote(secret, safe="")]}
    assert scrub_values(result, [secret]) == {"body": f"x {MASK} y", MASK: [MASK]}


def test_longest_echo_covers_every_form() -> None:
    secret = "pä/+ss \U0001f511"
    forms = [
        every_character_escaped(secret),
        json_escaped(secret),
        quote(secret, safe=""),
        b64(secret),
    ]
    assert max(len(form.encode()) for form in forms) <= longest_echo([secret])


# -- through the runner: results, errors, events ------------------------------------------------


async def test_a_run_records_no_encoded_echo_in_its_result_error_logs_or_events(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "abc/def+ghi&jk"
    forms = [php_json(secret), go_json(secret), quote(secret, safe=""), b64(secret)]

    async def echoes(ctx: Any) -> dict[str, Any]:
        if ctx.attempt == 1:
            raise RuntimeError(f"refused: {' '.join(forms)}")  # logged as the run is retried
        return {"said": " ".join(forms)}

    h = make_engine({"echoes": echoes})
    await h.add(make_job("echo", "echoes", params={"password": secret}, max_retries=1))
    with caplog.at_level(logging.INFO):
        await h.engine.drain()
    await h.engine.relay.flush_once()  # the outbox, to the publisher

    [run] = await executions(h)
    assert run.result == {"said": " ".join([MASK] * 4)}
    [job] = await h.store.list_jobs(JobQuery())
    assert h.events.events
    logged = list(strings([vars(record) for record in caplog.records]))
    assert "refused: *** *** *** ***" in logged
    shown = [*strings([run.result, job.last_execution, h.events.events]), *logged]
    for form in forms:
        assert not [text for text in shown if form in text], form


def strings(value: object) -> Iterator[str]:
    """Every string in a value, at any depth, as it is (not as repr or JSON would quote it)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield from strings(dataclasses.asdict(value))


async def test_a_failed_run_records_no_encoded_echo_in_its_error(
    make_engine: EngineFactory,
) -> None:
    secret = "abc/def+ghi&jk"

    async def fails(ctx: Any) -> None:
        raise RuntimeError(f"refused: {php_json(secret)} {quote_plus(secret)}")

    h = make_engine({"fails": fails})
    await h.add(make_job("fail", "fails", params={"password": secret}))
    await h.engine.drain()

    [run] = await executions(h)
    assert run.error is not None
    assert run.error.message == f"refused: {MASK} {MASK}"


async def executions(h: Any) -> list[Execution]:
    return list(await h.store.list_executions(ExecutionQuery(limit=10)))
