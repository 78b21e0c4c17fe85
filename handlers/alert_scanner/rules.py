"""What each rule type x operator pair means: pure functions over canonical values.

docs/alert-rules.md is the table of these semantics; this module is its implementation and the
tests walk every pair of it. In short:

- A rule watches one value of its part (the price, the risk score or level, a compliance flag,
  the lifecycle stage, the set of alternates), always in its canonical form (normalize.py).
- The *previous* value is the rule's `cursor` (the value its last check saw), or, before the first
  check, its `baseline`; with neither, the first check only arms the rule: it records the cursor
  and fires nothing.
- A rule fires only on a change since the previous value. For a comparison (`gt` ... `neq`) it
  fires when the condition holds now and did not hold for the previous value: crossing a level,
  not staying above it. `changed` fires on any change. New alternates fire on the part numbers
  that are in the current set and not in the previous one.
- Every check moves the cursor to the current value, so the same data never fires twice.

evaluate() raises NormalizationError (a value without a canonical form) or InvalidRule (a type,
an operator or a pair that means nothing); the scan records either on the rule.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_UP, Context, Decimal
from enum import Enum, StrEnum
from itertools import islice
from typing import Any, Generic, TypeVar

from tickd.handlers.alert_scanner import normalize
from tickd.handlers.alert_scanner.normalize import NormalizationError

V = TypeVar("V")
Part = Mapping[str, Any]


class RuleType(StrEnum):
    PRICE_CHANGE = "price_change"
    RISK = "risk"
    COMPLIANCE = "compliance"
    LIFECYCLE = "lifecycle"
    NEW_ALTERNATE = "new_alternate"


class Operator(StrEnum):
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    EQ = "eq"
    NEQ = "neq"
    CHANGED = "changed"


class RiskDimension(StrEnum):
    SCORE = "score"
    LEVEL = "level"


class InvalidRule(ValueError):
    """A rule that means nothing: an unknown type or operator, a pair that is not defined, a
    threshold the pair needs and does not have."""


# The pairs that mean something; any other pair is reported on the rule, never evaluated.
VALID_OPERATORS: dict[RuleType, frozenset[Operator]] = {
    RuleType.PRICE_CHANGE: frozenset(
        {Operator.GT, Operator.GTE, Operator.LT, Operator.LTE, Operator.CHANGED}
    ),
    RuleType.RISK: frozenset(Operator),
    RuleType.COMPLIANCE: frozenset({Operator.EQ, Operator.NEQ, Operator.CHANGED}),
    RuleType.LIFECYCLE: frozenset(Operator),
    RuleType.NEW_ALTERNATE: frozenset({Operator.GT, Operator.GTE, Operator.EQ, Operator.CHANGED}),
}

# Type names as the product spells them, after `_name_key`: camelCase, kebab-case, any case.
TYPE_NAMES: dict[str, tuple[RuleType, RiskDimension | None]] = {
    "price_change": (RuleType.PRICE_CHANGE, None),
    "price": (RuleType.PRICE_CHANGE, None),
    "risk": (RuleType.RISK, None),
    "risk_score": (RuleType.RISK, RiskDimension.SCORE),
    "risk_level": (RuleType.RISK, RiskDimension.LEVEL),
    "compliance": (RuleType.COMPLIANCE, None),
    "compliance_flag": (RuleType.COMPLIANCE, None),
    "lifecycle": (RuleType.LIFECYCLE, None),
    "lifecycle_stage": (RuleType.LIFECYCLE, None),
    "new_alternate": (RuleType.NEW_ALTERNATE, None),
    "new_alternates": (RuleType.NEW_ALTERNATE, None),
    "alternate": (RuleType.NEW_ALTERNATE, None),
    "alternates": (RuleType.NEW_ALTERNATE, None),
}
OPERATOR_NAMES: dict[str, Operator] = {
    **{op.value: op for op in Operator},
    ">": Operator.GT,
    ">=": Operator.GTE,
    "<": Operator.LT,
    "<=": Operator.LTE,
    "=": Operator.EQ,
    "==": Operator.EQ,
    "ne": Operator.NEQ,
    "!=": Operator.NEQ,
    "<>": Operator.NEQ,
    "change": Operator.CHANGED,
}
COMPARISONS: dict[Operator, Callable[[Any, Any], bool]] = {
    Operator.GT: operator.gt,
    Operator.GTE: operator.ge,
    Operator.LT: operator.lt,
    Operator.LTE: operator.le,
    Operator.EQ: operator.eq,
    Operator.NEQ: operator.ne,
}
OPERATOR_WORDS = {
    Operator.GT: "more than",
    Operator.GTE: "at least",
    Operator.LT: "less than",
    Operator.LTE: "at most",
    Operator.EQ: "equal to",
    Operator.NEQ: "other than",
}
# Price changes are compared at this many decimals of a percent: 4.00 -> 4.40 is exactly 10 %,
# not 10.000000000000009 % as floats would have it.
PERCENT_DECIMALS = 6
# From this size on a percentage is shown in three significant digits (+1.23e+32%).
PERCENT_PLAIN_MAX = 1e6
# How much of a list or a map (and of those in it) a message shows.
DISPLAY_MAX_ITEMS = 50
DISPLAY_MAX_DEPTH = 4
# Ten significant digits at any exponent: a Decimal beyond a float's range, shown.
_TEN_DIGITS = Context(prec=10, Emax=MAX_EMAX, Emin=MIN_EMIN)

# How a stored cursor or baseline is named in an error message.
STORED = "cursor or baseline"
# Symbols people read without the code; any other currency is written after the amount.
CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}
# From this amount on, money is shown in ten significant digits ($1e+30), not digit by digit.
MONEY_PLAIN_MAX = 1e15
_CURRENCY_BY_SYMBOL = {symbol: code for code, symbol in CURRENCY_SYMBOLS.items()}

_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-]+")


class Keep(Enum):
    """The rule's baseline stays as it is."""

    BASELINE = "keep"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What one check decided. Values are in their stored (JSON) canonical forms."""

    fired: bool
    # The rule's new cursor: the current value, always written, so the same data never fires twice.
    cursor: Any
    # The previous value the check compared with (None when the check only armed the rule).
    previous: Any
    # The rule's new baseline (price rules move it to the price that fired), or Keep.BASELINE.
    baseline: Any = Keep.BASELINE
    # What the rule watches, for messages: "price", "risk level", "ROHS"...
    field: str = ""
    # Why it fired, in words; empty when it did not.
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Watch(Generic[V]):
    """One compiled rule: how to read its value and when it fires, all in canonical forms."""

    field: str
    # The part's current value; NormalizationError when the part has none.
    observe: Callable[[Part], V]
    # A stored cursor or baseline, in the same form as `observe` returns.
    read: Callable[[Any], V]
    # Whether going from the previous value to the current one fires the rule.
    fires: Callable[[V, V], bool]
    # Why it fired, for the notification.
    explain: Callable[[V, V], str]
    # The JSON form kept as the cursor (and the baseline).
    stored: Callable[[V], Any] = lambda value: value
    # Price rules measure from their baseline, which moves to the price that fired.
    rebase_on_fire: bool = False
    # A price rule without a baseline takes the current price as one and fires nothing.
    adopt_baseline: bool = False


def evaluate(rule: Mapping[str, Any], part: Part) -> Verdict:
    """Check one rule against its part's current values."""
    watch = compile_rule(rule, currency=part_currency(part))
    current = watch.observe(part)
    cursor = watch.stored(current)
    previous = previous_value(rule, watch)
    if previous is None or watch.adopt_baseline:
        baseline = cursor if watch.adopt_baseline else Keep.BASELINE
        return Verdict(fired=False, cursor=cursor, previous=None, baseline=baseline)
    fired = watch.fires(previous, current)
    return Verdict(
        fired=fired,
        cursor=cursor,
        previous=watch.stored(previous),
        baseline=cursor if fired and watch.rebase_on_fire else Keep.BASELINE,
        field=watch.field,
        reason=watch.explain(previous, current) if fired else "",
    )


