"""Each setting checked against its type and its range (the `Limits` it is declared with), and a
URL against the extras installed: the error names the setting and never repeats a secret. Every
bad setting is reported at once (ConfigErrors), a line each, so one run shows them all."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, get_args, get_origin

from tickd.scheduler.config.api_tokens import ApiToken
from tickd.scheduler.config.limits import LIMITS, NO_LIMITS, SECRET, ConfigError, Limits, url_scheme
from tickd.scheduler.secrets.masking import scrub_text

# The backends a plain install lacks: the package each needs, and the extra that installs it.
EXTRA_OF_SCHEME = {
    "mongodb": ("pymongo", "mongodb"),
    "mongodb+srv": ("pymongo", "mongodb"),
    "postgresql": ("asyncpg", "postgresql"),
    "postgres": ("asyncpg", "postgresql"),
    "redis": ("redis", "redis"),
    "rediss": ("redis", "redis"),
    "kafka": ("confluent_kafka", "kafka"),
}


class ConfigErrors(ConfigError):
    """Several settings refused together; as a ConfigError, the first of them."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        super().__init__(errors[0].setting, str(errors[0]))
        lines = [str(e).removeprefix("configuration: ") for e in errors]
        self.args = (f"configuration: {len(errors)} settings refused:\n  " + "\n  ".join(lines),)
        self.errors = list(errors)


class ConfigFindings:
    """The ConfigErrors of independent checks, gathered: one failing does not hide the next."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    @contextmanager
    def check(self) -> Iterator[None]:
        try:
            yield
        except ConfigErrors as several:
            self.errors += several.errors
        except ConfigError as error:
            self.errors.append(error)

    def raise_any(self) -> None:
        """One error as itself, several as ConfigErrors."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


def check_settings(settings: Any, hints: Mapping[str, Any]) -> ConfigFindings:
    """Every setting of a Settings dataclass, each checked; what failed, gathered."""
    found = ConfigFindings()
    for f in dataclasses.fields(settings):
        with found.check():
            check_setting(f, getattr(settings, f.name), hints[f.name])
    return found


def check_setting(f: dataclasses.Field[Any], value: Any, hint: Any) -> None:
    """The setting's type and its range (field metadata, see `setting`); of a list or a table,
    each item's."""
    limits: Limits = f.metadata.get(LIMITS, NO_LIMITS)
    secret = bool(f.metadata.get(SECRET))
    if hint == tuple[ApiToken, ...]:
        if not isinstance(value, list | tuple) or not all(isinstance(t, ApiToken) for t in value):
            raise ConfigError(f.name, "expected [[api_tokens]] tables of name, scope, token")
    elif hint == Mapping[str, Mapping[str, Any]]:
        _check_is(f.name, value, hint, secret)
        for key, table in value.items():
            if not isinstance(table, Mapping):
                raise ConfigError(f"{f.name}.{key}", "must be a table of settings")
    elif get_origin(hint) is tuple:
        _check_is(f.name, value, hint, secret)
        for item in value:
            _check_value(f.name, item, get_args(hint)[0], limits, secret)
    elif get_origin(hint) is Mapping:
        _check_is(f.name, value, hint, secret)
        for key, item in value.items():
            _check_value(f"{f.name}.{key}", item, get_args(hint)[1], limits, secret)
    else:
        _check_value(f.name, value, hint, limits, secret)


def _check_value(where: str, value: Any, hint: Any, limits: Limits, secret: bool) -> None:
    _check_is(where, value, hint, secret)
    if not limits.admits(value):
        raise ConfigError(
            where, f"must be {limits.describe(_type_name(hint))}{_got(value, secret)}"
        )
    if isinstance(value, str):
        _check_installed(where, value)


def _check_installed(where: str, url: str) -> None:
    """A URL whose backend needs a package of an extra that is not installed."""
    scheme = url_scheme(url) or ""
    if scheme not in EXTRA_OF_SCHEME:
        return
    module, extra = EXTRA_OF_SCHEME[scheme]
    try:
        importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            where, f"{scheme}:// needs the {extra} extra: pip install 'tickd[{extra}]'"
        ) from None


def _check_is(where: str, value: Any, hint: Any, secret: bool) -> None:
    if not _is_a(value, hint):
        raise ConfigError(where, f"expected {_type_name(hint)}{_got(value, secret)}")


def _is_a(value: Any, hint: Any) -> bool:
    if hint is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False  # TOML true is not a number
    if hint is float:
        return isinstance(value, int | float)
    if get_origin(hint) is tuple:
        return isinstance(value, list | tuple)
    if get_origin(hint) is Mapping:
        return isinstance(value, Mapping)
    return isinstance(value, hint)


def _got(value: Any, secret: bool) -> str:
    """Handlers' settings, tokens and resource URLs hold secrets: their values are not repeated
    back; nor anywhere the credentials in a URL."""
    if secret:
        return ""
    shown = scrub_text(repr(value))
    return f", got {shown if len(shown) <= MAX_SHOWN else shown[:MAX_SHOWN] + '...'}"


MAX_SHOWN = 80


def _type_name(hint: Any) -> str:
    if hint == Mapping[str, Mapping[str, Any]]:
        return "a table of [handler_settings.<handler>] tables"
    if hint == Mapping[str, str]:
        return "a table of resource = URL"
    if hint == Mapping[str, int]:
        return "a table of handler = whole number"
    if get_origin(hint) is tuple:
        return f"a list of {_type_name(get_args(hint)[0]).removeprefix('a ')}s"
    return {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}[hint]
