"""Settings: one frozen, validated object, from a TOML file and `TICKD_*` environment variables.

Precedence: defaults < the file (`--config`) < the environment. A bad value stops startup with a
message naming the setting; nothing past the loader sees an untyped dict.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import ipaddress
import math
import os
import re
import socket
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints
from urllib.parse import urlsplit

from tickd.scheduler.secrets import scrub_text

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
        # the API's client, `tickd jobs` (api/client.py)
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


class ConfigError(ValueError):
    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"configuration: {setting}: {reason}")
        self.setting = setting


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What a setting may hold besides its type (of a list or a table: each item). Settings
    refuse anything else at construction, naming the setting and this range; nothing past
    startup meets a NaN, a negative duration or a scheme no backend opens."""

    # Numbers: at least `low`, more than `above`, at most `high`; never NaN nor infinite.
    low: float | None = None
    above: float | None = None
    high: float | None = None
    # Strings: one of these (in any case, with `any_case`).
    choices: tuple[str, ...] = ()
    any_case: bool = False
    # URLs: with one of these schemes.
    schemes: tuple[str, ...] = ()
    # Strings: what else must hold, and `means`, what that is in words.
    accepts: Callable[[str], object] | None = None
    means: str = ""

    def admits(self, value: object) -> bool:
        if isinstance(value, bool):
            return True
        if isinstance(value, int | float):
            return self._in_range(value)
        if not isinstance(value, str):
            return True
        if self.choices and (value.upper() if self.any_case else value) not in self.choices:
            return False
        if self.schemes and _scheme(value) not in self.schemes:
            return False
        return self.accepts is None or bool(self.accepts(value))

    def _in_range(self, number: float) -> bool:
        if isinstance(number, float) and not math.isfinite(number):
            return False
        return not (
            (self.low is not None and number < self.low)
            or (self.above is not None and number <= self.above)
            or (self.high is not None and number > self.high)
        )

    def describe(self, kind: str) -> str:
        """The range in words, after "must be": `a whole number from 1 to 10,000`."""
        if self.schemes:
            return "a URL starting " + _either([f"{scheme}://" for scheme in self.schemes])
        if self.choices:
            return _either(list(self.choices))
        if self.means:
            return self.means
        if self.low is not None and self.high is not None:
            return f"{kind} from {_number(self.low)} to {_number(self.high)}"
        bounds = []
        if self.low is not None:
            bounds.append(f"at least {_number(self.low)}")
        if self.above is not None:
            bounds.append(f"greater than {_number(self.above)}")
        if self.high is not None:
            bounds.append(f"at most {_number(self.high)}")
        return " ".join([kind, " and ".join(bounds)]).strip()


def _scheme(url: str) -> str | None:
    try:
        return urlsplit(url).scheme or None
    except ValueError:  # an unbalanced [ in the host
        return None


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else str(value)


def _is_ip_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return False
    return True


def _is_instance_name(text: str) -> bool:
    return 0 < len(text) <= MAX_NAME_CHARS and text.isprintable() and not text.isspace()


LIMITS = "limits"
SECRET = "secret"
NO_LIMITS = Limits()
HOUR = 3600.0
DAY = 86400.0
# Runs at once in one process: each worker is a task, and each run holds a lease and whatever
# its handler allocates.
MAX_WORKERS = 10_000
MAX_QUEUE_SIZE = 100_000
MAX_BATCH_SIZE = 10_000
MAX_LOOKAHEAD_LIMIT = 100_000
# Failure and retention counts: far beyond any use, within every store's integers.
MAX_COUNT = 100_000_000
MAX_RETENTION_DAYS = 36_500
MAX_TIMEOUT = 30 * DAY
MAX_NAME_CHARS = 200
STORE_SCHEMES = ("sqlite", "mongodb", "mongodb+srv")
# The backends a plain install lacks: the package each needs, and the extra that installs it.
EXTRA_OF_SCHEME = {
    "mongodb": ("pymongo", "mongodb"),
    "mongodb+srv": ("pymongo", "mongodb"),
    "redis": ("redis", "redis"),
    "rediss": ("redis", "redis"),
    "kafka": ("confluent_kafka", "kafka"),
}
INSTANCE_ID = Limits(accepts=_is_instance_name, means=f"1 to {MAX_NAME_CHARS} printable characters")
HOST = Limits(
    accepts=re.compile(r"[A-Za-z0-9._:%-]{1,253}").fullmatch,
    means="a host name or an IP address, e.g. 127.0.0.1",
)
LOG_LEVEL = Limits(choices=("DEBUG", "INFO", "WARNING", "ERROR"), any_case=True)
IP_NETWORK = Limits(
    accepts=_is_ip_network, means="an IP address or network (CIDR), e.g. 10.1.2.0/24"
)
HANDLER_LIMIT = Limits(low=1, high=MAX_WORKERS)
RETENTION_DAYS = Limits(low=0, high=MAX_RETENTION_DAYS)
RETENTION_COUNT = Limits(low=0, high=MAX_COUNT)
ANY_URL = Limits(accepts=_scheme, means="a URL with a scheme, e.g. mongodb://host/database")