def previous_value(rule: Mapping[str, Any], watch: Watch[V]) -> V | None:
    """The cursor, else the baseline, else None (the first check arms the rule).

    The cursor is the scanner's own bookkeeping: one it cannot read (the rule was edited to
    watch another value, say) is ignored rather than blocking the rule for good. A baseline is
    the product's, and one that cannot be read is an error."""
    cursor = rule.get("cursor")
    if cursor is not None:
        try:
            return watch.read(cursor)
        except NormalizationError:
            pass
    baseline = rule.get("baseline")
    return None if baseline is None else watch.read(baseline)


# -- compiling a rule ---------------------------------------------------------------------------


def compile_rule(rule: Mapping[str, Any], *, currency: str | None = None) -> Watch[Any]:
    """The rule's type, operator and threshold (and, for prices, baseline) made into a Watch;
    InvalidRule for a pair VALID_OPERATORS does not list. `currency`: the part's price's, in
    which a price rule's reason gives its baseline."""
    rule_type, dimension = parse_type(rule.get("type"))
    op = parse_operator(rule.get("operator"))
    if op not in VALID_OPERATORS[rule_type]:
        raise InvalidRule(f"operator {op} is not defined for {rule_type} rules")
    builders: dict[RuleType, Callable[[Operator, Mapping[str, Any]], Watch[Any]]] = {
        RuleType.PRICE_CHANGE: lambda op, rule: _price_watch(op, rule, currency),
        RuleType.RISK: lambda op, rule: _risk_watch(op, rule, dimension),
        RuleType.COMPLIANCE: _compliance_watch,
        RuleType.LIFECYCLE: _lifecycle_watch,
        RuleType.NEW_ALTERNATE: _alternates_watch,
    }
    return builders[rule_type](op, rule)


