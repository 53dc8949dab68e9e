"""The aggregatable domain: the Values whose every sum DynamoDB can store exactly.

DynamoDB numbers hold 38 significant digits, and every delta, total and `ADD` must
fit them exactly, or DynamoDB refuses the write and the batch carrying it retries
for ever (a poison batch). Two storable values do not make a storable sum:
`1E+30 + 1E-10` needs 41 digits. So a Value is valid only inside a domain of
bounded magnitude and bounded scale:

    |value| < 10^integer_digits   and   value x 10^fraction_digits is an integer.

A sum of n such values, whatever their signs (cancelling only removes digits), is
below n x 10^integer_digits and has at most fraction_digits fraction digits, so it
needs at most integer_digits + fraction_digits + ceil(log10 n) significant digits.
Sums of up to 10^headroom values therefore fit, headroom = 38 - integer_digits -
fraction_digits: 10^10 values at the defaults (18 integer + 10 fraction digits).
A node's total is the sum of its trades' current values (plus, transiently, the
old and new values of changes still in flight), so any realistic node fits.
`TradeCount` is a sum of +-1 per trade and needs no bound of its own.
"""

from dataclasses import dataclass
from decimal import Decimal

from aggregation.exact import DYNAMODB_MAX_DIGITS, canonical_parts

MIN_SUM_HEADROOM_DIGITS = 9
"""Digits every domain leaves for sums: one reduce invocation adds at most
reduceBatchSize x 2 x mapBatchSize <= 2 x 10^8 values of a node (both settings at their
maximum, 10,000), and a node's total may hold a billion trades."""


@dataclass(frozen=True)
class ValueDomain:
    """Bounds on a Value's integer and fraction digits (cdk.json `valueIntegerDigits`,
    `valueFractionDigits`)."""

    integer_digits: int
    fraction_digits: int

    def __post_init__(self) -> None:
        if self.integer_digits < 1 or self.fraction_digits < 0:
            raise ValueError("a value domain needs at least 1 integer digit and no negative fraction digits")
        if self.sum_headroom_digits < MIN_SUM_HEADROOM_DIGITS:
            raise ValueError(
                f"integer + fraction digits must be at most {DYNAMODB_MAX_DIGITS - MIN_SUM_HEADROOM_DIGITS} "
                f"(DynamoDB's {DYNAMODB_MAX_DIGITS} digits less {MIN_SUM_HEADROOM_DIGITS} for sums), "
                f"got {self.integer_digits} + {self.fraction_digits}"
            )

    @property
    def sum_headroom_digits(self) -> int:
        """Sums of up to 10 ** this many values fit DynamoDB's 38 digits."""
        return DYNAMODB_MAX_DIGITS - self.integer_digits - self.fraction_digits

    def sum_digits(self, terms: int) -> int:
        """The most significant digits a sum of `terms` values of this domain can need."""
        carry_digits = 0
        while 10**carry_digits < terms:
            carry_digits += 1
        return self.integer_digits + self.fraction_digits + carry_digits

    def violation(self, value: Decimal) -> str | None:
        """Why a finite `value` is outside the domain, or None when it is inside (zero, of any
        exponent, is inside). Decided from the digits alone (`aggregation.exact`), so no value
        makes it raise."""
        _, digits, exponent = canonical_parts(value)
        return self.parts_violation(digits, exponent)

    def parts_violation(self, digits: tuple[int, ...], exponent: int) -> str | None:
        """`violation` of a number given by its `aggregation.exact.canonical_parts`, already read
        (zero is ``(0,)`` and 0: inside)."""
        if exponent + len(digits) - 1 >= self.integer_digits:  # the canonical number's adjusted exponent
            return f"more than {self.integer_digits} integer digits (valueIntegerDigits)"
        if -exponent > self.fraction_digits:
            return f"more than {self.fraction_digits} fraction digits (valueFractionDigits)"
        return None


DEFAULT_VALUE_DOMAIN = ValueDomain(integer_digits=18, fraction_digits=10)