def setting(
    default: Any = None,
    limits: Limits = NO_LIMITS,
    *,
    factory: Callable[[], Any] | None = None,
    secret: bool = False,
) -> Any:
    """A field of Settings with its range. A secret one never appears in a repr, nor its value
    in an error."""
    metadata = {LIMITS: limits, SECRET: secret}
    if factory is not None:
        return field(default_factory=factory, repr=not secret, metadata=metadata)
    return field(default=default, repr=not secret, metadata=metadata)


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
    instance_id: str = setting(factory=default_instance_id, limits=INSTANCE_ID)
    # Jobs, executions and history: sqlite:///path or mongodb://host/database.
    store_url: str = setting("sqlite:///var/tickd.db", Limits(schemes=STORE_SCHEMES))
    # One runner per job across instances: memory:// (one process) or redis://host:6379/0.
    lock_url: str = setting("memory://", Limits(schemes=("memory", "redis", "rediss")))
    # Execution events: log://, none:// or kafka://host:9092/topic.
    events_url: str = setting("log://", Limits(schemes=("log", "none", "kafka")))
    # Mail handlers send: outbox:///folder (files) or smtp://host:587.
    mail_url: str = setting("outbox:///var/outbox", Limits(schemes=("outbox", "smtp", "smtps")))
    # The dispatcher wakes this often, and earlier when a job falls due sooner.
    tick_seconds: float = setting(1.0, Limits(above=0, high=HOUR))
    # Most due jobs fetched and claimed per tick.
    batch_size: int = setting(100, Limits(low=1, high=MAX_BATCH_SIZE))
    # Jobs falling due within this many seconds are claimed ahead and fired from in-memory
    # timers at their exact time (their lease covers the wait); 0 claims only what is due.
    lookahead_seconds: float = setting(2.0, Limits(low=0, high=HOUR))
    # At most this many runs armed ahead at once (each holds its job's lease while it waits).
    # Jobs due at one instant are claimed ahead up to this many; beyond it, after the instant.
    lookahead_limit: int = setting(5000, Limits(low=0, high=MAX_LOOKAHEAD_LIMIT))
    # Under a sustained backlog a job due for longer than this is taken before more urgent
    # ones, so that every priority runs within a bound (critical first, but low not never).
    starvation_bound_seconds: float = setting(60.0, Limits(above=0, high=DAY))
    # Each instance records that it is alive this often...
    heartbeat_seconds: float = setting(3.0, Limits(above=0, high=HOUR))
    # ...and one silent for this long is taken for dead: its leases end at once, so its runs
    # are given back within seconds of a crash rather than when their timeouts run out.
    heartbeat_timeout_seconds: float = setting(10.0, Limits(above=0, high=DAY))
    # The due backlog and oldest-due-age gauges are read from the store this often (never per
    # tick: a count scans).
    backlog_refresh_seconds: float = setting(5.0, Limits(above=0, high=HOUR))
    # A finished run waits this long for others to end, so that their ends go to the store in
    # one batch (at most batch_size); 0 batches only the runs that end at the same moment.
    finish_linger_seconds: float = setting(0.002, Limits(low=0, high=1))
    # Runs at once in this process.
    workers: int = setting(30, Limits(low=1, high=MAX_WORKERS))
    # Tasks waiting for a worker; 0 means twice the number of workers.
    queue_size: int = setting(0, Limits(low=0, high=MAX_QUEUE_SIZE))
    # A lease outlives the job's timeout by this much before another instance may reap it.
    lease_margin_seconds: float = setting(30.0, Limits(above=0, high=DAY))
    # The lock outlives the job's timeout by this much (the seed's five seconds).
    lock_margin_seconds: float = setting(5.0, Limits(low=0, high=DAY))
    # On SIGTERM, running executions get this long to finish before they are cancelled.
    shutdown_grace_seconds: float = setting(30.0, Limits(low=0, high=DAY))
    # The event loop blocked for longer than this (a handler calling time.sleep or a blocking
    # client inside an async def) is a stall: counted in tickd_loop_stalls_total and logged
    # (loop.stalled) with the jobs that were running.
    loop_stall_threshold_seconds: float = setting(0.5, Limits(above=0, high=HOUR))
    # Pause a job after this many consecutive failed executions; 0 turns the breaker off.
    circuit_breaker_failures: int = setting(0, Limits(low=0, high=MAX_COUNT))
    # No job may ask for a longer timeout than this.
    max_timeout_seconds: float = setting(86400.0, Limits(above=0, high=MAX_TIMEOUT))
    # Most runs of one handler at once, by handler name (overrides the handler's own limit).
    handler_concurrency: Mapping[str, int] = setting(factory=dict, limits=HANDLER_LIMIT)
    # The REST API, /metrics, /healthz and /readyz; port 0 turns the listener off. Without
    # tokens the API refuses to listen anywhere but on loopback.
    api_host: str = setting("127.0.0.1", HOST)
    # The API's port (also /ui, the dashboard).
    api_port: int = setting(8080, Limits(low=0, high=65535))
    # Bearer tokens of the API and the dashboard: [[api_tokens]] name, scope, token.
    api_tokens: tuple[ApiToken, ...] = setting((), secret=True)
    # text, or json for one JSON object per line.
    log_format: str = setting("text", Limits(choices=("text", "json")))
    # DEBUG, INFO, WARNING or ERROR.
    log_level: str = setting("INFO", LOG_LEVEL)
    # Seed demo jobs at boot (what `make run` does).
    seed_demo: bool = setting(False)
    # On shutdown, pending events get this long to be delivered.
    events_flush_seconds: float = setting(5.0, Limits(low=0, high=HOUR))
    # Handlers' HTTP (ctx.http) reaches public addresses on these ports only...
    http_allowed_ports: tuple[int, ...] = setting((80, 443), Limits(low=1, high=65535))
    # ...and, on any port, these internal addresses or networks (CIDR), e.g. ["10.1.2.0/24"].
    http_allow: tuple[str, ...] = setting((), IP_NETWORK)
    # Each handler's own settings, by handler name, given to it as `ctx.config`: a
    # [handler_settings.catalogue_walk] table, or TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__API_KEY
    # (values from the environment are strings). They may hold secrets: never shown.
    handler_settings: Mapping[str, Mapping[str, Any]] = setting(factory=dict, secret=True)
    # Executions and history older than this many days are pruned, in small batches off the
    # hot path; 0 keeps them for ever. A running execution, an unhandled dead letter and a
    # job's newest execution are never pruned.
    retention_days: int = setting(30, RETENTION_DAYS)
    # Executions kept per job, the newest; older ones are pruned (0: no bound by count).
    retention_max_executions_per_job: int = setting(1000, RETENTION_COUNT)
    # retention_days for the executions of some handlers, by handler name: `webhook = 7`.
    retention_days_by_handler: Mapping[str, int] = setting(factory=dict, limits=RETENTION_DAYS)
    # retention_max_executions_per_job for some handlers, by handler name: `webhook = 100`.
    retention_max_executions_by_handler: Mapping[str, int] = setting(
        factory=dict, limits=RETENTION_COUNT
    )
    # Where the resources handlers declare keep their data, by resource name, when not in the
    # store's database: `[resource_urls] products = "mongodb://product-db/app"`, or
    # TICKD_RESOURCE_URLS__PRODUCTS. May hold passwords: never shown.
    resource_urls: Mapping[str, str] = setting(factory=dict, limits=ANY_URL, secret=True)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_setting(f, getattr(self, f.name))
        if self.heartbeat_timeout_seconds <= 2 * self.heartbeat_seconds:
            raise ConfigError(
                "heartbeat_timeout_seconds",
                "must be more than twice heartbeat_seconds, or live instances are taken for dead",
            )
        _check_tokens_differ(self.api_tokens)

    @property
    def effective_queue_size(self) -> int:
        return self.queue_size or 2 * self.workers


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


