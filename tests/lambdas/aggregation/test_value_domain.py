"""The aggregatable domain: its boundaries, and that every sum it promises fits DynamoDB's 38 digits."""

from decimal import Decimal

import pytest

from aggregation.exact import EXACT, is_dynamodb_number
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, ValueDomain

LARGEST = Decimal("999999999999999999.9999999999")  # 18 integer and 10 fraction digits


@pytest.mark.parametrize(
    "value",
    [
        LARGEST,
        -LARGEST,
        Decimal("1E-10"),
        Decimal("-1E-10"),
        Decimal("1E+17"),
        Decimal(0),
        Decimal("-0.000"),
        Decimal("1.500000000000000000000"),  # trailing zeros are not fraction digits
        Decimal("34624.51"),
    ],
)
def test_values_inside_the_default_domain(value: Decimal) -> None:
    assert DEFAULT_VALUE_DOMAIN.violation(value) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (Decimal("1E+18"), "more than 18 integer digits"),
        (Decimal("-1000000000000000000"), "more than 18 integer digits"),
        (Decimal("1E+30"), "more than 18 integer digits"),
        (Decimal("1E-11"), "more than 10 fraction digits"),
        (Decimal("-0.00000000001"), "more than 10 fraction digits"),
        (Decimal("1.00000000001"), "more than 10 fraction digits"),
    ],
)
def test_values_outside_the_default_domain_say_which_bound_they_break(value: Decimal, reason: str) -> None:
    violation = DEFAULT_VALUE_DOMAIN.violation(value)
    assert violation is not None and violation.startswith(reason)


def test_the_defaults_let_sums_of_ten_billion_values_fit() -> None:
    assert DEFAULT_VALUE_DOMAIN.sum_headroom_digits == 10
    terms = 10**10
    # n copies of the extremes (a sum of equal terms is their product, exactly)
    assert is_dynamodb_number(EXACT.multiply(LARGEST, terms))
    assert is_dynamodb_number(EXACT.multiply(-LARGEST, terms) + Decimal("1E-10"))
    assert DEFAULT_VALUE_DOMAIN.sum_digits(terms) == 38
    assert DEFAULT_VALUE_DOMAIN.sum_digits(terms + 1) == 39


def test_the_pair_that_poisoned_map_is_outside() -> None:
    """1E+30 + 1E-10 needs 41 digits: one of the two must be refused at the door."""
    assert not is_dynamodb_number(EXACT.add(Decimal("1E+30"), Decimal("1E-10")))
    assert DEFAULT_VALUE_DOMAIN.violation(Decimal("1E-10")) is None
    assert DEFAULT_VALUE_DOMAIN.violation(Decimal("1E+30")) is not None


@pytest.mark.parametrize(("terms", "digits"), [(1, 28), (2, 29), (10, 29), (11, 30), (200, 31), (10**9, 37)])
def test_sum_digits_grow_with_the_number_of_terms(terms: int, digits: int) -> None:
    assert DEFAULT_VALUE_DOMAIN.sum_digits(terms) == digits
    # never exceeded: `terms` copies of the largest value plus the smallest fraction
    total = EXACT.normalize(EXACT.multiply(LARGEST, terms - 1) + LARGEST + Decimal("1E-10"))
    assert len(total.as_tuple().digits) <= digits


def test_a_custom_domain_bounds_what_it_says() -> None:
    cents = ValueDomain(integer_digits=12, fraction_digits=2)
    assert cents.violation(Decimal("999999999999.99")) is None
    assert cents.violation(Decimal("0.001")) is not None
    assert cents.sum_headroom_digits == 24


@pytest.mark.parametrize(
    ("integer_digits", "fraction_digits", "message"),
    [
        (0, 10, "at least 1 integer digit"),
        (18, -1, "no negative fraction digits"),
        (20, 10, "at most 29"),
        (38, 0, "at most 29"),
    ],
)
def test_a_domain_without_room_for_sums_is_refused(integer_digits: int, fraction_digits: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ValueDomain(integer_digits, fraction_digits)
