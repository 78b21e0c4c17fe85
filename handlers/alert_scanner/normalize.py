"""One canonical form per field, before any operator runs.

The product's data comes from a TypeScript backend, a web UI and several upstream pipelines, so
the same value arrives as `"10"` and `10`, `Low` and `LOW`, `yes` and `YES`, `" 4.20 "`, null, or
not at all. Every current value, baseline, cursor and threshold goes through one of these
functions first; an operator only ever compares canonical forms.

A value that has no canonical form raises NormalizationError, which makes that rule's check an
error recorded on the rule: never a crash of the scan, never an alert. Nothing here guesses: a
decimal comma (`"4,20"`), an unknown risk level or lifecycle stage, a missing field is an error,
not a default.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

# Ordered from least to most severe: `gt High` means Critical.
RISK_LEVELS = ("Low", "Medium", "High", "Critical")
# Ordered along a part's life: `gte EOL` means EOL or Obsolete.
LIFECYCLE_STAGES = ("Preview", "Active", "NRND", "LTB", "EOL", "Obsolete")
# Every spelling accepted for a stage, as a key (see `_key`): lower case, words split on spaces.
LIFECYCLE_ALIASES = {
    "Preview": ("preview", "new", "new product", "introduction", "pre release", "prerelease"),
    "Active": ("active", "production", "in production", "mass production"),
    "NRND": ("nrnd", "not recommended", "not recommended for new designs"),
    "LTB": ("ltb", "last time buy", "last buy"),
    "EOL": ("eol", "end of life"),
    "Obsolete": ("obsolete", "obs"),
}
FLAG_SYNONYMS = {"Y": "YES", "TRUE": "YES", "N": "NO", "FALSE": "NO"}
DEFAULT_COOLDOWN_MINUTES = 60.0

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_CURRENCY_SYMBOLS = "$€£¥"
_SEPARATORS = re.compile(r"[\s_\-]+")
_NOT_ALPHANUMERIC = re.compile(r"[^0-9a-z]+")
_WHITESPACE = re.compile(r"\s+")
_LIST_SEPARATORS = re.compile(r"[,;]")
# local@domain.tld, the domain with a dot neither first nor last. Linear: each part ends at a
# character the next one needs (the first dot of the domain after its first character), so no
# part gives characters back to try again.
_EMAIL_CHAR = r"[^@\s<>,;\"()\[\]\\]"
_EMAIL = re.compile(rf"{_EMAIL_CHAR}++@{_EMAIL_CHAR}(?:(?!\.){_EMAIL_CHAR})*+\.{_EMAIL_CHAR}++")
_STAGE_BY_KEY = {alias: stage for stage, aliases in LIFECYCLE_ALIASES.items() for alias in aliases}
_PART_NUMBER_FIELDS = ("partNumber", "mpn", "partId")


class NormalizationError(ValueError):
    """A value with no canonical form: the rule's check is an error, not an alert."""


def number(value: Any, what: str) -> float:
    """A finite float from a number, a Decimal (or BSON Decimal128) or a numeric string with
    surrounding whitespace. Booleans, NaN, infinities and `"4,20"` are refused."""
    if isinstance(value, bool) or value is None:
        raise NormalizationError(f"{what}: {_shown(value)} is not a number")
    if hasattr(value, "to_decimal"):  # bson.Decimal128, without importing bson here
        value = value.to_decimal()
    if isinstance(value, int | float | Decimal):
        return _finite(value, what, value)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return _finite(value.strip(), what, value)
    raise NormalizationError(f"{what}: {_shown(value)} is not a number")


def _finite(number: int | float | Decimal | str, what: str, value: Any) -> float:
    """The number as a float, refused when no finite float holds it: NaN, an infinity, an int
    or a Decimal beyond a float's range (which float() raises on or makes infinite)."""
    try:
        result = float(number)
    except (OverflowError, ValueError):  # 10**400; a signalling NaN
        result = math.nan
    if not math.isfinite(result):
        raise NormalizationError(f"{what}: {_shown(value)} is not a finite number")
    return result


def price(value: Any, what: str = "price") -> float:
    """A non-negative float; a leading currency symbol ($ € £ ¥) is dropped."""
    if isinstance(value, str):
        value = value.strip().lstrip(_CURRENCY_SYMBOLS)
    result = number(value, what)
    if result < 0:
        raise NormalizationError(f"{what}: {_shown(value)} is negative")
    return result


def percent(value: Any, what: str = "threshold") -> float:
    """A percentage as a float: `10`, `"10"`, `"10 %"` and `"10%"` are all 10.0."""
    if isinstance(value, str):
        value = value.strip().removesuffix("%")
    return number(value, what)


def score(value: Any, what: str = "riskScore") -> float:
    return number(value, what)


def risk_level(value: Any, what: str = "riskLevel") -> str:
    """Title case, one of RISK_LEVELS: `LOW`, `low` and `" Low "` are all `Low`."""
    if isinstance(value, str):
        level = _WHITESPACE.sub(" ", value.strip()).title()
        if level in RISK_LEVELS:
            return level
    raise NormalizationError(f"{what}: {_shown(value)} is not one of {', '.join(RISK_LEVELS)}")


def lifecycle_stage(value: Any, what: str = "lifecycle") -> str:
    """One spelling per stage (LIFECYCLE_STAGES), whatever the case and punctuation of the
    aliases in LIFECYCLE_ALIASES: `end-of-life`, `EOL` and `End of Life` are all `EOL`."""
    stage = _STAGE_BY_KEY.get(_key(value)) if isinstance(value, str) else None
    if stage is None:
        raise NormalizationError(f"{what}: {_shown(value)} is not a known lifecycle stage")
    return stage


