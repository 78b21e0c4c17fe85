"""Secrets never reach a log line, in text or JSON, in fields, messages or tracebacks."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from scheduler.logs import JsonFormatter, TextFormatter, log_event
from scheduler.secrets import MASK, is_secret_name, mask, scrub_text


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
    ],
)
def test_secret_looking_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["url", "method", "timeout", "keyboard_layout", "author"])
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
