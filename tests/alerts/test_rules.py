"""Every rule type x operator pair (docs/alert-rules.md), each valid pair firing and staying quiet,
each undefined pair refused; and how the previous value, the baseline and bad values behave."""

from __future__ import annotations

from typing import Any

import pytest

from tests.alerts.builders import rule
from tickd.handlers.alert_scanner.normalize import NormalizationError
from tickd.handlers.alert_scanner.rules import (
    VALID_OPERATORS,
    InvalidRule,
    Keep,
    Operator,
    RuleType,
    Verdict,
    display,
    evaluate,
    parse_operator,
    parse_type,
)


def check(
    rule_type: str,
    operator: str,
    threshold: Any,
    previous: Any,
    part: dict[str, Any],
    **fields: Any,
) -> Verdict:
    return evaluate(rule("r1", rule_type, operator, threshold, cursor=previous, **fields), part)


# (type, operator, threshold, previous value (the cursor), the part's current values, fires)
PAIRS: list[tuple[str, str, Any, Any, dict[str, Any], bool]] = [
    # price change, signed percent against the baseline 100
    ("price_change", "gt", 10, 100, {"price": 111}, True),
    ("price_change", "gt", 10, 100, {"price": 110}, False),
    ("price_change", "gt", 10, 111, {"price": 115}, False),  # was above already
    ("price_change", "gte", 10, 100, {"price": "110"}, True),
    ("price_change", "gte", 10, 100, {"price": 109.99}, False),
    ("price_change", "lt", -10, 100, {"price": 89}, True),
    ("price_change", "lt", -10, 100, {"price": 90}, False),
    ("price_change", "lte", "-10%", 100, {"price": 90}, True),
    ("price_change", "lte", -10, 85, {"price": 88}, False),
    ("price_change", "changed", None, 100, {"price": 100.5}, True),
    ("price_change", "changed", None, 100, {"price": " 100.00 "}, False),
    # risk score: a plain `risk` rule with a number as its threshold
    ("risk", "gt", 70, 65, {"riskScore": 80}, True),
    ("risk", "gt", 70, 75, {"riskScore": 80}, False),
    ("risk", "gte", "70", 65, {"riskScore": "70"}, True),
    ("risk", "gte", 70, 70, {"riskScore": 71}, False),
    ("risk", "lt", 30, 35, {"riskScore": 20}, True),
    ("risk", "lt", 30, 20, {"riskScore": 25}, False),
    ("risk", "lte", 30, 35, {"riskScore": 30}, True),
    ("risk", "lte", 30, 30, {"riskScore": 10}, False),
    ("risk", "eq", 50, 40, {"riskScore": 50}, True),
    ("risk", "eq", 50, 50, {"riskScore": 50.0}, False),
    ("risk", "neq", 50, 50, {"riskScore": 51}, True),
    ("risk", "neq", 50, 51, {"riskScore": 52}, False),
    ("risk_score", "changed", None, 50, {"riskScore": 51}, True),
    ("risk_score", "changed", None, 50, {"riskScore": "50"}, False),
    # risk level: Low < Medium < High < Critical
    ("risk", "gt", "Medium", "Medium", {"riskLevel": "HIGH"}, True),
    ("risk", "gt", "Medium", "High", {"riskLevel": "Critical"}, False),
    ("risk", "gte", "high", "Medium", {"riskLevel": "high"}, True),
    ("risk", "gte", "High", "Critical", {"riskLevel": "High"}, False),
    ("risk", "lt", "High", "High", {"riskLevel": "Medium"}, True),
    ("risk", "lt", "High", "Medium", {"riskLevel": "Low"}, False),
    ("risk", "lte", "Medium", "High", {"riskLevel": "Medium"}, True),
    ("risk", "lte", "Medium", "Medium", {"riskLevel": "Low"}, False),
    ("risk", "eq", "High", "Low", {"riskLevel": "High"}, True),
    ("risk", "eq", "High", "high", {"riskLevel": "HIGH"}, False),
    ("risk", "neq", "Low", "Low", {"riskLevel": "Medium"}, True),
    ("risk", "neq", "Low", "Medium", {"riskLevel": "High"}, False),
    ("risk", "changed", None, "Low", {"riskLevel": "Medium", "riskScore": 50}, True),
    ("risk", "changed", None, "low", {"riskLevel": "LOW", "riskScore": 99}, False),
    # compliance: one flag, or every flag with no threshold
    ("compliance", "eq", "RoHS=no", "YES", {"compliance": {"RoHS": "no"}}, True),
    ("compliance", "eq", "RoHS=no", "NO", {"compliance": {"RoHS": False}}, False),
    (
        "compliance",
        "neq",
        {"flag": "RoHS", "value": "yes"},
        "YES",
        {"compliance": {"ROHS": "NO"}},
        True,
    ),
    (
        "compliance",
        "neq",
        {"flag": "RoHS", "value": "yes"},
        "NO",
        {"compliance": {"RoHS": "EXEMPT"}},
        False,
    ),
    ("compliance", "changed", "RoHS", "YES", {"compliance": {"RoHS": "no"}}, True),
    ("compliance", "changed", "RoHS", "yes", {"compliance": {"RoHS": True}}, False),
    (
        "compliance",
        "changed",
        None,
        {"ROHS": "YES", "REACH": "YES"},
        {"compliance": {"RoHS": "no", "REACH": "yes"}},
        True,
    ),
    (
        "compliance",
        "changed",
        None,
        {"ROHS": "YES"},
        {"compliance": {"RoHS": "yes", "REACH": "no"}},
        False,
    ),
    # lifecycle: Preview < Active < NRND < LTB < EOL < Obsolete
    ("lifecycle", "gt", "NRND", "NRND", {"lifecycle": "Last Time Buy"}, True),
    ("lifecycle", "gt", "NRND", "LTB", {"lifecycle": "EOL"}, False),
    ("lifecycle", "gte", "EOL", "LTB", {"lifecycle": "end of life"}, True),
    ("lifecycle", "gte", "EOL", "EOL", {"lifecycle": "Obsolete"}, False),
    ("lifecycle", "lt", "Active", "Active", {"lifecycle": "Preview"}, True),
    ("lifecycle", "lt", "Active", "NRND", {"lifecycle": "Active"}, False),
    ("lifecycle", "lte", "NRND", "LTB", {"lifecycle": "nrnd"}, True),
    ("lifecycle", "lte", "NRND", "NRND", {"lifecycle": "Active"}, False),
    ("lifecycle", "eq", "EOL", "LTB", {"lifecycle": "EOL"}, True),
    ("lifecycle", "eq", "EOL", "EOL", {"lifecycle": "eol"}, False),
    ("lifecycle", "neq", "Active", "Active", {"lifecycle": "NRND"}, True),
    ("lifecycle", "neq", "Active", "NRND", {"lifecycle": "EOL"}, False),
    ("lifecycle", "changed", None, "Active", {"lifecycle": "NRND"}, True),
    ("lifecycle", "changed", None, "production", {"lifecycle": "Active"}, False),
    # new alternates: part numbers in the current set and not in the previous one
    ("new_alternate", "changed", None, ["A"], {"alternates": ["A", "B"]}, True),
    ("new_alternate", "changed", None, ["A", "B"], {"alternates": ["A"]}, False),
    ("new_alternate", "changed", None, ["A"], {"alternates": [" a "]}, False),
    ("new_alternate", "gt", 1, ["A"], {"alternates": ["A", "B", "C"]}, True),
    ("new_alternate", "gt", 1, ["A"], {"alternates": ["A", "B"]}, False),
    ("new_alternate", "gte", 2, ["A"], {"alternates": "A, B, C"}, True),
    ("new_alternate", "gte", 2, ["A"], {"alternates": ["A", "B"]}, False),
    ("new_alternate", "gte", 0, ["A"], {"alternates": ["A"]}, False),  # nothing new
    ("new_alternate", "eq", "b", ["A"], {"alternates": ["A", "B"]}, True),
    ("new_alternate", "eq", "B", ["A"], {"alternates": ["A", "C"]}, False),
    ("new_alternate", "eq", "B", ["B"], {"alternates": ["B"]}, False),  # not new
]
BASELINES = {"price_change": 100}


