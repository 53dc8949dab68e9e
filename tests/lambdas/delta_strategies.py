"""Hypothesis strategies for what the map function writes and reduce reads: delta batches and items."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import strategies as st

from aggregation.delta_items import DeltaItem
from aggregation.deltas import NodeDelta
from aggregation.stream_positions import SEQUENCE_NUMBER_DIGITS, StreamRun
from aggregation.transactions import DeltaBatch

storable_numbers = st.builds(
    lambda digits, exponent: Decimal(digits).scaleb(exponent),
    st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1),
    st.integers(min_value=-100, max_value=80),
)
"""Numbers DynamoDB stores: up to 38 significant digits, exponents far apart."""

node_deltas = st.dictionaries(
    st.text(min_size=1, max_size=40),
    st.builds(NodeDelta, storable_numbers, st.integers(min_value=-(10**9), max_value=10**9)),
    max_size=150,
)
"""The net deltas of a delta item: any node keys, any storable values and trade counts."""


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
    batch = DeltaBatch(run.batch_hash, draw(node_deltas), len(timestamps), tuple(timestamps), created_at)
    return DeltaItem(run=run, batch=batch, expires_at=created_at + draw(st.integers(min_value=0, max_value=10**8)))