def parse_type(value: Any) -> tuple[RuleType, RiskDimension | None]:
    """`priceChange`, `PRICE_CHANGE` and `price-change` are all price_change."""
    found = TYPE_NAMES.get(_name_key(value)) if isinstance(value, str) else None
    if found is None:
        raise InvalidRule(f"type: {value!r} is not a rule type")
    return found


def parse_operator(value: Any) -> Operator:
    """Names in any case (`GT`, `gte`) or symbols (`>`, `>=`, `!=`)."""
    found = OPERATOR_NAMES.get(value.strip().lower()) if isinstance(value, str) else None
    if found is None:
        raise InvalidRule(f"operator: {value!r} is not an operator")
    return found


def _name_key(name: str) -> str:
    return _SEPARATORS.sub("_", _CAMEL_HUMP.sub("_", name.strip())).lower()


def _threshold(rule: Mapping[str, Any], op: Operator) -> Any:
    threshold = rule.get("threshold")
    if threshold is None:
        raise InvalidRule(f"operator {op} needs a threshold")
    return threshold


def _part_value(name: str, normalizer: Callable[[Any, str], V]) -> Callable[[Part], V]:
    """Reads field `name` of the part; a part without it is an error, not a value of None."""

    def observe(part: Part) -> V:
        if part.get(name) is None:
            raise NormalizationError(f"the part has no {name}")
        return normalizer(part[name], name)

    return observe


def _stored_value(normalizer: Callable[[Any, str], V]) -> Callable[[Any], V]:
    """Reads a stored cursor or baseline with the normalizer of the current value."""
    return lambda value: normalizer(value, STORED)


def _crossing(op: Operator, key: Callable[[V], Any], limit: Any) -> Callable[[V, V], bool]:
    """Fires when `key(value) op limit` holds now and did not for the previous value."""
    compare = COMPARISONS[op]

    def fires(previous: V, current: V) -> bool:
        return compare(key(current), limit) and not compare(key(previous), limit)

    return fires


def _changed(previous: Any, current: Any) -> bool:
    return bool(previous != current)


def _level_watch(
    op: Operator,
    rule: Mapping[str, Any],
    *,
    field: str,
    source: str,
    normalizer: Callable[[Any, str], V],
    rank: Callable[[V], Any],
) -> Watch[V]:
    """A single value compared with a threshold of the same kind (a score, a level, a stage)."""
    fires: Callable[[V, V], bool]
    if op is Operator.CHANGED:
        fires, explain = _changed, _explain_change(field)
    else:
        limit = normalizer(_threshold(rule, op), "threshold")
        fires = _crossing(op, rank, rank(limit))
        explain = _explain_limit(field, op, display(limit))
    return Watch(
        field=field,
        observe=_part_value(source, normalizer),
        read=_stored_value(normalizer),
        fires=fires,
        explain=explain,
    )


def _explain_change(field: str) -> Callable[[Any, Any], str]:
    return lambda previous, current: f"the {field} changed"