def _pair_id(case: tuple[str, str, Any, Any, dict[str, Any], bool]) -> str:
    rule_type, operator, threshold, previous, _part, fires = case
    return f"{rule_type}-{operator}-{threshold}-{'fires' if fires else 'quiet'}-{previous}"


@pytest.mark.parametrize(
    ("rule_type", "operator", "threshold", "previous", "part", "fires"),
    PAIRS,
    ids=[_pair_id(case) for case in PAIRS],
)
def test_pair(
    rule_type: str, operator: str, threshold: Any, previous: Any, part: dict[str, Any], fires: bool
) -> None:
    baseline = BASELINES.get(rule_type)
    verdict = check(rule_type, operator, threshold, previous, part, baseline=baseline)
    assert verdict.fired is fires
    assert bool(verdict.reason) is fires


def test_every_valid_pair_is_tested_firing_and_quiet() -> None:
    seen: dict[tuple[RuleType, Operator], set[bool]] = {}
    for rule_type, operator, *_, fires in PAIRS:
        key = (parse_type(rule_type)[0], parse_operator(operator))
        seen.setdefault(key, set()).add(fires)
    valid = {(t, op) for t, ops in VALID_OPERATORS.items() for op in ops}
    assert set(seen) == valid
    assert all(outcomes == {True, False} for outcomes in seen.values())


