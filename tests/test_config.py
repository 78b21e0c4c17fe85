"""Settings: TOML file, TICKD_* environment, and errors that name the setting."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path

import pytest

from tickd.cli import main
from tickd.scheduler.config.settings import ConfigError, Settings, load_settings
from tickd.scheduler.config.sources import OTHER_TOOLS_VARIABLES

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tickd.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_seed_numbers() -> None:
    settings = load_settings(environ={})
    assert (settings.tick_seconds, settings.batch_size, settings.workers) == (1.0, 100, 30)
    assert settings.effective_queue_size == 60
    assert settings.store_url.startswith("sqlite://")
    assert settings.lock_url == "memory://"


def test_file_then_environment(tmp_path: Path) -> None:
    path = write(
        tmp_path, 'workers = 8\nstore_url = "sqlite:///x.db"\n[handler_concurrency]\nsleep = 2\n'
    )
    settings = load_settings(path, environ={"TICKD_WORKERS": "12", "TICKD_SEED_DEMO": "true"})
    assert settings.workers == 12, "the environment wins over the file"
    assert settings.store_url == "sqlite:///x.db"
    assert settings.seed_demo is True
    assert settings.handler_concurrency == {"sleep": 2}
    assert settings.effective_queue_size == 24


def test_a_tickd_table_is_accepted(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "[tickd]\nbatch_size = 7\n"), environ={})
    assert settings.batch_size == 7


def test_handler_concurrency_from_the_environment() -> None:
    settings = load_settings(environ={"TICKD_HANDLER_CONCURRENCY": "webhook=5, sleep=1"})
    assert settings.handler_concurrency == {"webhook": 5, "sleep": 1}


@pytest.mark.parametrize("name", ["tickd.toml", "production.toml"])
def test_the_shipped_examples_load(name: str) -> None:
    assert isinstance(load_settings(ROOT / "config" / name, environ={}), Settings)


@pytest.mark.parametrize(
    ("text", "environ", "setting"),
    [
        ("workers = 0", {}, "workers"),
        ("tick_seconds = -1", {}, "tick_seconds"),
        ('workers = "many"', {}, "workers"),
        ("seed_demo = 1", {}, "seed_demo"),
        ("batch_size = true", {}, "batch_size"),
        ("api_port = 70000", {}, "api_port"),
        ('log_format = "xml"', {}, "log_format"),
        ('store_url = "tickd.db"', {}, "store_url"),
        ("wokers = 3", {}, "wokers"),
        ("[handler_concurrency]\nsleep = 0", {}, "handler_concurrency.sleep"),
        ("", {"TICKD_WORKERS": "lots"}, "TICKD_WORKERS"),
        ("", {"TICKD_SEED_DEMO": "perhaps"}, "TICKD_SEED_DEMO"),
        ("", {"TICKD_HANDLER_CONCURRENCY": "sleep"}, "TICKD_HANDLER_CONCURRENCY"),
    ],
)
def test_a_bad_value_names_the_setting(
    tmp_path: Path, text: str, environ: dict[str, str], setting: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(write(tmp_path, text), environ=environ)
    assert raised.value.setting == setting
    assert setting in str(raised.value)


def test_missing_and_broken_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(tmp_path / "absent.toml", environ={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(write(tmp_path, "workers = = 3"), environ={})


def test_handler_settings_come_from_the_file_and_the_environment_setting_by_setting(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        '[handler_settings.catalogue_walk]\nbase_url = "https://v.example"\ndaily_quota = 500\n',
    )
    environ = {
        "TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__DAILY_QUOTA": "900",
        "TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__API_KEY": "vendor-secret-123456",
        "TICKD_HANDLER_SETTINGS__WEBHOOK__REGION": "eu",
    }
    settings = load_settings(path, environ=environ)
    assert settings.handler_settings == {
        "catalogue_walk": {
            "base_url": "https://v.example",
            "daily_quota": "900",
            "api_key": "vendor-secret-123456",
        },
        "webhook": {"region": "eu"},
    }
    assert "vendor-secret-123456" not in repr(settings)


@pytest.mark.parametrize(
    ("environ", "setting"),
    [
        ({"TICKD_HANDLER_SETTINGS__CATALOGUE_WALK": "x"}, "TICKD_HANDLER_SETTINGS__CATALOGUE_WALK"),
        ({"TICKD_HANDLER_SETTINGS__": "x"}, "TICKD_HANDLER_SETTINGS__"),
    ],
)
def test_a_handler_setting_variable_without_a_setting_name_is_refused(
    environ: dict[str, str], setting: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(environ=environ)
    assert error.value.setting == setting


def test_a_handler_settings_entry_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"handler_settings\.catalogue_walk: must be a table"):
        load_settings(write(tmp_path, '[handler_settings]\ncatalogue_walk = "key"\n'), environ={})


def test_an_empty_handler_setting_variable_does_not_hide_the_files(tmp_path: Path) -> None:
    path = write(tmp_path, '[handler_settings.catalogue_walk]\napi_key = "from-the-file-123"\n')
    environ = {"TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__API_KEY": ""}
    settings = load_settings(path, environ=environ)
    assert settings.handler_settings == {"catalogue_walk": {"api_key": "from-the-file-123"}}


def test_a_table_beside_the_tickd_table_is_refused_not_ignored(tmp_path: Path) -> None:
    text = '[tickd]\nworkers = 4\n[handler_settings.catalogue_walk]\napi_key = "k"\n'
    with pytest.raises(ConfigError, match=r"handler_settings: outside the \[tickd\] table"):
        load_settings(write(tmp_path, text), environ={})


def test_a_malformed_handler_settings_value_is_not_repeated_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(write(tmp_path, 'handler_settings = ["s3cret-vendor-key"]\n'), environ={})
    assert error.value.setting == "handler_settings"
    assert "s3cret-vendor-key" not in str(error.value)


# -- API tokens ----------------------------------------------------------------------------------

PRODUCTION = ROOT / "config" / "production.toml"
# Random, as a real token is; none of the tests below may see it in an error.
GOOD = "Zq7Lx2Vm9Kt4Rw8Hn3Cj6Bp1Fs5Dy0Ga4E"
OTHER = "Pm4Ts9Wq2Xv7Kb3Nd8Lh1Rc6Jf5Gz0Ya2U"


def test_production_ships_no_token_and_starts_only_with_tokens_from_the_environment() -> None:
    from tickd.daemon import check_exposure

    settings = load_settings(PRODUCTION, environ={})
    assert settings.api_tokens == ()
    assert settings.api_host == "0.0.0.0"
    with pytest.raises(ConfigError) as refused:
        check_exposure(settings)
    assert refused.value.setting == "api_host"
    assert "TICKD_API_TOKENS" in str(refused.value), "the message says what to do"

    # With tokens from the environment, as the file says to give them, it starts.
    environ = {"TICKD_API_TOKENS": f"ops:admin:{GOOD},grafana:read:{OTHER}"}
    settings = load_settings(PRODUCTION, environ=environ)
    assert [(t.name, t.scope) for t in settings.api_tokens] == [
        ("ops", "admin"),
        ("grafana", "read"),
    ]
    check_exposure(settings)
    assert GOOD not in repr(settings)


PLACEHOLDERS = [
    "replace-me-with-a-long-random-token",  # what production.toml used to ship
    "change-me-change-me-change-me-change-me",
    "https://example.com/some-long-value-here-0123",
    "my-secret-admin-value-4fG8kQ2zLp9Xw3Rt",
    "XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abcabcabcabcabcabcabcabcabcabcabcabc",
    "put-your-own-value-in-here-0123456789",
    "Q9v2mK7xR4tL8wZ3nB6yH1c",  # random, but shorter than 32
    "Q9v2mK7xR4tL8wZ3 nB6yH1cF5jD0sG2pA7e",  # a space: no bearer token holds one
]


@pytest.mark.parametrize("token", PLACEHOLDERS)
def test_a_placeholder_or_short_token_is_refused_without_being_shown(
    tmp_path: Path, token: str
) -> None:
    from_file = write(
        tmp_path, f'[[api_tokens]]\nname = "ops"\nscope = "admin"\ntoken = "{token}"\n'
    )
    for path, environ in [(from_file, {}), (None, {"TICKD_API_TOKENS": f"ops:admin:{token}"})]:
        with pytest.raises(ConfigError) as refused:
            load_settings(path, environ=environ)
        assert refused.value.setting == "api_tokens.ops.token"
        assert token not in str(refused.value)


def test_one_token_under_two_names_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"TICKD_API_TOKENS": f"ci:write:{GOOD},ops:admin:{GOOD}"})
    assert refused.value.setting == "api_tokens"
    assert "ci and ops" in str(refused.value)
    assert GOOD not in str(refused.value)


@pytest.mark.parametrize(
    "raw",
    [
        f"ops:{GOOD}",
        f"ops:root:{GOOD}",
        f":admin:{GOOD}",
        f"ops admin:admin:{GOOD}",
        f"ops:admin:{GOOD},ci:{OTHER}",
        f"ops:admin:{GOOD},ci:write:{OTHER[:20]}",
        f"ops:admin:{GOOD},ops:read:{OTHER}",
        f"ops:admin:{GOOD} {OTHER}",
        f"{GOOD}",
    ],
)
def test_no_error_about_tokens_shows_a_token(raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"TICKD_API_TOKENS": raw})
    message = str(refused.value)
    assert refused.value.setting.startswith(("TICKD_API_TOKENS", "api_tokens"))
    for secret in (GOOD, OTHER, OTHER[:20], GOOD[:16]):
        assert secret not in message


def test_a_password_in_a_misplaced_url_is_not_shown(tmp_path: Path) -> None:
    path = write(tmp_path, 'store_url = ["mongodb://tickd:hunter2-pw@mongo-1/tickd"]\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(path, environ={})
    assert refused.value.setting == "store_url"
    assert "hunter2-pw" not in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"TICKD_HTTP_ALLOWED_PORTS": "redis://:hunter2-pw@redis:6379"})
    assert "hunter2-pw" not in str(refused.value)


NUMBER_SETTINGS = sorted(
    f.name for f in dataclasses.fields(Settings) if f.type in ("int", "float", int, float)
)


@pytest.mark.parametrize("name", NUMBER_SETTINGS)
@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "-1", "1e12"])
def test_no_number_setting_takes_nan_infinity_a_negative_or_a_huge_value(
    name: str, raw: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={f"TICKD_{name.upper()}": raw})
    assert refused.value.setting in (name, f"TICKD_{name.upper()}")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("environ", "setting", "says"),
    [
        ({"TICKD_LOOKAHEAD_SECONDS": "nan"}, "lookahead_seconds", "a number from 0 to 3,600"),
        ({"TICKD_WORKERS": "100000000"}, "workers", "a whole number from 1 to 10,000"),
        ({"TICKD_LOCK_MARGIN_SECONDS": "-5"}, "lock_margin_seconds", "from 0 to 86,400"),
        ({"TICKD_TICK_SECONDS": "inf"}, "tick_seconds", "greater than 0 and at most 3,600"),
        ({"TICKD_HTTP_ALLOW": "10.0.0.0/8,not-an-ip"}, "http_allow", "IP address or network"),
        ({"TICKD_RETENTION_DAYS": "1000000"}, "retention_days", "from 0 to 36,500"),
        ({"TICKD_INSTANCE_ID": " "}, "instance_id", "printable characters"),
        ({"TICKD_HANDLER_CONCURRENCY": "sleep=99999"}, "handler_concurrency.sleep", "to 10,000"),
    ],
)
def test_a_value_out_of_range_is_refused_with_the_range(
    environ: dict[str, str], setting: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ=environ)
    assert refused.value.setting == setting
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("setting", "url", "schemes"),
    [
        ("store_url", "mysql://tickd:hunter2-pw@db/tickd", "sqlite://, mongodb://"),
        ("lock_url", "zookeeper://zk:2181", "memory://, redis:// or rediss://"),
        ("events_url", "nats://nats:4222", "log://, none:// or kafka://"),
        ("mail_url", "sendmail:///usr/sbin/sendmail", "outbox://, smtp:// or smtps://"),
    ],
)
def test_a_url_of_a_scheme_no_backend_opens_is_refused_with_the_schemes_it_takes(
    tmp_path: Path, setting: str, url: str, schemes: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, f'{setting} = "{url}"\n'), environ={})
    assert refused.value.setting == setting
    assert schemes in str(refused.value)
    assert "hunter2-pw" not in str(refused.value)


@pytest.mark.parametrize(
    ("setting", "url", "module", "extra"),
    [
        ("store_url", "mongodb://db/tickd", "pymongo", "mongodb"),
        ("store_url", "postgresql://db/tickd", "asyncpg", "postgresql"),
        ("lock_url", "redis://cache:6379/0", "redis", "redis"),
        ("events_url", "kafka://broker:9092/tickd.executions", "confluent_kafka", "kafka"),
        ("resource_urls", "mongodb+srv://products.example/app", "pymongo", "mongodb"),
    ],
)
def test_a_url_whose_backend_is_not_installed_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, setting: str, url: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as a plain install has it: no such package
    variable = (
        "TICKD_RESOURCE_URLS__PRODUCTS"
        if setting == "resource_urls"
        else f"TICKD_{setting.upper()}"
    )
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={variable: url})
    assert refused.value.setting.startswith(setting)
    assert f"pip install 'tickd[{extra}]'" in str(refused.value)


def test_an_unknown_tickd_variable_is_refused_with_the_name_it_resembles() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"TICKD_WORKRES": "8"})
    assert refused.value.setting == "TICKD_WORKRES"
    assert "did you mean TICKD_WORKERS?" in str(refused.value)
    with pytest.raises(ConfigError, match="TICKD_HANDLER_SETTINGS"):
        load_settings(environ={"TICKD_HANDLER_SETTINGS": "x"})


def test_the_variables_of_the_client_the_scripts_and_the_tests_are_left_alone() -> None:
    for variable in sorted(OTHER_TOOLS_VARIABLES):
        assert isinstance(load_settings(environ={variable: "1"}), Settings), variable
    with pytest.raises(ConfigError):
        load_settings(environ={"TICKD_TEST_REDIS_URLS": "redis://x"})


def test_an_unknown_key_in_the_file_is_refused_with_the_name_it_resembles(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, "[tickd]\nlookahed_seconds = 1\n"), environ={})
    assert refused.value.setting == "lookahed_seconds"
    assert "did you mean lookahead_seconds?" in str(refused.value)


def test_settings_made_in_code_are_held_to_the_same_ranges() -> None:
    with pytest.raises(ConfigError, match="lookahead_seconds"):
        Settings(lookahead_seconds=math.nan)
    with pytest.raises(ConfigError, match="http_allowed_ports"):
        Settings(http_allowed_ports=(443, 0))


THREE_BAD_SETTINGS = 'workers = 0\ntick_seconds = -1\nlog_format = "xml"\n'


def test_every_bad_setting_of_a_file_is_reported_at_once_a_line_each(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, THREE_BAD_SETTINGS), environ={})
    assert str(refused.value).splitlines() == [
        "configuration: 3 settings refused:",
        "  tick_seconds: must be a number greater than 0 and at most 3,600, got -1",
        "  workers: must be a whole number from 1 to 10,000, got 0",
        "  log_format: must be text or json, got 'xml'",
    ]


def test_the_command_names_every_bad_setting_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("TICKD_")]:
        monkeypatch.delenv(name)

    code = main(["handlers", "--config", str(write(tmp_path, THREE_BAD_SETTINGS))])

    assert code == 2
    err = capsys.readouterr().err
    assert all(f"{setting}: must be" in err for setting in ("workers", "tick_seconds"))
    assert "log_format: " in err
