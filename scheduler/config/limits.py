"""What a setting may hold: `Limits`, the ranges settings are declared with (`setting`), and
`ConfigError`, which names the setting a bad value was given for."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


class ConfigError(ValueError):
    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"configuration: {setting}: {reason}")
        self.setting = setting


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
        if self.schemes and url_scheme(value) not in self.schemes:
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


def url_scheme(url: str) -> str | None:
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
STORE_SCHEMES = ("sqlite", "mongodb", "mongodb+srv", "postgresql", "postgres")
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
ANY_URL = Limits(accepts=url_scheme, means="a URL with a scheme, e.g. mongodb://host/database")


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
