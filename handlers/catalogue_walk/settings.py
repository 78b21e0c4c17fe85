"""The walk's settings: the job's params over the daemon's `[handler_settings.catalogue_walk]`.

Ops keep the vendor's base URL, API key and daily quota in the configuration (or in
`TICKD_HANDLER_SETTINGS__CATALOGUE_WALK__API_KEY` and the like), out of the job store. A job
then walks with the configured vendor and may lower its quota, never raise or rename it: the
vendor grants one quota, shared by every job that calls it. A job whose params name another
base URL brings that vendor's key and quota itself; the configured key is only ever sent to the
configured URL (a job's author must not be able to point it elsewhere). The quota is counted
per host and port, however the URL spells them, unless `quota_key` names it.

Values from the environment arrive as strings and are read as the schema's types; a bad or
missing one is a failed run whose error names where it should be set.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yarl

CONFIG_TABLE = "handler_settings.catalogue_walk"

DEFAULT_CONCURRENCY = 4
DEFAULT_MIN_AGE_SECONDS = 3600.0
DEFAULT_REQUEST_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_CONSECUTIVE_FAILURES = 20
MAX_CONCURRENCY = 32
QUOTA_REQUIRED = (
    f"{CONFIG_TABLE}.daily_quota: required with {CONFIG_TABLE}.base_url (the vendor's quota is "
    "shared by every job that uses it)"
)

PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "base_url": {
            "description": "the vendor's price API; GET {base_url}/parts/{mpn}/price",
            "type": "string",
            "pattern": "^https?://",
            "maxLength": 2048,
        },
        "api_key": {
            "description": "sent as a bearer token; never shown",
            "type": "string",
            "minLength": 1,
            "maxLength": 4096,
        },
        "daily_quota": {
            "description": "vendor calls allowed per UTC day, shared by every walk of quota_key",
            "type": "integer",
            "minimum": 1,
            "maximum": 100_000_000,
        },
        "quota_key": {
            "description": "names the quota; by default the base URL's host",
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
        },
        "concurrency": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_CONCURRENCY,
            "default": DEFAULT_CONCURRENCY,
        },
        "min_age_seconds": {
            "description": "parts priced more recently than this are not asked again",
            "type": "number",
            "minimum": 0,
            "default": DEFAULT_MIN_AGE_SECONDS,
        },
        "max_parts": {
            "description": "at most this many calls per run",
            "type": "integer",
            "minimum": 1,
        },
        "request_timeout_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 300,
            "default": DEFAULT_REQUEST_TIMEOUT_SECONDS,
        },
        "max_consecutive_failures": {
            "description": "the vendor failing this many calls in a row stops the run, failed",
            "type": "integer",
            "minimum": 1,
            "maximum": 10_000,
            "default": DEFAULT_MAX_CONSECUTIVE_FAILURES,
        },
    },
    "additionalProperties": False,
}


@dataclass(frozen=True, kw_only=True)
class WalkSettings:
    base_url: str
    api_key: str = field(repr=False)
    daily_quota: int
    quota_key: str
    concurrency: int = DEFAULT_CONCURRENCY
    min_age_seconds: float = DEFAULT_MIN_AGE_SECONDS
    max_parts: int | None = None
    request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
    max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES

    @classmethod
    def parse(cls, params: Mapping[str, Any], config: Mapping[str, Any]) -> WalkSettings:
        """Raises ValueError naming the param or setting at fault."""
        for where, given in (("params", params), (CONFIG_TABLE, config)):
            unknown = set(given) - set(PARAMS["properties"])
            if unknown:
                raise ValueError(f"{where}: unknown {', '.join(sorted(unknown))}")
        values = _Values(params, config)
        base_url = values.url("base_url")
        if values.own_vendor(base_url):
            vendor = _own_vendor(values, base_url)
        else:
            vendor = _configured_vendor(values, base_url)
        return cls(
            **vendor,
            concurrency=values.whole("concurrency", default=DEFAULT_CONCURRENCY),
            min_age_seconds=values.number("min_age_seconds", default=DEFAULT_MIN_AGE_SECONDS),
            max_parts=values.whole("max_parts", default=None),
            request_timeout_seconds=values.number(
                "request_timeout_seconds", default=DEFAULT_REQUEST_TIMEOUT_SECONDS
            ),
            max_consecutive_failures=values.whole(
                "max_consecutive_failures", default=DEFAULT_MAX_CONSECUTIVE_FAILURES
            ),
        )


def check_config(config: Mapping[str, Any]) -> None:
    """Each setting `[handler_settings.catalogue_walk]` holds, read as a walk reads it, so that a
    bad one stops startup rather than failing every walk. Raises ValueError naming it. Settings
    left out are not asked for: the key may come later (the system job waits for it)."""
    unknown = set(config) - set(PARAMS["properties"])
    if unknown:
        raise ValueError(f"{CONFIG_TABLE}: unknown {', '.join(sorted(unknown))}")
    values = _Values({}, config)
    for name in config:
        kind = PARAMS["properties"][name]["type"]
        if name == "base_url":
            values.url(name)
        elif name == "api_key":
            values.key(name)
        elif kind == "integer":
            values.whole(name)
        elif kind == "number":
            values.number(name, default=0.0)
        else:
            values.text(name)
    if "base_url" in config and "daily_quota" not in config:
        raise ValueError(QUOTA_REQUIRED)


def _configured_vendor(values: _Values, base_url: str) -> dict[str, Any]:
    """The configured vendor: its key, and its quota, which a job may lower, never raise or
    rename (every job using that vendor shares the one quota the vendor grants)."""
    if "quota_key" in values.params:
        raise ValueError(
            "params.quota_key: only with a base_url of the job's own (the configured vendor's "
            "quota is shared by every job using it)"
        )
    api_key = values.key("api_key")
    if "daily_quota" not in values.config:
        # Else each job would choose its own limit on the one counter they all share.
        raise ValueError(QUOTA_REQUIRED)
    daily_quota = values.whole("daily_quota")
    if "daily_quota" in values.params and "daily_quota" in values.config:
        configured = values.whole("daily_quota", params=False)
        if daily_quota > configured:
            raise ValueError(
                f"params.daily_quota: at most the configured {configured} "
                f"({CONFIG_TABLE}.daily_quota)"
            )
    return {
        "base_url": base_url,
        "api_key": api_key,
        "daily_quota": daily_quota,
        "quota_key": values.text("quota_key", default=quota_key_of(base_url)),
    }


def _own_vendor(values: _Values, base_url: str) -> dict[str, Any]:
    """A vendor the job names itself: the configured key is never sent there, nor the
    configured quota applied; the job brings both."""
    for name in ("api_key", "daily_quota"):
        if name not in values.params:
            raise ValueError(
                f"params.{name}: required with a base_url of the job's own (the configured "
                f"{name} goes only with {CONFIG_TABLE}.base_url)"
            )
    quota_key = values.text("quota_key", default=quota_key_of(base_url), config=False)
    if quota_key == values.configured_quota_key():
        raise ValueError(
            f"params.quota_key: {quota_key!r} is the configured vendor's quota, which a job's "
            "own key and limit may not spend"
        )
    return {
        "base_url": base_url,
        "api_key": values.key("api_key", config=False),
        "daily_quota": values.whole("daily_quota", config=False),
        "quota_key": quota_key,
    }


def quota_key_of(base_url: str) -> str:
    """The vendor's host and port: however the URL spells them (case, a trailing dot, the
    default port, an IPv6 address's forms), one vendor, one quota."""
    _, host, port = vendor_of(base_url)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def vendor_of(base_url: str) -> tuple[str, str, int]:
    """(scheme, host, port) as the HTTP client will dial them: the host as yarl encodes it for
    aiohttp (IDNA 2008: `faß.de` is not `fass.de`), lower case, without a trailing dot, an IP
    address in one form."""
    url = yarl.URL(base_url)
    host = (url.raw_host or "").rstrip(".")
    with contextlib.suppress(ValueError):
        host = ipaddress.ip_address(host).compressed
    return url.scheme, host.lower(), url.port or (443 if url.scheme == "https" else 80)


