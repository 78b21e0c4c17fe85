"""Masking runs on whatever clients and far ends send, up to the 1 MiB request limit: it must
be linear in the length of its input, and fast, for the worst inputs too.

Each hostile input is timed at n and 16 n characters: linear work grows 16-fold, quadratic work
256-fold; the bound (64-fold) sits far from both. Time is the thread's CPU time, the best of
five runs, so a machine busy with other work does not fail the test.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickd.handlers.alert_scanner.normalize import email_address
from tickd.scheduler.secrets.echoes import mask_echoes
from tickd.scheduler.secrets.masking import (
    is_secret_name,
    mask,
    restore_masked,
    scrub_text,
    scrub_values,
    secret_values,
)

MIB = 1 << 20
SMALL = 8 * 1024
GROWTH = 16
# Far below the 256-fold of quadratic work, far above the 16-fold of linear work.
MAX_RATIO = 64


def best_of_five(work: Callable[[], object]) -> float:
    times = []
    for _ in range(5):
        started = time.thread_time()
        work()
        times.append(time.thread_time() - started)
    return min(times)


def assert_linear(
    run: Callable[[str], object], make: Callable[[int], str], smallest: int = SMALL
) -> None:
    small, large = make(smallest), make(smallest * GROWTH)
    ratio = best_of_five(lambda: run(large)) / max(best_of_five(lambda: run(small)), 1e-4)
    assert ratio < MAX_RATIO, f"{GROWTH}x the input took {ratio:.0f}x the time"


def repeated(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


HOSTILE = {
    # URL passwords: schemes without end, authorities that never reach an @
    "scheme run": lambda n: "a" * n,
    "authority run": lambda n: "a://" + "a" * n,
    "colons": repeated("a://a:"),
    "many @": lambda n: "://u:" + "@" * n,
    "many ://": repeated("://"),
    # bearer tokens
    "bearers": repeated("Bearer "),
    "bearer, spaces": lambda n: "Bearer" + " " * n,
    # name=value and "name": "value"
    "secret names": repeated("token"),
    "secret names, no =": lambda n: "token" + "a" * n,
    "empty values": repeated("token=&"),
    "many names": repeated("a="),
    "quoted names": repeated('"token":"'),
    "escapes": lambda n: '"password": "' + '\\"' * (n // 2),
    "words": repeated("pass_"),
    "camel humps": repeated("aPass"),
    "keys": repeated("key."),
    "signatures": repeated("sig="),
}


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
def test_scrubbing_is_linear(make: Callable[[int], str]) -> None:
    assert_linear(scrub_text, make)


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
def test_secret_names_are_recognised_in_linear_time(make: Callable[[int], str]) -> None:
    assert_linear(is_secret_name, make)


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
def test_restoring_a_masked_value_is_linear(make: Callable[[int], str]) -> None:
    assert_linear(lambda text: restore_masked(scrub_text(text), text), make)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet="ab:/@ =&?#\"'\\*.-_tokenpasBearKy", min_size=1, max_size=8))
def test_any_repeated_unit_of_the_patterns_alphabet_is_scrubbed_in_linear_time(
    unit: str,
) -> None:
    assert_linear(scrub_text, repeated(unit))


# Escapes and near-echoes of ECHOED, the secret a job holds, as a far end could answer.
ECHOED = "aaaa/+é&<b"
HOSTILE_ECHOES = {
    "json escapes": repeated("\\u0061"),
    "short escapes": repeated('\\"'),
    "surrogate pairs": repeated("\\ud83d\\ude00"),
    "lone surrogates": repeated("\\ud800"),
    "percent escapes": repeated("%61"),
    "UTF-8 percent escapes": repeated("%C3%A9"),
    "broken percent escapes": repeated("%FF%C3"),
    "form spaces": repeated("+"),
    "every escape": repeated("\\u0061%61+\\/"),
    "echo prefixes": repeated("aaaa\\/+\\u00e9&"),
    "base64 prefixes": repeated("YWFhYS8r"),
}


@pytest.mark.parametrize("make", HOSTILE_ECHOES.values(), ids=HOSTILE_ECHOES.keys())
def test_echoes_are_masked_in_linear_time(make: Callable[[int], str]) -> None:
    assert_linear(lambda text: mask_echoes(text, [ECHOED]), make)


def test_distinct_escapes_are_decoded_in_linear_time() -> None:
    def distinct_escapes(n: int) -> str:
        return "".join(f"\\u{0x100 + i % 0xD000:04x}" for i in range(n // 6))

    # Up to about 16 KiB of such escapes the decoding runs four times faster a character than
    # beyond (the CPU's caches), which alone would read as 70-fold at 16 times the input: both
    # sizes are measured past that step.
    assert_linear(lambda text: mask_echoes(text, [ECHOED]), distinct_escapes, 4 * SMALL)


def test_a_long_secret_is_found_in_linear_time() -> None:
    """str.find, not a pattern tried at each position: a secret that almost matches everywhere
    costs no more than one that matches nowhere."""
    secret = "a" * 4096 + "b"
    assert_linear(lambda text: scrub_values({"body": text}, [secret]), lambda n: "a" * n)


def test_a_hostile_document_of_a_mebibyte_is_masked_in_seconds_not_minutes() -> None:
    # Its CPU time is under a second on an idle machine and near two under a loaded suite; a
    # pattern tried at each position would take minutes. The bound tells the two apart.
    share = MIB // len(HOSTILE)
    body = "".join(make(share) for make in HOSTILE.values())
    params = {"url": "https://u:p@h/x", "body": body, body[:share]: body[share : 2 * share]}
    started = time.thread_time()
    mask(params)
    secret_values(params)
    assert time.thread_time() - started < 5.0


def test_an_email_address_is_checked_in_linear_time() -> None:
    def check(text: str) -> None:
        with contextlib.suppress(ValueError):
            email_address(text)

    assert_linear(check, lambda n: "a@" + "b." * (n // 2) + "@")
    assert_linear(check, lambda n: "a@" + "." * n)
