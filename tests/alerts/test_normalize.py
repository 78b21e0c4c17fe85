"""Every normalisation case: each form a value arrives in, and each that has no canonical one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from bson import Decimal128, ObjectId

from tickd.handlers.alert_scanner import normalize
from tickd.handlers.alert_scanner.normalize import NormalizationError

NUMBERS = {
    "int": (5, 5.0),
    "float": (4.2, 4.2),
    "string": ("10", 10.0),
    "padded string": (" 4.20 ", 4.2),
    "signed": ("-3.5", -3.5),
    "leading dot": (".5", 0.5),
    "exponent": ("1e3", 1000.0),
    "decimal": (Decimal("4.20"), 4.2),
    "bson decimal128": (Decimal128("4.20"), 4.2),
}


@pytest.mark.parametrize(("raw", "canonical"), list(NUMBERS.values()), ids=list(NUMBERS))
def test_numbers_arrive_in_many_forms(raw: Any, canonical: float) -> None:
    assert normalize.number(raw, "x") == canonical


NOT_NUMBERS = {
    "null": None,
    "boolean": True,
    "empty": "",
    "word": "ten",
    "decimal comma": "4,20",
    "thousands separator": "1,000",
    "underscores": "1_000",
    "nan": "nan",
    "infinity": float("inf"),
    "list": [1],
}


@pytest.mark.parametrize("raw", list(NOT_NUMBERS.values()), ids=list(NOT_NUMBERS))
def test_what_is_not_a_number_is_refused(raw: Any) -> None:
    with pytest.raises(NormalizationError, match="x:"):
        normalize.number(raw, "x")


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [(" 4.20 ", 4.2), ("$4.20", 4.2), ("€ 3", 3.0), (0, 0.0), ("10", 10.0)],
)
def test_prices_are_floats_without_currency_symbols(raw: Any, canonical: float) -> None:
    assert normalize.price(raw) == canonical


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(NormalizationError, match="negative"):
        normalize.price("-1")


@pytest.mark.parametrize(
    ("raw", "canonical"), [(10, 10.0), ("10", 10.0), ("10%", 10.0), (" -5 % ", -5.0)]
)
def test_percentages_may_carry_a_percent_sign(raw: Any, canonical: float) -> None:
    assert normalize.percent(raw) == canonical


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("Low", "Low"),
        ("LOW", "Low"),
        ("low", "Low"),
        (" medium ", "Medium"),
        ("CRITICAL", "Critical"),
    ],
)
def test_risk_levels_are_title_case(raw: Any, canonical: str) -> None:
    assert normalize.risk_level(raw) == canonical


@pytest.mark.parametrize("raw", ["Severe", "", None, 3, "Med"])
def test_unknown_risk_levels_are_refused(raw: Any) -> None:
    with pytest.raises(NormalizationError, match="riskLevel"):
        normalize.risk_level(raw)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("Active", "Active"),
        ("ACTIVE", "Active"),
        ("production", "Active"),
        ("In Production", "Active"),
        ("new", "Preview"),
        ("Pre-Release", "Preview"),
        ("nrnd", "NRND"),
        ("Not Recommended for New Designs", "NRND"),
        ("last time buy", "LTB"),
        ("LTB", "LTB"),
        ("eol", "EOL"),
        ("End-of-Life", "EOL"),
        ("end of life", "EOL"),
        ("OBSOLETE", "Obsolete"),
    ],
)
def test_lifecycle_stages_have_one_spelling(raw: str, canonical: str) -> None:
    assert normalize.lifecycle_stage(raw) == canonical


@pytest.mark.parametrize("raw", ["discontinued?", "", None, 3])
def test_unknown_lifecycle_stages_are_refused(raw: Any) -> None:
    with pytest.raises(NormalizationError, match="lifecycle"):
        normalize.lifecycle_stage(raw)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("yes", "YES"),
        ("YES", "YES"),
        (" Yes ", "YES"),
        (True, "YES"),
        ("true", "YES"),
        ("y", "YES"),
        ("no", "NO"),
        (False, "NO"),
        ("FALSE", "NO"),
        ("n", "NO"),
        ("exempt", "EXEMPT"),
        ("not  applicable", "NOT APPLICABLE"),
    ],
)
def test_compliance_flag_values_are_upper_case(raw: Any, canonical: str) -> None:
    assert normalize.flag_value(raw) == canonical


@pytest.mark.parametrize("raw", [None, "", "  ", 1, 0])
def test_flag_values_that_say_nothing_are_refused(raw: Any) -> None:
    with pytest.raises(NormalizationError):
        normalize.flag_value(raw)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("RoHS", "ROHS"),
        ("rohs", "ROHS"),
        (" REACH ", "REACH"),
        ("conflict minerals", "CONFLICT_MINERALS"),
    ],
)
def test_compliance_flag_names_are_upper_case(raw: str, canonical: str) -> None:
    assert normalize.flag_name(raw) == canonical


def test_a_part_s_flags_are_canonical_sorted_and_unknown_ones_left_out() -> None:
    flags = normalize.compliance_flags({"RoHS": "yes", "reach": False, "Prop65": None})
    assert flags == {"REACH": "NO", "ROHS": "YES"}
    assert list(flags) == ["REACH", "ROHS"]


def test_two_spellings_of_one_flag_must_agree() -> None:
    assert normalize.compliance_flags({"RoHS": "yes", "ROHS": True}) == {"ROHS": "YES"}
    with pytest.raises(NormalizationError, match="twice"):
        normalize.compliance_flags({"RoHS": "yes", "ROHS": "no"})


@pytest.mark.parametrize("raw", [None, "RoHS", ["RoHS"]])
def test_compliance_must_be_a_set_of_flags(raw: Any) -> None:
    with pytest.raises(NormalizationError, match="compliance"):
        normalize.compliance_flags(raw)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [("LM317T", "LM317T"), (" lm317t ", "LM317T"), ("lm 317 t", "LM317T"), (555, "555")],
)
def test_part_numbers_are_upper_case_without_spaces(raw: Any, canonical: str) -> None:
    assert normalize.part_number(raw) == canonical


def test_part_numbers_keep_their_punctuation() -> None:
    assert normalize.part_number("lm317t-dg") == "LM317T-DG"


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        (["LM317T", " lm350t "], {"LM317T", "LM350T"}),
        (["LM317T", "lm317t"], {"LM317T"}),
        ([{"partNumber": "a1"}, {"mpn": "b2"}, {"partId": "c3"}], {"A1", "B2", "C3"}),
        ("a1, b2; c3", {"A1", "B2", "C3"}),
        ([], set()),
        ("", set()),
    ],
)
def test_alternates_are_a_set_of_part_numbers(raw: Any, canonical: set[str]) -> None:
    assert normalize.alternates(raw) == canonical


@pytest.mark.parametrize("raw", [None, 3, {"partNumber": "A"}, [None], [{"name": "x"}]])
def test_alternates_that_cannot_be_read_are_refused_not_empty(raw: Any) -> None:
    with pytest.raises(NormalizationError):
        normalize.alternates(raw)


@pytest.mark.parametrize(("raw", "canonical"), [(2, 2), ("2", 2), (2.0, 2), (0, 0)])
def test_counts_are_whole_numbers(raw: Any, canonical: int) -> None:
    assert normalize.count(raw) == canonical


@pytest.mark.parametrize("raw", [2.5, -1, "two", None])
def test_counts_that_are_not_whole_numbers_are_refused(raw: Any) -> None:
    with pytest.raises(NormalizationError):
        normalize.count(raw)


def test_cooldowns_are_minutes_with_a_default() -> None:
    assert normalize.cooldown_minutes(None) == normalize.DEFAULT_COOLDOWN_MINUTES
    assert normalize.cooldown_minutes("15") == 15.0
    assert normalize.cooldown_minutes(0) == 0.0
    with pytest.raises(NormalizationError, match="negative"):
        normalize.cooldown_minutes(-1)


T = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        (T, T),
        (T.replace(tzinfo=None), T),
        (T.astimezone(timezone(timedelta(hours=2))), T),
        ("2026-03-02T09:00:00Z", T),
        ("2026-03-02T09:00:00+00:00", T),
        ("2026-03-02T11:00:00+02:00", T),
        (None, None),
    ],
)
def test_times_are_aware_utc(raw: Any, canonical: datetime | None) -> None:
    assert normalize.timestamp(raw) == canonical


@pytest.mark.parametrize("raw", ["yesterday", 1700000000, ""])
def test_times_that_cannot_be_read_are_refused(raw: Any) -> None:
    with pytest.raises(NormalizationError):
        normalize.timestamp(raw)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        (True, True),
        ("true", True),
        ("YES", True),
        (1, True),
        (False, False),
        ("no", False),
        (0, False),
    ],
)
def test_truth_values(raw: Any, canonical: bool) -> None:
    assert normalize.truth(raw, default=False) is canonical


def test_truth_defaults_when_missing_and_refuses_nonsense() -> None:
    assert normalize.truth(None, default=True) is True
    with pytest.raises(NormalizationError):
        normalize.truth("maybe", default=False)


def test_identifiers_are_strings() -> None:
    oid = ObjectId()
    assert normalize.identifier(oid, "id") == str(oid)
    assert normalize.identifier(42, "id") == "42"
    assert normalize.identifier(" u-1 ", "id") == "u-1"
    for bad in (None, "", True, {"a": 1}):
        with pytest.raises(NormalizationError):
            normalize.identifier(bad, "id")


@pytest.mark.parametrize("raw", ["ada@example.com", " ada@example.com "])
def test_email_addresses(raw: str) -> None:
    assert normalize.email_address(raw) == "ada@example.com"


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "ada",
        "ada@example.com, eve@example.com",
        "Ada <ada@example.com>",
        "ada@example.com\r\nBcc: eve@example.com",
        "a@b@example.com",
    ],
)
def test_anything_but_one_plain_address_is_refused(raw: Any) -> None:
    with pytest.raises(NormalizationError):
        normalize.email_address(raw)
