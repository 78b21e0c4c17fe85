"""At startup, what the settings say of handlers and resources is held against those installed:
a misspelt table or setting stops the daemon, naming it, instead of being ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tickd.app import check_against_handlers, load_registry
from tickd.scheduler.config.settings import ConfigError, Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent


def refusal(**settings: Any) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        check_against_handlers(Settings(**settings), load_registry())
    return refused.value


def test_the_shipped_configurations_pass() -> None:
    for name in ("tickd.toml", "production.toml"):
        check_against_handlers(load_settings(ROOT / "config" / name, environ={}), load_registry())


def test_a_misspelt_handler_setting_is_refused_with_the_name_it_resembles() -> None:
    refused = refusal(handler_settings={"catalogue_walk": {"daily_quote": 100}})
    assert refused.setting == "handler_settings.catalogue_walk.daily_quote"
    assert "did you mean daily_quota?" in str(refused)


def test_a_setting_for_a_handler_that_takes_none_is_refused() -> None:
    refused = refusal(handler_settings={"webhook": {"region": "eu"}})
    assert refused.setting == "handler_settings.webhook.region"
    assert "takes none" in str(refused)


@pytest.mark.parametrize(
    "table",
    [
        "handler_settings",
        "handler_concurrency",
        "retention_days_by_handler",
        "retention_max_executions_by_handler",
    ],
)
def test_a_table_for_a_handler_that_is_not_installed_is_refused(table: str) -> None:
    value: dict[str, Any] = {"webhok": {}} if table == "handler_settings" else {"webhok": 3}
    refused = refusal(**{table: value})
    assert refused.setting == f"{table}.webhok"
    assert "did you mean webhook?" in str(refused)


def test_a_url_for_a_resource_no_handler_uses_is_refused() -> None:
    refused = refusal(resource_urls={"product": "sqlite:///var/products.db"})
    assert refused.setting == "resource_urls.product"
    assert "did you mean products?" in str(refused)


@pytest.mark.parametrize(
    ("table", "setting"),
    [
        ({"catalogue_walk": {"concurrency": "nan"}}, "handler_settings.catalogue_walk.concurrency"),
        ({"catalogue_walk": {"base_url": "https://v.example"}}, "handler_settings.catalogue_walk"),
        ({"alert_scanner": {"max_items": 0}}, "handler_settings.alert_scanner.max_items"),
    ],
)
def test_a_handler_setting_every_run_would_refuse_stops_startup(
    table: dict[str, Any], setting: str
) -> None:
    refused = refusal(handler_settings=table)
    assert refused.setting.startswith(setting)


def test_a_handler_setting_is_never_repeated_in_the_refusal() -> None:
    refused = refusal(handler_settings={"catalogue_walk": {"api_key": "s3cret key 12345"}})
    assert refused.setting == "handler_settings.catalogue_walk.api_key"
    assert "s3cret" not in str(refused)