_REQUIRED = object()


class _Values:
    """Looks a setting up in the params, then in the configuration, and checks it against the
    schema, naming where it came from."""

    def __init__(self, params: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        self.params = params
        self.config = config

    def own_vendor(self, base_url: str) -> bool:
        """The params name a vendor other than the configured one: another scheme, host or
        port (a path of the configured vendor's is still that vendor, with its key and quota)."""
        if "base_url" not in self.params or "base_url" not in self.config:
            return "base_url" not in self.config
        return vendor_of(base_url) != vendor_of(self.url("base_url", params=False))

    def configured_quota_key(self) -> str | None:
        if "base_url" not in self.config:
            return None
        default = quota_key_of(self.url("base_url", params=False))
        return str(self.text("quota_key", default=default, params=False))

    def _lookup(
        self, name: str, default: Any, *, params: bool = True, config: bool = True
    ) -> tuple[Any, str]:
        if params and name in self.params:
            return self.params[name], f"params.{name}"
        if config and name in self.config:
            return self.config[name], f"{CONFIG_TABLE}.{name}"
        if default is _REQUIRED:
            raise ValueError(f"params.{name}: required (or set {CONFIG_TABLE}.{name})")
        return default, ""

    def text(
        self, name: str, default: Any = _REQUIRED, *, params: bool = True, config: bool = True
    ) -> Any:
        value, where = self._lookup(name, default, params=params, config=config)
        if where and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{where}: a non-empty string")
        return value

    def key(self, name: str, *, config: bool = True) -> str:
        """A credential that goes into a header: no whitespace or control characters (a key
        pasted with its trailing newline would fail every call, one paid unit at a time)."""
        value, where = self._lookup(name, _REQUIRED, config=config)
        if not isinstance(value, str) or not value or not value.isprintable() or " " in value:
            raise ValueError(f"{where}: a key without spaces or control characters")
        return value

    def url(self, name: str, *, params: bool = True) -> str:
        value, where = self._lookup(name, _REQUIRED, params=params)
        if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(f"{where}: an http:// or https:// URL")
        url = urlsplit(value)
        try:
            url.port  # noqa: B018 -- reading it checks it
            yarl.URL(value)  # what aiohttp will make of it
        except ValueError:
            raise ValueError(f"{where}: not a URL aiohttp can call (host or port)") from None
        if not url.hostname:
            raise ValueError(f"{where}: the URL names no host")
        if url.username is not None or url.password is not None:
            raise ValueError(f"{where}: no user or password in the URL (the key is api_key)")
        if url.query or url.fragment or value.rstrip("/").endswith(("?", "#")):
            # The part's path is appended: after a ? or # every part would be the same request.
            raise ValueError(f"{where}: no query or fragment in the base URL")
        return value.rstrip("/")

    def whole(
        self, name: str, default: Any = _REQUIRED, *, params: bool = True, config: bool = True
    ) -> Any:
        value, where = self._lookup(name, default, params=params, config=config)
        if not where:
            return value
        number = as_number(value)
        schema = PARAMS["properties"][name]
        if number is None or number != int(number) or not _within(number, schema):
            raise ValueError(f"{where}: {_describe(schema, 'a whole number')}")
        return int(number)

    def number(self, name: str, default: float) -> float:
        value, where = self._lookup(name, default)
        if not where:
            return float(value)
        number = as_number(value)
        schema = PARAMS["properties"][name]
        if number is None or not _within(number, schema):
            raise ValueError(f"{where}: {_describe(schema, 'a number')}")
        return number


def as_number(value: Any) -> float | None:
    """A finite number, or a string holding one (the environment's settings are strings, and
    vendors write prices as either)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    try:
        number = float(value) if isinstance(value, int | float) else math.nan
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if math.isfinite(number) else None


def _within(number: float, schema: Mapping[str, Any]) -> bool:
    if "minimum" in schema and number < schema["minimum"]:
        return False
    if "exclusiveMinimum" in schema and number <= schema["exclusiveMinimum"]:
        return False
    return not ("maximum" in schema and number > schema["maximum"])


def _describe(schema: Mapping[str, Any], kind: str) -> str:
    bounds = []
    if "minimum" in schema:
        bounds.append(f">= {schema['minimum']:,}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']:,}")
    if "maximum" in schema:
        bounds.append(f"<= {schema['maximum']:,}")
    return f"{kind} {' and '.join(bounds)}".strip()
