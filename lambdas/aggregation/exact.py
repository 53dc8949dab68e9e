"""Exact decimal arithmetic and DynamoDB number limits.

Python's default decimal context rounds to 28 digits, silently. Totals must be
exact to the last decimal, so all arithmetic here runs in a context wide enough
for any sum of DynamoDB numbers and traps on any rounding instead of hiding it.

Checks of a number read from outside (is it storable, how many digits) use no context at
all: they read the digits and the exponent, so no input can make them raise.
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


def canonical_number(value: Decimal) -> Decimal:
    """`value`, finite, in its shortest exact form: zero (of any sign or exponent) as `0`,
    anything else with the trailing zeros of its coefficient moved into the exponent.

    Computed from the digits alone, with no decimal context: a context has a precision and
    an exponent range, and a number outside them (`1E+999999999`, 401 digits) would make it
    raise or round before any check could say what is wrong with the number. This is also
    the form every stage writes: boto3's serializer refuses a zero whose exponent is beyond
    its range (`0E+500`: Clamped) and a coefficient longer than 38 digits (`Rounded`), and
    the canonical form of a storable number has neither.
    """
    return canonical_parts(value)[0]


def canonical_parts(value: Decimal) -> tuple[Decimal, tuple[int, ...], int]:
    """`canonical_number(value)` with its coefficient's digits and its exponent (zero: ``(0,)`` and 0).

    One reading of the digits serves every check that follows (storable, domain, the written
    form): each message's Value and Timestamp go through them on the state function's path.
    """
    if not value.is_finite():
        raise ValueError(f"{value} is not a finite number")
    if value.is_zero():
        return ZERO, (0,), 0
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    if digits[-1] != 0:
        return value, digits, exponent  # already canonical: the common case, so kept cheap
    kept = len(digits)
    while digits[kept - 1] == 0:  # a non-zero coefficient has a non-zero digit
        kept -= 1
    exponent += len(digits) - kept
    return Decimal((sign, digits[:kept], exponent)), digits[:kept], exponent


def smallest_exponent(value: Decimal) -> int:
    """The exponent of the last significant digit of a finite `value` (0 for zero)."""
    return canonical_parts(value)[2]


def significant_digits(value: Decimal) -> int:
    """Digits DynamoDB counts: leading and trailing zeros are not significant."""
    return len(canonical_parts(value)[1])


def _is_storable(digits: tuple[int, ...], exponent: int) -> bool:
    """Whether a canonical number of these digits and exponent is a DynamoDB number (zero, ``(0,)``
    and 0, is): at most 38 significant digits, magnitude 1E-130 .. <1E+126."""
    return (
        len(digits) <= DYNAMODB_MAX_DIGITS
        and exponent + len(digits) - 1 <= DYNAMODB_MAX_ADJUSTED_EXPONENT
        and exponent >= DYNAMODB_MIN_EXPONENT
    )


def storable_parts(value: Decimal) -> tuple[Decimal, tuple[int, ...], int] | None:
    """`canonical_parts` of a finite `value` when DynamoDB can store it exactly, else None: one
    reading of the digits for the storable check and the checks that follow it (the Value's domain)."""
    parts = canonical_parts(value)
    return parts if _is_storable(parts[1], parts[2]) else None


def storable_canonical(value: Decimal) -> Decimal | None:
    """The canonical form of a finite `value` when DynamoDB can store it exactly, else None."""
    parts = storable_parts(value)
    return None if parts is None else parts[0]


def is_dynamodb_number(value: Decimal) -> bool:
    """True when DynamoDB can store `value` exactly: finite, and zero or of at most 38
    significant digits with magnitude 1E-130 .. <1E+126. Decided without a context, so any
    `Decimal` gets an answer, never an exception."""
    return value.is_finite() and storable_canonical(value) is not None


def dynamodb_number(value: Decimal) -> Decimal:
    """`value` as it is written to DynamoDB: its canonical form (`canonical_number`), which
    DynamoDB and boto3's serializer take without rounding, clamping or refusing; an integer
    of at most 38 digits as its plain digits (`1200`, not `1.2E+3`), as DynamoDB returns it
    and as readers of counts and epoch seconds expect.

    Raises `ValueError` when DynamoDB cannot store it: validation keeps such numbers out, so
    this is the last guard against writing a number other than the one validated.
    """
    if not value.is_finite():
        raise ValueError(f"{value} is not representable as a DynamoDB number")
    normal, digits, exponent = canonical_parts(value)
    if not _is_storable(digits, exponent):
        raise ValueError(f"{value} is not representable as a DynamoDB number")
    if exponent > 0 and len(digits) + exponent <= DYNAMODB_MAX_DIGITS:
        return Decimal(int(normal))  # exact: an integer of at most 38 digits, as its digits
    return normal


def number_attribute(value: Decimal | int) -> dict[str, str]:
    """`value` as a DynamoDB number attribute (`{"N": ...}`), written as `dynamodb_number` writes it.

    The same attribute boto3's `TypeSerializer` makes of `dynamodb_number(value)` (its context
    copies a storable canonical number unchanged), without its type dispatch, which costs a
    write path several times the conversion itself.
    """
    return {"N": str(dynamodb_number(value if isinstance(value, Decimal) else Decimal(value)))}