def flag_name(value: Any, what: str = "compliance flag") -> str:
    """Upper case, runs of spaces, `-` and `_` as one `_`: `RoHS` is `ROHS`."""
    if isinstance(value, str) and value.strip():
        return _SEPARATORS.sub("_", value.strip()).upper()
    raise NormalizationError(f"{what}: {_shown(value)} is not a flag name")


def flag_value(value: Any, what: str = "compliance flag") -> str:
    """Upper case: `yes` is `YES`; true/false (booleans or words) and Y/N are YES/NO, so a
    pipeline writing `true` and another writing `yes` agree. Other words (`EXEMPT`,
    `UNKNOWN`) are kept, upper-cased."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, str) and value.strip():
        word = _WHITESPACE.sub(" ", value.strip()).upper()
        return FLAG_SYNONYMS.get(word, word)
    raise NormalizationError(f"{what}: {_shown(value)} is not a flag value")


def compliance_flags(value: Any, what: str = "compliance") -> dict[str, str]:
    """Every flag of a part, names and values canonical, sorted by name. A flag whose value is
    null is unknown and left out; two spellings of one flag with different values are refused."""
    if not isinstance(value, Mapping):
        raise NormalizationError(f"{what}: {_shown(value)} is not a set of flags")
    flags: dict[str, str] = {}
    for name, raw in value.items():
        if raw is None:
            continue
        key, canonical = flag_name(name), flag_value(raw, f"{what}.{name}")
        if flags.setdefault(key, canonical) != canonical:
            raise NormalizationError(f"{what}: {key} is given twice, with different values")
    return dict(sorted(flags.items()))


def part_number(value: Any, what: str = "part number") -> str:
    """Upper case with all whitespace removed: `" lm 317t "` is `LM317T`. Punctuation is kept
    (`LM317T-DG` and `LM317TDG` can be different parts)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        canonical = _WHITESPACE.sub("", value).upper()
        if canonical:
            return canonical
    raise NormalizationError(f"{what}: {_shown(value)} is not a part number")


def alternates(value: Any, what: str = "alternates") -> frozenset[str]:
    """A set of part numbers from a list (of part numbers, or of objects with `partNumber`,
    `mpn` or `partId`) or from one string separated by commas or semicolons. An empty list is
    an empty set; null or a missing field is an error, because reading it as "no alternates"
    would make every alternate look new when the field comes back."""
    if isinstance(value, str):
        items: list[Any] = [item for item in _LIST_SEPARATORS.split(value) if item.strip()]
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(value)
    else:
        raise NormalizationError(f"{what}: {_shown(value)} is not a list of part numbers")
    return frozenset(_alternate(item, what) for item in items)


def _alternate(item: Any, what: str) -> str:
    if isinstance(item, Mapping):
        found = next((item[f] for f in _PART_NUMBER_FIELDS if item.get(f) is not None), None)
        return part_number(found, f"{what} item")
    return part_number(item, f"{what} item")


def count(value: Any, what: str = "threshold") -> int:
    """A non-negative whole number: `2`, `2.0` and `"2"` are 2; `2.5` is refused."""
    result = number(value, what)
    if result < 0 or not result.is_integer():
        raise NormalizationError(f"{what}: {_shown(value)} is not a whole number >= 0")
    return int(result)


def cooldown_minutes(value: Any, what: str = "cooldownMinutes") -> float:
    """Minutes between two checks of a rule; missing means DEFAULT_COOLDOWN_MINUTES."""
    if value is None:
        return DEFAULT_COOLDOWN_MINUTES
    result = number(value, what)
    if result < 0:
        raise NormalizationError(f"{what}: {_shown(value)} is negative")
    return result


def timestamp(value: Any, what: str = "time") -> datetime | None:
    """An aware UTC datetime from a datetime (naive ones are UTC, as BSON's) or an ISO 8601
    string (`Z` accepted); None when the value is missing."""
    if value is None:
        return None
    moment = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise NormalizationError(f"{what}: {_shown(value)} is not an ISO 8601 time") from None
    if not isinstance(moment, datetime):
        raise NormalizationError(f"{what}: {_shown(value)} is not a time")
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the first time a datetime holds
        raise NormalizationError(f"{what}: {_shown(value)} is out of range") from None


def truth(value: Any, *, default: bool, what: str = "flag") -> bool:
    """A boolean from true/false, 1/0 or the words true/false/yes/no (any case); None is the
    default."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes", "y", "1", "on"):
            return True
        if word in ("false", "no", "n", "0", "off"):
            return False
    raise NormalizationError(f"{what}: {_shown(value)} is not true or false")


def identifier(value: Any, what: str) -> str:
    """An id (a string, a number or a BSON ObjectId) as a stripped string."""
    if value is None or isinstance(value, bool | Mapping | list):
        raise NormalizationError(f"{what}: {_shown(value)} is not an id")
    try:
        text = str(value).strip()
    except ValueError:  # an int of more than 4300 digits
        raise NormalizationError(f"{what}: the id is too long") from None
    if not text:
        raise NormalizationError(f"{what}: the id is empty")
    return text


def email_address(value: Any, what: str = "email") -> str:
    """One plain address (`user@example.com`), stripped; anything that could carry a second
    address or a header (commas, angle brackets, newlines) is refused."""
    if isinstance(value, str) and _EMAIL.fullmatch(value.strip()):
        return value.strip()
    raise NormalizationError(f"{what}: {_shown(value)} is not an email address")


def _key(text: str) -> str:
    return _NOT_ALPHANUMERIC.sub(" ", text.lower()).strip()


def _shown(value: Any) -> str:
    """The value as an error message quotes it: short, one line."""
    try:
        text = repr(value)
    except ValueError:  # an int of more than 4300 digits
        return f"({type(value).__name__})"
    return text if len(text) <= 60 else text[:57] + "..."