def load_settings(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_read_file(Path(path)))
    environ = os.environ if environ is None else environ
    _check_variable_names(environ)
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
        first = sorted(unknown)[0]
        raise ConfigError(first, f"unknown setting in {path}{did_you_mean(first, _field_names())}")
    return dict(table)


def _read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    hints = _hints()
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
    hints = _hints()
    for name, value in values.items():
        if hints[name] == tuple[ApiToken, ...] and not isinstance(value, tuple):
            values[name] = _tokens_from_file(value)
        elif get_origin(hints[name]) is tuple and isinstance(value, list):
            values[name] = tuple(value)
    return Settings(**values)


def _check_setting(f: dataclasses.Field[Any], value: Any) -> None:
    """The setting's type and its range (field metadata, see `setting`); of a list or a table,
    each item's."""
    hint = _hints()[f.name]
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
    scheme = _scheme(url) or ""
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


@functools.cache
def _hints() -> dict[str, Any]:
    return get_type_hints(Settings)


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


def _check_variable_names(environ: Mapping[str, str]) -> None:
    """A TICKD_* variable tickd does not know is refused: misspelt, it would be ignored and its
    setting silently left as it was."""
    known = {ENV_PREFIX + name.upper() for name in _field_names() - TABLES_FROM_ENV}
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


def _field_names() -> set[str]:
    return {f.name for f in dataclasses.fields(Settings)}
