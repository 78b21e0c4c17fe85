"""Secrets never reach a log line, in text or JSON, in fields, messages or tracebacks."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickd.scheduler.logs import JsonFormatter, TextFormatter, log_event
from tickd.scheduler.secrets.masking import (
    MASK,
    is_secret_name,
    mask,
    restore_masked,
    scrub_text,
    scrub_values,
    secret_values,
)


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "db_passwd",
        "API_KEY",
        "api-key",
        "X-Auth-Token",
        "client_secret",
        "Authorization",
        "cookie",
        "private_key",
        "pwd",
        "db_pwd",
        "accessKey",
        "AWS_SECRET_ACCESS_KEY",
        "privkey",
        "jwt",
        "signature",
        "X-Hub-Signature-256",
        "sig",
        "key",
        "basic_auth",
        "basicAuth",
        "dbPass",
        "PHPSESSID",
        "session_id",
        "refresh_token",
        "tokens_used",  # a false positive, on purpose: anything named token is masked
    ],
)
def test_secret_looking_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "url",
        "method",
        "timeout",
        "keyboard_layout",
        "author",
        "keyword",
        "monkey",
        "keys",
        "partition_key",
        "idempotency_key",
        "bypass",
        "signal",
        "Passenger",
    ],
)
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_mask_walks_nested_params_and_honours_declared_secrets() -> None:
    params = {
        "url": "https://user:s3cret@example.com/hook",
        "headers": {"Authorization": "Bearer abc.def", "Accept": "json"},
        "vendor": {"account": "acme", "signing": "xyz"},
        "list": [{"password": "p"}],
    }
    masked = mask(params, declared={"signing"})
    assert masked == {
        "url": f"https://user:{MASK}@example.com/hook",
        "headers": {"Authorization": MASK, "Accept": "json"},
        "vendor": {"account": "acme", "signing": MASK},
        "list": [{"password": MASK}],
    }
    assert params["headers"]["Authorization"] == "Bearer abc.def", "the input is left alone"  # type: ignore[index]


def test_free_text_credentials_are_scrubbed() -> None:
    text = "POST failed: Authorization: Bearer eyJhbGciOi.x.y to amqp://bot:pa55@mq:5672/"
    scrubbed = scrub_text(text)
    assert "eyJhbGciOi" not in scrubbed and "pa55" not in scrubbed
    assert "amqp://bot:***@mq:5672/" in scrubbed


def test_urls_keep_everything_but_the_password() -> None:
    assert scrub_text("mongodb://tickd:pw@db1:27017,db2/tickd?tls=true") == (
        "mongodb://tickd:***@db1:27017,db2/tickd?tls=true"
    )
    assert scrub_text("redis://localhost:6379/0") == "redis://localhost:6379/0"
    assert scrub_text("rediss://:only-a-password@cache:6380") == "rediss://:***@cache:6380"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("https://h/hook?token=t0k3n&page=2", "https://h/hook?token=***&page=2"),
        (
            "https://h/x?api_key=K1&access_token=A2#top",
            "https://h/x?api_key=***&access_token=***#top",
        ),
        ("https://h/x?sig=abc%3D&key=AIza9&keyword=q", "https://h/x?sig=***&key=***&keyword=q"),
        (
            "GET /login?user=bob&password=hunter2 HTTP/1.1",
            "GET /login?user=bob&password=*** HTTP/1.1",
        ),
        (
            "grant_type=client_credentials&client_secret=s3",
            "grant_type=client_credentials&client_secret=***",
        ),
        ("https://h/?next=https://x/?token=t1", "https://h/?next=https://x/?token=***"),
        ("https://u:p@ss@h/x", "https://u:***@h/x"),  # an unencoded @ in the password
        (
            '{"access_token": "ey\\"J", "expires_in": 3600}',
            '{"access_token": "***", "expires_in": 3600}',
        ),
        (
            "ValueError: {'password': 'hunter2', 'user': 'bob'}",
            "ValueError: {'password': '***', 'user': 'bob'}",
        ),
        ("Authorization: Basic YWxhZGRpbjpvcGVu", "Authorization: Basic ***"),
        ("tokens_used=12&monkey=3", "tokens_used=***&monkey=3"),
    ],
)
def test_credentials_in_query_strings_forms_and_json_text_are_masked(
    text: str, masked: str
) -> None:
    assert scrub_text(text) == masked


@given(
    st.lists(
        st.sampled_from(
            [
                "https://",
                "alice",
                ":",
                "@",
                "pw",
                "?token=",
                "&",
                "/",
                "***",
                " ",
                "Bearer ",
                '"password": "',
                "x",
            ]
        ),
        max_size=12,
    )
)
def test_a_masked_string_sent_back_restores_to_the_stored_one(parts: list[str]) -> None:
    stored = "".join(parts)
    assert restore_masked(scrub_text(stored), stored) == stored
    assert scrub_text(scrub_text(stored)) == scrub_text(stored)


@pytest.mark.parametrize(
    ("sent", "stored", "kept"),
    [
        ("https://alice:***@h/x", "https://alice:pw@h/x", "https://alice:pw@h/x"),
        ("https://alice:new@h/x", "https://alice:pw@h/x", "https://alice:new@h/x"),
        (
            "https://alice:***@h/x?token=t9",
            "https://alice:pw@h/x?token=t1",
            "https://alice:pw@h/x?token=t9",
        ),
        ("Bearer ***", "Bearer abc.def", "Bearer abc.def"),
        ("https://alice:***@evil.example/x", "https://alice:pw@h/x", None),
        ("https://alice:***@h/x", None, None),
        ("no secret here, ***", "anything", "no secret here, ***"),
    ],
)
def test_each_masked_part_is_restored_only_where_the_rest_is_as_stored(
    sent: str, stored: str | None, kept: str | None
) -> None:
    assert restore_masked(sent, stored) == kept


def test_the_secrets_of_params_are_found_as_they_may_come_back() -> None:
    params = {
        "url": "https://bot:p%40ss-word@h/hook?token=tok-123",
        "headers": {"Authorization": "Bearer abc.def", "Accept": "json"},
        "signing": {"kid": "k1", "value": "signing-value"},
        "pin": 1234,
        "note": "short",
    }
    values = secret_values({**params, "password": "pw"}, declared={"signing"})
    assert set(values) == {
        "p%40ss-word",
        "p@ss-word",
        "bot:p@ss-word",  # what an HTTP client sends, in base64, as Basic credentials
        "tok-123",
        "Bearer abc.def",
        "abc.def",
        "signing-value",
    }, "the PIN's name is no secret's; `pw` is too short to look for"
    assert values == sorted(values, key=len, reverse=True)


def test_the_credentials_after_any_scheme_are_found() -> None:
    values = secret_values({"headers": {"Authorization": "Token tk-9f8e7d"}})
    assert set(values) == {"Token tk-9f8e7d", "tk-9f8e7d"}


def test_basic_credentials_are_found_decoded() -> None:
    """A far end that reads a Basic Authorization header may quote what it decoded."""
    credentials = base64.b64encode(b"alice:s3cret-pw").decode()
    values = secret_values({"headers": {"Authorization": f"Basic {credentials}"}})
    assert {"alice:s3cret-pw", "s3cret-pw", credentials} <= set(values)


def test_echoed_secrets_are_masked_in_strings_and_keys_at_any_depth() -> None:
    result = {"body": "welcome bot, p@ss-word ok", "list": [{"p@ss-word": "x", "n": 1}], "n": 2}
    scrubbed = scrub_values(result, ["p@ss-word"])
    assert scrubbed == {"body": "welcome bot, *** ok", "list": [{"***": "x", "n": 1}], "n": 2}


def record(**fields: Any) -> logging.LogRecord:
    logger = logging.getLogger("tickd.test")
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, r: logging.LogRecord) -> None:
            captured.append(r)

    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        log_event(logger, "store.connecting to redis://u:hunter2@cache", **fields)
    finally:
        logger.removeHandler(keep)
    return captured[0]


def test_text_lines_mask_fields_and_message() -> None:
    line = TextFormatter().format(record(api_key="sk-1", job="nightly run", n=3))
    assert "hunter2" not in line and "sk-1" not in line
    assert "api_key=***" in line and 'job="nightly run"' in line and "n=3" in line


def test_json_lines_are_json_and_masked() -> None:
    body = json.loads(JsonFormatter().format(record(token="t0k3n", status="ok")))
    assert body["token"] == MASK and body["status"] == "ok"
    assert body["level"] == "info" and body["logger"] == "tickd.test"
    assert "hunter2" not in body["event"]