def _explain_limit(field: str, op: Operator, limit: str) -> Callable[[Any, Any], str]:
    return lambda previous, current: f"the {field} is now {OPERATOR_WORDS[op]} {limit}"


# -- the five types -----------------------------------------------------------------------------


def _price_watch(op: Operator, rule: Mapping[str, Any], currency: str | None) -> Watch[float]:
    """Percent change of the price against the rule's baseline, signed: `gt 10` is a rise of
    more than 10 %, `lt -10` a fall of more than 10 %. `changed` is any change of the price.
    The reason gives the baseline as the email gives the price: in `currency`."""
    observe = _part_value("price", normalize.price)
    read = _stored_value(normalize.price)
    if op is Operator.CHANGED:
        return Watch(
            field="price",
            observe=observe,
            read=read,
            fires=_changed,
            explain=_explain_change("price"),
            rebase_on_fire=True,
        )
    limit = normalize.percent(_threshold(rule, op))
    if rule.get("baseline") is None:
        return Watch(
            field="price",
            observe=observe,
            read=read,
            fires=lambda previous, current: False,
            explain=_explain_change("price"),
            adopt_baseline=True,
        )
    baseline = normalize.price(rule["baseline"], "baseline")
    if baseline == 0:
        raise NormalizationError("baseline: a price change against 0 has no percentage")

    def change(price: float) -> float:
        return round((price - baseline) / baseline * 100, PERCENT_DECIMALS)

    def explain(previous: float, current: float) -> str:
        return (
            f"{percent_text(change(current))} against the baseline "
            f"{format_money(baseline, currency)}, "
            f"{OPERATOR_WORDS[op]} {limit:+g}%"
        )

    return Watch(
        field="price",
        observe=observe,
        read=read,
        fires=_crossing(op, change, limit),
        explain=explain,
        rebase_on_fire=True,
    )


def _risk_watch(
    op: Operator, rule: Mapping[str, Any], dimension: RiskDimension | None
) -> Watch[Any]:
    """The risk score (a number) or the risk level (Low < Medium < High < Critical). The type
    name may say which (`risk_score`, `risk_level`); a plain `risk` rule watches the score when
    its threshold is a number and the level otherwise, and `changed` watches the level."""
    dimension = dimension or _risk_dimension(op, rule)
    if dimension is RiskDimension.SCORE:
        return _level_watch(
            op,
            rule,
            field="risk score",
            source="riskScore",
            normalizer=normalize.score,
            rank=lambda score: score,
        )
    return _level_watch(
        op,
        rule,
        field="risk level",
        source="riskLevel",
        normalizer=normalize.risk_level,
        rank=normalize.RISK_LEVELS.index,
    )


def _risk_dimension(op: Operator, rule: Mapping[str, Any]) -> RiskDimension:
    if op is Operator.CHANGED:
        return RiskDimension.LEVEL
    try:
        normalize.score(_threshold(rule, op), "threshold")
    except NormalizationError:
        return RiskDimension.LEVEL
    return RiskDimension.SCORE


def _lifecycle_watch(op: Operator, rule: Mapping[str, Any]) -> Watch[str]:
    """The stage, ordered Preview < Active < NRND < LTB < EOL < Obsolete."""
    return _level_watch(
        op,
        rule,
        field="lifecycle stage",
        source="lifecycle",
        normalizer=normalize.lifecycle_stage,
        rank=normalize.LIFECYCLE_STAGES.index,
    )


def _compliance_watch(op: Operator, rule: Mapping[str, Any]) -> Watch[Any]:
    """One flag (threshold `"RoHS"`, `"RoHS=no"` or `{"flag": "RoHS", "value": "no"}`) or, with
    no threshold, all of them (`changed` only)."""
    flag, value = _flag_threshold(rule.get("threshold"))
    if flag is None:
        if op is not Operator.CHANGED:
            raise InvalidRule(f"operator {op} needs a threshold naming a flag and a value")
        return _all_flags_watch()
    if op is not Operator.CHANGED and value is None:
        raise InvalidRule(f"operator {op} needs a flag value in its threshold, e.g. RoHS=NO")
    fires: Callable[[str, str], bool]
    if op is Operator.CHANGED:
        fires, explain = _changed, _explain_change(f"{flag} flag")
    else:
        fires = _crossing(op, lambda flag_value: flag_value, value)
        explain = _explain_limit(f"{flag} flag", op, str(value))
    return Watch(
        field=f"{flag} flag",
        observe=_one_flag(flag),
        read=_stored_value(normalize.flag_value),
        fires=fires,
        explain=explain,
    )