INVALID_PAIRS = [(t, op) for t in RuleType for op in Operator if op not in VALID_OPERATORS[t]]


@pytest.mark.parametrize(("rule_type", "operator"), INVALID_PAIRS, ids=str)
def test_undefined_pairs_are_refused(rule_type: RuleType, operator: Operator) -> None:
    part = {"price": 1, "compliance": {"RoHS": "NO"}, "alternates": ["A"]}
    with pytest.raises(InvalidRule, match=f"operator {operator} is not defined for {rule_type}"):
        check(rule_type, operator, "RoHS=NO", None, part, baseline=1)


def test_the_invalid_pairs_are_these() -> None:
    assert sorted(f"{t}:{op}" for t, op in INVALID_PAIRS) == [
        "compliance:gt",
        "compliance:gte",
        "compliance:lt",
        "compliance:lte",
        "new_alternate:lt",
        "new_alternate:lte",
        "new_alternate:neq",
        "price_change:eq",
        "price_change:neq",
    ]


# -- the previous value -------------------------------------------------------------------------


def test_the_first_check_arms_the_rule_and_fires_nothing() -> None:
    verdict = check("risk", "gt", 70, None, {"riskScore": "90"})
    assert verdict == Verdict(fired=False, cursor=90.0, previous=None)


def test_before_the_first_check_the_baseline_is_the_previous_value() -> None:
    verdict = check("risk", "gt", 70, None, {"riskScore": 90}, baseline="60")
    assert verdict.fired and verdict.previous == 60.0


def test_the_cursor_wins_over_the_baseline() -> None:
    assert not check("risk", "gt", 70, 80, {"riskScore": 90}, baseline=60).fired


def test_an_unreadable_cursor_is_ignored() -> None:
    # A rule edited from a level to a score threshold: the old cursor is a level.
    assert check("risk", "gt", 70, "High", {"riskScore": 90}) == Verdict(
        fired=False, cursor=90.0, previous=None
    )
    assert check("risk", "gt", 70, "High", {"riskScore": 90}, baseline=60).fired


def test_an_unreadable_baseline_is_an_error() -> None:
    with pytest.raises(NormalizationError, match="baseline"):
        check("lifecycle", "changed", None, None, {"lifecycle": "EOL"}, baseline="retired")


