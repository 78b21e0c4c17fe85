"""Settings: one frozen, validated object, from a TOML file and `TICKD_*` environment variables.

Precedence: defaults < the file (`--config`) < the environment. A bad value stops startup with a
message naming the setting; nothing past the loader sees an untyped dict.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlsplit

from scheduler.secrets import scrub_text

ENV_PREFIX = "TICKD_"
# TICKD_HANDLER_SETTINGS__<HANDLER>__<SETTING>=value: one handler's setting.
HANDLER_SETTINGS_ENV = ENV_PREFIX + "HANDLER_SETTINGS__"
# TICKD_RESOURCE_URLS__<NAME>=url: where a handlers' resource keeps its data.
RESOURCE_URLS_ENV = ENV_PREFIX + "RESOURCE_URLS__"
# Settings read from variables of their own, one per entry, rather than from one variable.
TABLES_FROM_ENV = {"handler_settings", "resource_urls"}


class ConfigError(ValueError):
    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"configuration: {setting}: {reason}")
        self.setting = setting


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


SCOPES = ("read", "write", "admin")
MIN_TOKEN_LENGTH = 32
# What a token copied from an example or left to be filled in holds. The long words anywhere, in
# any case: a random token of 32 characters holds one by a chance of about one in 50,000; the
# short ones only as words of their own ("your-token", "XXXX-XXXX"), which random tokens hardly
# ever form. Literals and fixed-width look-arounds: linear in the token's length.
PLACEHOLDER = re.compile(
    r"change|example|placeholder|replace|secret|token|password|dummy|sample|fixme|default"
    r"|insert|(?<![a-z0-9])(?:xxxx*|your|test|todo|abc|123)(?![a-z0-9])",
    re.IGNORECASE,
)
# Fewer different characters than this in 32 or more: typed by hand (aaaa..., abcabc...), not drawn.
MIN_DISTINCT_CHARACTERS = 8
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAKE_A_TOKEN = "e.g. from `openssl rand -base64 32`"


@dataclass(frozen=True, kw_only=True)
class ApiToken:
    """A bearer token of the REST API. `read` sees, `write` changes jobs, `admin` also changes
    system jobs. The token itself never appears in a repr, a log, an error or a response."""

    name: str
    scope: str
    token: str = field(repr=False)

    def __post_init__(self) -> None:
        if not TOKEN_NAME.fullmatch(self.name):
            raise ConfigError(
                "api_tokens", "a token's name is 1 to 64 letters, digits, '.', '_' or '-'"
            )
        if self.scope not in SCOPES:
            raise ConfigError(f"api_tokens.{self.name}.scope", "must be read, write or admin")
        problem = token_problem(self.token)
        if problem:
            raise ConfigError(f"api_tokens.{self.name}.token", problem)


def token_problem(token: str) -> str | None:
    """Why a token would not keep strangers out, in words that do not repeat it; None if fine."""
    if len(token) < MIN_TOKEN_LENGTH:
        return f"must be at least {MIN_TOKEN_LENGTH} characters, {MAKE_A_TOKEN}"
    if not all("!" <= c <= "~" for c in token):
        return "must be printable ASCII without spaces (what a bearer token can carry)"
    if PLACEHOLDER.search(token) or len(set(token)) < MIN_DISTINCT_CHARACTERS:
        return (
            "looks like a placeholder (a word such as change, example, token or xxxx, or few "
            f"different characters): draw a random one, {MAKE_A_TOKEN}"
        )
    return None


@dataclass(frozen=True, kw_only=True)
class Settings:
    # Names this daemon in leases, executions and events; unique per running process.
    instance_id: str = field(default_factory=default_instance_id)
    # Jobs, executions and history: sqlite:///path or mongodb://host/database.
    store_url: str = "sqlite:///var/tickd.db"
    # One runner per job across instances: memory:// (one process) or redis://host:6379/0.
    lock_url: str = "memory://"
    # Execution events: log://, none:// or kafka://host:9092/topic.
    events_url: str = "log://"
    # Mail handlers send: outbox:///folder (files) or smtp://host:587.
    mail_url: str = "outbox:///var/outbox"
    # The dispatcher wakes this often, and earlier when a job falls due sooner.
    tick_seconds: float = 1.0
    # Most due jobs fetched and claimed per tick.
    batch_size: int = 100
    # Jobs falling due within this many seconds are claimed ahead and fired from in-memory
    # timers at their exact time (their lease covers the wait); 0 claims only what is due.
    lookahead_seconds: float = 2.0
    # At most this many runs armed ahead at once (each holds its job's lease while it waits).
    # Jobs due at one instant are claimed ahead up to this many; beyond it, after the instant.
    lookahead_limit: int = 5000
    # Under a sustained backlog a job due for longer than this is taken before more urgent
    # ones, so that every priority runs within a bound (critical first, but low not never).
    starvation_bound_seconds: float = 60.0
    # Each instance records that it is alive this often...
    heartbeat_seconds: float = 3.0
    # ...and one silent for this long is taken for dead: its leases end at once, so its runs
    # are given back within seconds of a crash rather than when their timeouts run out.
    heartbeat_timeout_seconds: float = 10.0
    # The due backlog and oldest-due-age gauges are read from the store this often (never per
    # tick: a count scans).
    backlog_refresh_seconds: float = 5.0
    # A finished run waits this long for others to end, so that their ends go to the store in
    # one batch (at most batch_size); 0 batches only the runs that end at the same moment.
    finish_linger_seconds: float = 0.002
    # Runs at once in this process.
    workers: int = 30
    # Tasks waiting for a worker; 0 means twice the number of workers.
    queue_size: int = 0
    # A lease outlives the job's timeout by this much before another instance may reap it.
    lease_margin_seconds: float = 30.0
    # The lock outlives the job's timeout by this much (the seed's five seconds).
    lock_margin_seconds: float = 5.0
    # On SIGTERM, running executions get this long to finish before they are cancelled.
    shutdown_grace_seconds: float = 30.0
    # The event loop blocked for longer than this (a handler calling time.sleep or a blocking
    # client inside an async def) is a stall: counted in tickd_loop_stalls_total and logged
    # (loop.stalled) with the jobs that were running.
    loop_stall_threshold_seconds: float = 0.5
    # Pause a job after this many consecutive failed executions; 0 turns the breaker off.
    circuit_breaker_failures: int = 0
    # No job may ask for a longer timeout than this.
    max_timeout_seconds: float = 86400.0
    # Most runs of one handler at once, by handler name (overrides the handler's own limit).
    handler_concurrency: Mapping[str, int] = field(default_factory=dict)
    # The REST API, /metrics, /healthz and /readyz; port 0 turns the listener off. Without
    # tokens the API refuses to listen anywhere but on loopback.
    api_host: str = "127.0.0.1"
    # The API's port (also /ui, the dashboard).
    api_port: int = 8080
    # Bearer tokens of the API and the dashboard: [[api_tokens]] name, scope, token.
    api_tokens: tuple[ApiToken, ...] = field(default=(), repr=False)
    # text, or json for one JSON object per line.
    log_format: str = "text"
    # DEBUG, INFO, WARNING or ERROR.
    log_level: str = "INFO"
    # Seed demo jobs at boot (what `make run` does).
    seed_demo: bool = False
    # On shutdown, pending events get this long to be delivered.
    events_flush_seconds: float = 5.0
    # Handlers' HTTP (ctx.http) reaches public addresses on these ports only...
    http_allowed_ports: tuple[int, ...] = (80, 443)
    # ...and, on any port, these internal addresses or networks (CIDR), e.g. ["10.1.2.0/24"].
    http_allow: tuple[str, ...] = ()
    # Each handler's own settings, by handler name, given to it as `ctx.config`: a
    # [handler_settings.catalogue_walk] table, or TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__API_KEY
    # (values from the environment are strings). They may hold secrets: never shown.
    handler_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    # Executions and history older than this many days are pruned, in small batches off the
    # hot path; 0 keeps them for ever. A running execution, an unhandled dead letter and a
    # job's newest execution are never pruned.
    retention_days: int = 30
    # Executions kept per job, the newest; older ones are pruned (0: no bound by count).
    retention_max_executions_per_job: int = 1000
    # retention_days for the executions of some handlers, by handler name: `webhook = 7`.
    retention_days_by_handler: Mapping[str, int] = field(default_factory=dict)
    # retention_max_executions_per_job for some handlers, by handler name: `webhook = 100`.
    retention_max_executions_by_handler: Mapping[str, int] = field(default_factory=dict)
    # Where the resources handlers declare keep their data, by resource name, when not in the
    # store's database: `[resource_urls] products = "mongodb://product-db/app"`, or
    # TICKD_RESOURCE_URLS__PRODUCTS. May hold passwords: never shown.
    resource_urls: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in (
            "tick_seconds",
            "lease_margin_seconds",
            "max_timeout_seconds",
            "heartbeat_seconds",
            "loop_stall_threshold_seconds",
        ):
            _positive(name, getattr(self, name))
        for name in ("batch_size", "workers"):
            _positive(name, getattr(self, name))
        for name in (
            "queue_size",
            "circuit_breaker_failures",
            "shutdown_grace_seconds",
            "lookahead_limit",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(name, "must not be negative")
        if self.heartbeat_timeout_seconds <= 2 * self.heartbeat_seconds:
            raise ConfigError(
                "heartbeat_timeout_seconds",
                "must be more than twice heartbeat_seconds, or live instances are taken for dead",
            )
        if not 0 <= self.api_port <= 65535:
            raise ConfigError("api_port", "must be a port number (0 to 65535)")
        _check_tokens_differ(self.api_tokens)
        if self.log_format not in ("text", "json"):
            raise ConfigError("log_format", "must be text or json")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError("log_level", "must be DEBUG, INFO, WARNING or ERROR")
        for name in ("store_url", "lock_url", "events_url", "mail_url"):
            if not urlsplit(getattr(self, name)).scheme:
                raise ConfigError(name, "must be a URL with a scheme, e.g. sqlite:///var/tickd.db")
        for port in self.http_allowed_ports:
            if not isinstance(port, int) or not 0 < port <= 65535:
                raise ConfigError("http_allowed_ports", f"{port!r} is not a port number")
        _check_retention(self)
        for handler, limit in self.handler_concurrency.items():
            if not isinstance(limit, int) or limit < 1:
                raise ConfigError(f"handler_concurrency.{handler}", "must be a whole number >= 1")
        for handler, table in self.handler_settings.items():
            if not isinstance(table, Mapping):
                raise ConfigError(f"handler_settings.{handler}", "must be a table of settings")
        for resource, url in self.resource_urls.items():
            if not isinstance(url, str) or not urlsplit(url).scheme:
                raise ConfigError(f"resource_urls.{resource}", "must be a URL with a scheme")

    @property
    def effective_queue_size(self) -> int:
        return self.queue_size or 2 * self.workers


def _check_retention(settings: Settings) -> None:
    for name in ("retention_days", "retention_max_executions_per_job"):
        value = getattr(settings, name)
        if not isinstance(value, int) or value < 0:
            raise ConfigError(name, "must be a whole number >= 0 (0: no bound)")
    for name in ("retention_days_by_handler", "retention_max_executions_by_handler"):
        for handler, value in getattr(settings, name).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name}.{handler}", "must be a whole number >= 0 (0: no bound)")


def _check_tokens_differ(tokens: tuple[ApiToken, ...]) -> None:
    names = [t.name for t in tokens]
    if len(set(names)) != len(names):
        raise ConfigError("api_tokens", "token names must be unique")
    first_name_of: dict[str, str] = {}
    for token in tokens:
        other = first_name_of.setdefault(token.token, token.name)
        if other != token.name:
            # One value under two names: the history could not tell who acted, nor a scope hold.
            raise ConfigError(
                "api_tokens", f"{other} and {token.name} have the same token: give each its own"
            )


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(name, "must be greater than 0")


def load_settings(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_read_file(Path(path)))
    environ = os.environ if environ is None else environ
    values.update(_read_environment(environ))
    _merge_handler_settings(values, _handler_settings_from_env(environ))
    _merge_resource_urls(values, _resource_urls_from_env(environ))
    return _build(values)


def _read_file(path: Path) -> dict[str, Any]:
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
    unknown = set(table) - _field_names()
    if unknown:
        raise ConfigError(sorted(unknown)[0], f"unknown setting in {path}")
    return dict(table)


def _read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    hints = get_type_hints(Settings)
    values: dict[str, Any] = {}
    for name in _field_names() - TABLES_FROM_ENV:  # one variable per entry, see below
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _parse_env(name, raw, hints[name])
    return values


def _handler_settings_from_env(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
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


def _merge_handler_settings(values: dict[str, Any], from_env: dict[str, dict[str, Any]]) -> None:
    """The environment overrides the file setting by setting, not table by table."""
    if not from_env:
        return
    merged = dict(values.get("handler_settings") or {})
    for handler, table in from_env.items():
        current = merged.get(handler)
        merged[handler] = {**(current if isinstance(current, dict) else {}), **table}
    values["handler_settings"] = merged


def _resource_urls_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        variable[len(RESOURCE_URLS_ENV) :].lower(): raw
        for variable, raw in environ.items()
        if variable.startswith(RESOURCE_URLS_ENV) and raw.strip()
    }


def _merge_resource_urls(values: dict[str, Any], from_env: dict[str, str]) -> None:
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
            return _tokens_from_env(setting, raw)
        if hint == tuple[str, ...]:
            return tuple(item.strip() for item in raw.split(",") if item.strip())
    except ConfigError:
        raise
    except ValueError as exc:
        # The value is shown to help, but credentials in it are not (a URL's password...).
        raise ConfigError(setting, scrub_text(f"cannot read {raw!r}: {exc}")) from None
    return raw


def _tokens_from_env(setting: str, raw: str) -> tuple[ApiToken, ...]:
    """`name:scope:token,...`; a token may itself contain colons. Errors never repeat the value:
    it is made of tokens."""
    tokens = []
    for position, item in enumerate((i for i in raw.split(",") if i.strip()), start=1):
        parts = item.strip().split(":", 2)
        if len(parts) != 3:
            raise ConfigError(setting, f"entry {position}: expected name:scope:token")
        tokens.append(ApiToken(name=parts[0], scope=parts[1], token=parts[2]))
    return tuple(tokens)


def _tokens_from_file(value: Any) -> tuple[ApiToken, ...]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError("api_tokens", "expected [[api_tokens]] tables of name, scope, token")
    tokens = []
    for i, table in enumerate(value):
        unknown = set(table) - {"name", "scope", "token"}
        if unknown or not all(isinstance(table.get(k), str) for k in ("name", "scope", "token")):
            raise ConfigError(f"api_tokens[{i}]", "needs name, scope and token, as strings")
        tokens.append(ApiToken(**table))
    return tuple(tokens)


def _build(values: dict[str, Any]) -> Settings:
    hints = get_type_hints(Settings)
    for name, value in values.items():
        if hints[name] == tuple[ApiToken, ...]:
            if not isinstance(value, tuple):
                values[name] = _tokens_from_file(value)
            continue
        _check_type(name, value, hints[name])
        if hints[name] in (tuple[int, ...], tuple[str, ...]):
            values[name] = tuple(value)
    return Settings(**values)


def _check_type(name: str, value: Any, hint: Any) -> None:
    expected: tuple[type, ...]
    if hint is float:
        expected = (int, float)
    elif hint in (Mapping[str, int], Mapping[str, str], Mapping[str, Mapping[str, Any]]):
        expected = (dict,)
    elif hint in (tuple[int, ...], tuple[str, ...]):
        expected = (list, tuple)
        item_type = hint.__args__[0]
        if isinstance(value, list | tuple) and not all(
            isinstance(item, item_type) and not isinstance(item, bool) for item in value
        ):
            got = scrub_text(repr(value))
            raise ConfigError(name, f"expected a list of {_type_name(item_type)}s, got {got}")
    else:
        expected = (hint,)
    if isinstance(value, bool) and bool not in expected:
        expected = ()  # TOML true is not a number
    if not isinstance(value, expected):
        # Handlers' settings and resource URLs hold secrets: their values are not repeated
        # back; nor anywhere the credentials in a URL.
        got = "something else" if name in TABLES_FROM_ENV else scrub_text(repr(value))
        raise ConfigError(name, f"expected {_type_name(hint)}, got {got}")


def _type_name(hint: Any) -> str:
    if hint == Mapping[str, Mapping[str, Any]]:
        return "a table of [handler_settings.<handler>] tables"
    if hint == Mapping[str, str]:
        return "a table of resource = URL"
    return {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}.get(
        hint, "a table of handler = limit"
    )


def _field_names() -> set[str]:
    return {f.name for f in dataclasses.fields(Settings)}
