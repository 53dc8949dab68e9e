"""Hypothesis strategies for what the map function writes and reduce reads: delta batches and items."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import strategies as st

from aggregation.delta_items import DeltaItem
from aggregation.deltas import NodeDelta
from aggregation.exact import DYNAMODB_MAX_DIGITS
from aggregation.stream_positions import SEQUENCE_NUMBER_DIGITS, StreamRun
from aggregation.transactions import DeltaBatch
from aggregation.value_domain import MIN_SUM_HEADROOM_DIGITS

storable_numbers = st.builds(
    lambda digits, exponent: Decimal(digits).scaleb(exponent),
    st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1),
    st.integers(min_value=-100, max_value=80),
)
"""Numbers DynamoDB stores: up to 38 significant digits, exponents far apart."""


@st.composite
def summable_numbers(draw: st.DrawFn) -> Decimal:
    """A value of one of the widest value domains (`aggregation.value_domain`: integer and fraction
    digits 29 together): sums of many of them, as reduce forms them, still fit DynamoDB's 38 digits."""
    fraction_digits = draw(st.integers(min_value=0, max_value=DYNAMODB_MAX_DIGITS - MIN_SUM_HEADROOM_DIGITS - 1))
    widest = 10 ** (DYNAMODB_MAX_DIGITS - MIN_SUM_HEADROOM_DIGITS)
    return Decimal(draw(st.integers(min_value=-widest + 1, max_value=widest - 1))).scaleb(-fraction_digits)


def node_deltas(values: st.SearchStrategy[Decimal] = storable_numbers) -> st.SearchStrategy[dict[str, NodeDelta]]:
    """The net deltas of a delta item: any node keys, `values`, and any trade counts."""
    return st.dictionaries(
        st.text(min_size=1, max_size=40),
        st.builds(NodeDelta, values, st.integers(min_value=-(10**9), max_value=10**9)),
        max_size=150,
    )


@st.composite
def delta_items(draw: st.DrawFn) -> DeltaItem:
    """A DeltaTable item of any stream position, deltas and producer timestamps."""
    first = draw(st.integers(min_value=0, max_value=10**SEQUENCE_NUMBER_DIGITS - 2))
    run = StreamRun(
        draw(st.text(min_size=1, max_size=120)),
        first,
        draw(st.integers(min_value=first, max_value=10**SEQUENCE_NUMBER_DIGITS - 1)),
    )
    timestamps = draw(st.lists(storable_numbers, max_size=40))
    created_at = draw(st.integers(min_value=0, max_value=4_102_444_800))
    batch = DeltaBatch(run.batch_hash, draw(node_deltas()), len(timestamps), tuple(timestamps), created_at)
    return DeltaItem(run=run, batch=batch, expires_at=created_at + draw(st.integers(min_value=0, max_value=10**8)))