def _flag_threshold(threshold: Any) -> tuple[str | None, str | None]:
    """(flag, value) from a threshold; either may be None."""
    if threshold is None:
        return None, None
    if isinstance(threshold, Mapping):
        flag, value = threshold.get("flag"), threshold.get("value")
    elif isinstance(threshold, str):
        flag, _, value = (part.strip() for part in threshold.partition("="))
    else:
        raise NormalizationError(f"threshold: {threshold!r} names no compliance flag")
    name = normalize.flag_name(flag, "threshold flag")
    return name, None if value in (None, "") else normalize.flag_value(value, "threshold value")


def _one_flag(flag: str) -> Callable[[Part], str]:
    def observe(part: Part) -> str:
        flags = normalize.compliance_flags(_part_value("compliance", _as_is)(part))
        if flag not in flags:
            raise NormalizationError(f"the part has no {flag} compliance flag")
        return flags[flag]

    return observe


def _all_flags_watch() -> Watch[dict[str, str]]:
    """Fires when a flag present before and now has another value; a flag appearing or
    disappearing alone does not (a pipeline dropping a field is not a flip)."""

    def flipped(previous: dict[str, str], current: dict[str, str]) -> list[str]:
        return [flag for flag in current if flag in previous and previous[flag] != current[flag]]

    def explain(previous: dict[str, str], current: dict[str, str]) -> str:
        flips = [
            f"{flag} {previous[flag]} -> {current[flag]}" for flag in flipped(previous, current)
        ]
        return "compliance flags flipped: " + ", ".join(flips)

    return Watch(
        field="compliance flags",
        observe=_part_value("compliance", normalize.compliance_flags),
        read=_stored_value(normalize.compliance_flags),
        fires=lambda previous, current: bool(flipped(previous, current)),
        explain=explain,
    )


def _alternates_watch(op: Operator, rule: Mapping[str, Any]) -> Watch[frozenset[str]]:
    """New part numbers: those in the current set and not in the previous one. `changed`: at
    least one; `gt N` / `gte N`: more than / at least N (and at least one); `eq PN`: PN is one
    of them. Removals alone never fire."""
    matches = _new_alternates_match(op, rule)

    def explain(previous: frozenset[str], current: frozenset[str]) -> str:
        new = sorted(current - previous)
        return f"{len(new)} new alternate{'s' if len(new) > 1 else ''}: {', '.join(new)}"

    return Watch(
        field="alternates",
        observe=_part_value("alternates", normalize.alternates),
        read=_stored_value(normalize.alternates),
        fires=lambda previous, current: matches(current - previous),
        explain=explain,
        stored=sorted,
    )


def _new_alternates_match(
    op: Operator, rule: Mapping[str, Any]
) -> Callable[[frozenset[str]], bool]:
    """Whether a set of new part numbers is what the rule waits for."""
    if op is Operator.CHANGED:
        return bool
    if op is Operator.EQ:
        wanted = normalize.part_number(_threshold(rule, op), "threshold")
        return lambda new: wanted in new
    limit, compare = normalize.count(_threshold(rule, op)), COMPARISONS[op]
    return lambda new: bool(new) and compare(len(new), limit)


def _as_is(value: Any, what: str) -> Any:
    return value


# -- showing values -----------------------------------------------------------------------------


