"""Exact decimal arithmetic and DynamoDB number limits.

Python's default decimal context rounds to 28 digits, silently. Totals must be
exact to the last decimal, so all arithmetic here runs in a context wide enough
for any sum of DynamoDB numbers and traps on any rounding instead of hiding it.
"""

from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow, Rounded

# DynamoDB numbers: at most 38 significant digits, magnitude 1E-130 .. <1E+126.
DYNAMODB_MAX_DIGITS = 38
DYNAMODB_MIN_EXPONENT = -130
DYNAMODB_MAX_ADJUSTED_EXPONENT = 125

# Wide enough to add any two DynamoDB numbers exactly (125 + 130 + 38 digits and
# headroom); every rounding raises, so an inexact result can never be stored.
EXACT = Context(
    prec=400,
    Emax=999_999,
    Emin=-999_999,
    traps=[Inexact, Rounded, InvalidOperation, Overflow],
)

ZERO = Decimal(0)


def exact_sum(*values: Decimal) -> Decimal:
    """Sum without any rounding (raises `decimal.Inexact` if it ever would round)."""
    total = ZERO
    for value in values:
        total = EXACT.add(total, value)
    return total


def exact_difference(minuend: Decimal, subtrahend: Decimal) -> Decimal:
    """`minuend - subtrahend`, exactly."""
    return EXACT.subtract(minuend, subtrahend)


def significant_digits(value: Decimal) -> int:
    """Digits DynamoDB counts: leading and trailing zeros are not significant."""
    if value.is_zero():
        return 1
    return len(EXACT.normalize(value).as_tuple().digits)


def is_dynamodb_number(value: Decimal) -> bool:
    """True when DynamoDB can store `value` exactly."""
    if not value.is_finite():
        return False
    if value.is_zero():
        return True
    normal = EXACT.normalize(value)
    smallest_exponent = normal.as_tuple().exponent
    assert isinstance(smallest_exponent, int)  # finite, checked above
    return (
        significant_digits(value) <= DYNAMODB_MAX_DIGITS
        and normal.adjusted() <= DYNAMODB_MAX_ADJUSTED_EXPONENT
        and smallest_exponent >= DYNAMODB_MIN_EXPONENT
    )


def dynamodb_number(value: Decimal) -> Decimal:
    """`value` in a form DynamoDB and boto3's serializer accept without rounding.

    `Decimal("1.000…0")` with 40 digits is one significant digit, but boto3's
    38-digit context would reject the long coefficient; trailing zeros are
    therefore dropped when, and only when, the coefficient is too long.
    """
    if not is_dynamodb_number(value):
        raise ValueError(f"{value} is not representable as a DynamoDB number")
    if len(value.as_tuple().digits) <= DYNAMODB_MAX_DIGITS:
        return value
    return EXACT.normalize(value)