def test_the_cursor_is_stored_in_canonical_form() -> None:
    assert check("new_alternate", "changed", None, None, {"alternates": "b, a"}).cursor == [
        "A",
        "B",
    ]
    flags = check("compliance", "changed", None, None, {"compliance": {"rohs": True}}).cursor
    assert flags == {"ROHS": "YES"}


# -- price rules and their baseline -------------------------------------------------------------


def test_a_price_rule_that_fires_moves_its_baseline_to_the_price() -> None:
    verdict = check("price_change", "gt", 10, 100, {"price": 120}, baseline=100)
    assert verdict.fired and verdict.baseline == 120.0
    assert check("price_change", "gt", 10, 100, {"price": 105}, baseline=100).baseline is (
        Keep.BASELINE
    )


def test_a_price_rule_without_a_baseline_takes_the_current_price_and_fires_nothing() -> None:
    verdict = check("price_change", "gt", 10, 50, {"price": 120})
    assert verdict == Verdict(fired=False, cursor=120.0, previous=None, baseline=120.0)


def test_price_changes_are_exact_to_a_millionth_of_a_percent() -> None:
    # (4.40 - 4.00) / 4.00 * 100 is 10.000000000000009 in floats.
    assert not check("price_change", "gt", 10, 4, {"price": 4.4}, baseline=4).fired
    assert check("price_change", "gte", 10, 4, {"price": 4.4}, baseline=4).fired


def test_a_zero_baseline_has_no_percentage() -> None:
    with pytest.raises(NormalizationError, match="against 0"):
        check("price_change", "gt", 10, 0, {"price": 1}, baseline=0)


def test_price_reason_says_how_far_and_against_what() -> None:
    verdict = check("price_change", "gt", 10, 100, {"price": 112.5}, baseline=100)
    assert verdict.reason == "+13% against the baseline 100.00, more than +10%"


def test_price_reason_gives_the_baseline_in_the_currency_of_the_price() -> None:
    euros = check(
        "price_change", "gt", 10, 100, {"price": 112.5, "priceCurrency": "EUR"}, baseline=100
    )
    dollars = check("price_change", "gt", 10, 100, {"price": "$112.50"}, baseline=100)
    francs = check(
        "price_change", "gt", 10, 100, {"price": 112.5, "priceCurrency": "chf"}, baseline=100
    )
    assert euros.reason == "+13% against the baseline €100.00, more than +10%"
    assert dollars.reason == "+13% against the baseline $100.00, more than +10%"
    assert francs.reason == "+13% against the baseline 100.00 CHF, more than +10%"


# -- what a rule watches ------------------------------------------------------------------------


def test_a_risk_rule_watches_the_score_or_the_level_by_its_threshold() -> None:
    part = {"riskScore": 90, "riskLevel": "Low"}
    assert check("risk", "gt", 70, 60, part).field == "risk score"
    assert check("risk", "gt", "Medium", "Low", {"riskLevel": "High"}).field == "risk level"
    assert check("risk", "changed", None, "Medium", part).field == "risk level"


def test_risk_score_and_risk_level_types_fix_the_dimension() -> None:
    with pytest.raises(NormalizationError, match="threshold"):
        check("risk_score", "gt", "High", 10, {"riskScore": 90})
    with pytest.raises(NormalizationError, match="threshold"):
        check("risk_level", "gt", 70, "Low", {"riskLevel": "High"})


def test_compliance_needs_a_flag_and_a_value_to_compare() -> None:
    part = {"compliance": {"RoHS": "no"}}
    with pytest.raises(InvalidRule, match="flag value"):
        check("compliance", "eq", "RoHS", "YES", part)
    with pytest.raises(InvalidRule, match="naming a flag"):
        check("compliance", "eq", None, "YES", part)
    with pytest.raises(NormalizationError, match="no ROHS compliance flag"):
        check("compliance", "changed", "RoHS", "YES", {"compliance": {"REACH": "no"}})