def percent_text(value: float) -> str:
    """A signed percentage as people write it: whole above 10 % (+15%), one decimal above 1 %
    (+4.4%), two below (+0.25%); halves round away from zero, as people round. From
    PERCENT_PLAIN_MAX on, three significant digits (+1.23e+32%): every digit beyond those is
    noise; an infinite one is +inf% (or -inf%), a NaN "?%"."""
    if math.isnan(value):
        return "?%"
    if value == 0:
        return "0%"
    size = abs(value)
    sign = "-" if value < 0 else "+"
    if size >= PERCENT_PLAIN_MAX:
        return f"{sign}{size:.3g}%"
    places = 0 if size >= 10 else 1 if size >= 1 else 2
    rounded = Decimal(repr(size)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"{'-' if value < 0 and rounded else '+'}{rounded}%"


def format_money(value: Any, currency: str | None) -> str:
    """`$0.71`, `€3.20`, `12.50 CHF`; without a currency, just two decimals; from
    MONEY_PLAIN_MAX on, ten significant digits (`$1e+30`)."""
    amount = finite_number(value)
    if amount is None:
        return display(value)
    shown = f"{amount:,.2f}" if abs(amount) < MONEY_PLAIN_MAX else number_text(amount)
    code = currency.strip().upper() if isinstance(currency, str) else ""
    if code in CURRENCY_SYMBOLS:
        return f"{CURRENCY_SYMBOLS[code]}{shown}"
    if len(code) == 3 and code.isascii() and code.isalpha():
        return f"{shown} {code}"
    return shown


def currency_of(price_currency: Any, price: Any) -> str | None:
    """The ISO 4217 code a part's price is in: its `priceCurrency` when that is a code, else
    the symbol its price string starts with (`"$2.95"` is USD, shown `$2.95` again); None when
    the data says neither. `¥` names two currencies (JPY, CNY), so it names none here."""
    if isinstance(price_currency, str):
        code = price_currency.strip().upper()
        if len(code) == 3 and code.isascii() and code.isalpha():
            return code
    symbol = price.strip()[:1] if isinstance(price, str) else ""
    return _CURRENCY_BY_SYMBOL.get(symbol)


def part_currency(part: Part) -> str | None:
    """The currency of the part's price (currency_of its `priceCurrency` and `price`)."""
    return currency_of(part.get("priceCurrency"), part.get("price"))


def finite_number(value: Any) -> float | None:
    """A finite float from an int or a float; None for anything else (shown as it is)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float's range
        return None
    # + 0.0: -0.0 is shown as 0.
    return number + 0.0 if math.isfinite(number) else None


def display(value: Any, *, depth: int = 0) -> str:
    """A stored value in words, for messages and emails: any value, never an error. Numbers of
    any size in at most ten significant digits; lists and maps shown to DISPLAY_MAX_ITEMS
    items and DISPLAY_MAX_DEPTH levels."""
    if value is None:
        return "(none)"
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, int | float | Decimal) or hasattr(value, "to_decimal"):
        return number_text(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return _display_items(value, depth)
    return _any_text(value)


def number_text(value: Any) -> str:
    """A number in at most ten significant digits, whatever its type and size: `0.62`, `100`,
    `1e+30`, `1e+5000`, `inf`, `nan`; -0 is `0`."""
    number = value.to_decimal() if hasattr(value, "to_decimal") else value
    if isinstance(number, int) and not isinstance(number, bool):
        return str(number) if abs(number) < 10**15 else _decimal_text(Decimal(number))
    if isinstance(number, Decimal):
        return _decimal_text(number)
    if isinstance(number, float):
        return _float_text(number)
    return _any_text(value)


def _float_text(number: float) -> str:
    return "0" if number == 0 else f"{number:.10g}"


def _decimal_text(number: Decimal) -> str:
    """As a float would be shown, or, beyond a float's range, in the Decimal's own exponent."""
    if number.is_nan():
        return "nan"
    if number.is_infinite():
        return "-inf" if number.is_signed() else "inf"
    as_float = float(number)
    if math.isfinite(as_float) and (as_float != 0 or number.is_zero()):
        return _float_text(as_float)
    return format(number.normalize(_TEN_DIGITS), "g")


def _display_items(value: Any, depth: int) -> str:
    if depth >= DISPLAY_MAX_DEPTH:
        return "…"
    pairs = value.items() if isinstance(value, Mapping) else ((None, item) for item in value)
    shown = [
        display(item, depth=depth + 1)
        if key is None
        else f"{key}: {display(item, depth=depth + 1)}"
        for key, item in islice(pairs, DISPLAY_MAX_ITEMS)
    ]
    if len(value) > DISPLAY_MAX_ITEMS:
        shown.append(f"and {len(value) - DISPLAY_MAX_ITEMS} more")
    return ", ".join(shown) or "(none)"


def _any_text(value: Any) -> str:
    """`str(value)`, or its type's name when even that fails (an int of 5000 digits)."""
    try:
        return str(value)
    except Exception:  # any value at all is shown, never raised on
        return f"({type(value).__name__})"
