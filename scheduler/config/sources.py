"""Where settings come from: a TOML file (`--config`) and `TICKD_*` environment variables (one
per setting, one per entry of a table; a misspelt variable is refused, not ignored)."""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tickd.scheduler.config.api_tokens import ApiToken, tokens_from_env
from tickd.scheduler.config.limits import ConfigError
from tickd.scheduler.secrets.masking import scrub_text

ENV_PREFIX = "TICKD_"
# TICKD_HANDLER_SETTINGS__<HANDLER>__<SETTING>=value: one handler's setting.
HANDLER_SETTINGS_ENV = ENV_PREFIX + "HANDLER_SETTINGS__"
# TICKD_RESOURCE_URLS__<NAME>=url: where a handlers' resource keeps its data.
RESOURCE_URLS_ENV = ENV_PREFIX + "RESOURCE_URLS__"
# Settings read from variables of their own, one per entry, rather than from one variable.
TABLES_FROM_ENV = {"handler_settings", "resource_urls"}
# TICKD_* variables of the tools around the daemon, not settings of it: the daemon leaves them
# alone, and refuses any other it does not know.
OTHER_TOOLS_VARIABLES = frozenset(
    {
        # the command line's client commands, `tickd jobs` (tickd/cli/connect.py)
        "TICKD_URL",
        "TICKD_TOKEN",
        # compose.yaml
        "TICKD_OPS_TOKEN",
        # scripts/services.sh
        "TICKD_SERVICES_DIR",
        "TICKD_CACHE_DIR",
        "TICKD_KAFKA_VERSION",
        "TICKD_MONGO_PORT",
        "TICKD_POSTGRES_PORT",
        # the tests and CI
        "TICKD_REQUIRE_SERVICES",
        "TICKD_TEST_MONGODB_URL",
        "TICKD_TEST_REDIS_URL",
        "TICKD_TEST_KAFKA_URL",
        "TICKD_SYSTEM_JOBS",
    }
)


def read_file(path: Path, names: set[str]) -> dict[str, Any]:
    """The settings of a TOML file; one not in `names` is refused."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("--config", f"no such file: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from None
    # Settings may sit at the top level or in a [tickd] table, not both: a table beside
    # [tickd] would be silently ignored.
    if "tickd" in data and len(data) > 1:
        outside = sorted(set(data) - {"tickd"})[0]
        raise ConfigError(outside, f"outside the [tickd] table in {path}: move it into [tickd]")
    table = data.get("tickd", data)
    unknown = set(table) - names
    if unknown:
        first = sorted(unknown)[0]
        raise ConfigError(first, f"unknown setting in {path}{did_you_mean(first, names)}")
    return dict(table)


def read_environment(environ: Mapping[str, str], hints: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in set(hints) - TABLES_FROM_ENV:  # one variable per entry, see below
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _parse_env(name, raw, hints[name])
    return values


def handler_settings_from_env(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = {}
    for variable, raw in environ.items():
        if not variable.startswith(HANDLER_SETTINGS_ENV):
            continue
        handler, sep, setting = variable[len(HANDLER_SETTINGS_ENV) :].partition("__")
        if not (handler and sep and setting):
            raise ConfigError(variable, "expected TICKD_HANDLER_SETTINGS__<HANDLER>__<SETTING>")
        if raw.strip():  # an empty variable is not a setting, and must not hide the file's
            tables.setdefault(handler.lower(), {})[setting.lower()] = raw
    return tables


def merge_handler_settings(values: dict[str, Any], from_env: dict[str, dict[str, Any]]) -> None:
    """The environment overrides the file setting by setting, not table by table."""
    if not from_env:
        return
    merged = dict(values.get("handler_settings") or {})
    for handler, table in from_env.items():
        current = merged.get(handler)
        merged[handler] = {**(current if isinstance(current, dict) else {}), **table}
    values["handler_settings"] = merged


def resource_urls_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        variable[len(RESOURCE_URLS_ENV) :].lower(): raw
        for variable, raw in environ.items()
        if variable.startswith(RESOURCE_URLS_ENV) and raw.strip()
    }


def merge_resource_urls(values: dict[str, Any], from_env: dict[str, str]) -> None:
    if from_env:
        current = values.get("resource_urls")
        values["resource_urls"] = {**(current if isinstance(current, dict) else {}), **from_env}


def _parse_env(name: str, raw: str, hint: Any) -> Any:
    setting = ENV_PREFIX + name.upper()
    try:
        if hint is bool:
            if raw.lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError("expected true or false")
            return raw.lower() in ("1", "true", "yes", "on")
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if hint == Mapping[str, int]:
            pairs = (item.split("=", 1) for item in raw.split(",") if item.strip())
            return {key.strip(): int(value) for key, value in pairs}
        if hint == tuple[int, ...]:
            return tuple(int(item) for item in raw.split(",") if item.strip())
        if hint == tuple[ApiToken, ...]:
            return tokens_from_env(setting, raw)
        if hint == tuple[str, ...]:
            return tuple(item.strip() for item in raw.split(",") if item.strip())
    except ConfigError:
        raise
    except ValueError as exc:
        # The value is shown to help, but credentials in it are not (a URL's password...).
        raise ConfigError(setting, scrub_text(f"cannot read {raw!r}: {exc}")) from None
    return raw


def check_variable_names(environ: Mapping[str, str], names: set[str]) -> None:
    """A TICKD_* variable tickd does not know is refused: misspelt, it would be ignored and its
    setting silently left as it was."""
    known = {ENV_PREFIX + name.upper() for name in names - TABLES_FROM_ENV}
    for variable in sorted(environ):
        if (
            variable.startswith(ENV_PREFIX)
            and variable not in known
            and variable not in OTHER_TOOLS_VARIABLES
            and not variable.startswith((HANDLER_SETTINGS_ENV, RESOURCE_URLS_ENV))
        ):
            raise ConfigError(variable, "not a setting of tickd" + did_you_mean(variable, known))


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """` (did you mean workers?)`, when one known name is close to `word`; else nothing."""
    close = difflib.get_close_matches(word, sorted(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
