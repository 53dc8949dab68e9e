"""DynamoDB's number rules, decided from a number's digits: no input makes them raise."""

from decimal import Decimal

import pytest
from boto3.dynamodb.types import TypeSerializer
from hypothesis import given
from hypothesis import strategies as st

from aggregation.exact import (
    canonical_number,
    dynamodb_number,
    is_dynamodb_number,
    number_attribute,
    significant_digits,
)

NUMBERS = st.builds(
    lambda sign, digits, exponent: Decimal((sign, tuple(int(d) for d in digits), exponent)),
    st.integers(0, 1),
    st.text("0123456789", min_size=1, max_size=45),
    st.integers(-175, 130),
)
"""Finite decimals of up to 45 digits, trailing zeros and all, around DynamoDB's exponent range."""


@pytest.mark.parametrize(
    ("text", "storable"),
    [
        ("0E+500", True),
        ("-0E-999999999", True),
        ("1E-130", True),
        ("1E-131", False),
        ("1" + "0" * 37 + "E-167", True),  # 1E-130 written with 38 digits, below boto3's smallest exponent
        ("9.9999999999999999999999999999999999999E+125", True),
        ("1E+126", False),
        ("1" * 38, True),
        ("1" * 39, False),
        ("1" * 401, False),
        ("1." + "0" * 400, True),
        ("1e999999999", False),
        ("-1e-999999999", False),
        ("1e999999999999999999", False),
    ],
)
def test_storable_numbers_are_decided_and_written_without_a_context(text: str, storable: bool) -> None:
    number = Decimal(text)
    assert is_dynamodb_number(number) is storable
    if storable:
        written = dynamodb_number(number)
        assert written == number
        assert TypeSerializer().serialize(written) == {"N": str(written)}  # boto3 neither rounds nor clamps
    else:
        with pytest.raises(ValueError, match="not representable"):
            dynamodb_number(number)


def test_canonical_form_drops_trailing_zeros_and_the_exponent_and_sign_of_zero() -> None:
    assert str(canonical_number(Decimal("-0E+300"))) == "0"
    assert str(canonical_number(Decimal("12.3400"))) == "12.34"
    assert str(canonical_number(Decimal("1" + "0" * 500))) == "1E+500"
    assert significant_digits(Decimal("0.000")) == 1
    assert significant_digits(Decimal("-100.0100")) == 5
    with pytest.raises(ValueError, match="not a finite number"):
        canonical_number(Decimal("NaN"))


@pytest.mark.parametrize(
    ("text", "written"),
    [("1795626550", "1795626550"), ("1.2E+3", "1200"), ("1E+37", "1" + "0" * 37), ("1E+38", "1E+38"), ("-0E+5", "0")],
)
def test_integers_are_written_as_their_digits_while_they_fit_38(text: str, written: str) -> None:
    """Epoch seconds and counts read back as plain integers, as DynamoDB itself returns them."""
    assert str(dynamodb_number(Decimal(text))) == written


@given(NUMBERS)
def test_the_canonical_form_is_the_same_number_without_trailing_zeros(number: Decimal) -> None:
    canonical = canonical_number(number)
    assert canonical == number
    if not number.is_zero():
        assert canonical.as_tuple().digits[-1] != 0
    assert canonical_number(canonical) is canonical  # already canonical: returned as it is


@given(st.one_of(NUMBERS, st.integers(-(10**40), 10**40)))
def test_a_number_attribute_is_what_boto3_serialises_or_a_refusal(number: Decimal | int) -> None:
    """The state and map stages build number attributes directly; on the wire they are boto3's."""
    if is_dynamodb_number(Decimal(number)):
        assert number_attribute(number) == TypeSerializer().serialize(dynamodb_number(Decimal(number)))
    else:
        with pytest.raises(ValueError, match="not representable"):
            number_attribute(number)
