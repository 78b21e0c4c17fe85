"""Unsubscribe tokens and the settings they need: signed, refused when forged or altered in any
character, settings checked with messages that name them (and never show the secret)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickd.handlers.alert_scanner import tokens
from tickd.handlers.alert_scanner.settings import EmailSettings

SECRET = "s" * 32
ids = st.text(min_size=1, max_size=40)


@given(user=ids, alert=st.none() | ids)
def test_a_token_carries_its_user_and_alert(user: str, alert: str | None) -> None:
    token = tokens.sign(SECRET, user, alert)
    assert tokens.verify(SECRET, token) == tokens.Unsubscribe(user, alert)
    assert token.isascii()


def test_a_token_for_product_ids_is_short() -> None:
    """ObjectIds for user and alert: the link and its header stay well under a line's limit."""
    token = tokens.sign(SECRET, "65f1c0ffee0123456789abcd", "65f1c0ffee0123456789abce")
    assert len(token) < 150


@given(user=ids, alert=st.none() | ids, data=st.data())
def test_any_altered_character_makes_a_token_invalid(
    user: str, alert: str | None, data: st.DataObject
) -> None:
    token = tokens.sign(SECRET, user, alert)
    at = data.draw(st.integers(0, len(token) - 1))
    other = data.draw(st.sampled_from("AZaz09-_.").filter(lambda c: c != token[at]))
    altered = token[:at] + other + token[at + 1 :]
    with pytest.raises((tokens.ForgedToken, tokens.MalformedToken)):
        tokens.verify(SECRET, altered)


def test_a_token_signed_with_another_secret_is_forged() -> None:
    with pytest.raises(tokens.ForgedToken):
        tokens.verify(SECRET, tokens.sign("t" * 32, "ada", "a1"))


def test_a_forged_payload_for_another_user_is_refused() -> None:
    mine = tokens.sign(SECRET, "ada", None)
    theirs = tokens.sign(SECRET, "grace", None)
    spliced = theirs.split(".")[0] + "." + mine.split(".")[1]
    with pytest.raises(tokens.ForgedToken):
        tokens.verify(SECRET, spliced)


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "é.é", "x" * 2000, "!!.??"])
def test_what_is_not_a_token_is_malformed(token: str) -> None:
    with pytest.raises(tokens.MalformedToken):
        tokens.verify(SECRET, token)


def test_settings_read_from_the_configuration() -> None:
    settings = EmailSettings.parse(
        {
            "app_base_url": "https://app.example/",
            "public_base_url": "https://tickd.example/api",
            "unsubscribe_secret": SECRET,
            "max_items": "40",  # from the environment
        }
    )
    assert settings.app_base_url == "https://app.example"
    assert settings.unsubscribe_base == "https://tickd.example/api/unsubscribe"
    assert settings.max_items == 40 and SECRET not in repr(settings)
    assert EmailSettings.parse({}).unsubscribe_base is None
    assert EmailSettings.parse(
        {"public_base_url": "http://127.0.0.1:8080"}
    ).missing_for_unsubscribe() == ["handler_settings.alert_scanner.unsubscribe_secret"]


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"public_base_url": "http://tickd.example"}, r"public_base_url: https://"),
        ({"app_base_url": "https://app.example/?a=1"}, r"app_base_url: scheme, host and path"),
        ({"app_base_url": "https://u:p@app.example"}, r"app_base_url: scheme, host and path"),
        ({"app_base_url": 'https://app.example/"><script>'}, r"app_base_url: spaces, quotes"),
        ({"app_base_url": "javascript:alert(1)"}, r"app_base_url: scheme, host and path"),
        ({"unsubscribe_secret": "short-secret"}, r"unsubscribe_secret: at least 32"),
        ({"max_items": 0}, r"max_items: a whole number from 1 to 500"),
        ({"max_items": "many"}, r"max_items"),
        ({"max_item": 5}, r"alert_scanner: unknown max_item"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(config: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error) as raised:
        EmailSettings.parse(config)
    assert "short-secret" not in str(raised.value)