def test_new_alternates_are_named_in_the_reason() -> None:
    verdict = check("new_alternate", "changed", None, ["A"], {"alternates": ["c", "A", "b"]})
    assert verdict.reason == "2 new alternates: B, C"


# -- values that cannot be read: an error, never an alert ---------------------------------------


@pytest.mark.parametrize(
    ("rule_type", "threshold", "part"),
    [
        ("price_change", 10, {}),
        ("price_change", 10, {"price": None}),
        ("price_change", 10, {"price": "4,20"}),
        ("risk", 70, {"riskScore": "high"}),
        ("risk", "High", {"riskLevel": "Severe"}),
        ("compliance", "RoHS=NO", {"compliance": "compliant"}),
        ("lifecycle", "EOL", {"lifecycle": None}),
        ("new_alternate", 1, {"alternates": None}),
    ],
)
def test_a_current_value_that_cannot_be_normalised_is_an_error(
    rule_type: str, threshold: Any, part: dict[str, Any]
) -> None:
    operator = "eq" if rule_type == "compliance" else "gt"
    with pytest.raises(NormalizationError):
        check(rule_type, operator, threshold, None, part, baseline=100)


@pytest.mark.parametrize(
    ("rule_type", "threshold"),
    [
        ("price_change", "ten"),
        ("risk", "extreme"),
        ("lifecycle", "retired"),
        ("new_alternate", 1.5),
    ],
)
def test_a_threshold_that_cannot_be_normalised_is_an_error(rule_type: str, threshold: Any) -> None:
    with pytest.raises(NormalizationError, match="threshold"):
        check(rule_type, "gt", threshold, None, {}, baseline=100)


def test_a_comparison_without_a_threshold_is_invalid() -> None:
    with pytest.raises(InvalidRule, match="needs a threshold"):
        check("lifecycle", "gte", None, "Active", {"lifecycle": "EOL"})


# -- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rule_type"),
    [
        ("price_change", RuleType.PRICE_CHANGE),
        ("priceChange", RuleType.PRICE_CHANGE),
        ("PRICE_CHANGE", RuleType.PRICE_CHANGE),
        ("price-change", RuleType.PRICE_CHANGE),
        ("riskLevel", RuleType.RISK),
        ("Compliance", RuleType.COMPLIANCE),
        ("lifecycle_stage", RuleType.LIFECYCLE),
        ("newAlternate", RuleType.NEW_ALTERNATE),
    ],
)
def test_type_names_in_any_spelling(name: str, rule_type: RuleType) -> None:
    assert parse_type(name)[0] is rule_type


@pytest.mark.parametrize(
    ("name", "operator"),
    [
        ("gt", Operator.GT),
        ("GT", Operator.GT),
        (">", Operator.GT),
        (" >= ", Operator.GTE),
        ("<", Operator.LT),
        ("<=", Operator.LTE),
        ("==", Operator.EQ),
        ("!=", Operator.NEQ),
        ("ne", Operator.NEQ),
        ("Changed", Operator.CHANGED),
    ],
)
def test_operator_names_and_symbols(name: str, operator: Operator) -> None:
    assert parse_operator(name) is operator


@pytest.mark.parametrize(
    ("field", "value"), [("type", "price_drop"), ("type", None), ("operator", "~"), ("operator", 3)]
)
def test_unknown_types_and_operators_are_invalid(field: str, value: Any) -> None:
    with pytest.raises(InvalidRule, match=field):
        evaluate(rule(**{"rule_type" if field == "type" else field: value}), {"price": 1})


def test_values_are_displayed_in_words() -> None:
    assert display(None) == "(none)"
    assert display(0.62) == "0.62"
    assert display(100.0) == "100"
    assert display(["A", "B"]) == "A, B"
    assert display([]) == "(none)"
    assert display({"ROHS": "YES", "REACH": "NO"}) == "ROHS: YES, REACH: NO"
