"""The latency histogram: every latency lands in the bucket that bounds it, and a percentile read
from the buckets bounds the true one from above within a bucket's width."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregation.latency import (
    BUCKETS_PER_DOUBLING,
    bucket_attribute,
    bucket_of,
    bucket_upper_ms,
    difference,
    histogram,
    histogram_of,
    latency_seconds,
    merged,
    milliseconds,
    percentile_ms,
)

WIDTH = 2 ** (1 / BUCKETS_PER_DOUBLING)
latencies_ms = st.integers(min_value=-10_000, max_value=86_400_000)


@given(latencies_ms)
def test_a_latency_lies_in_its_bucket(latency: int) -> None:
    bucket = bucket_of(latency)
    assert latency <= bucket_upper_ms(bucket)
    if bucket > 0:
        assert latency > bucket_upper_ms(bucket - 1)
    else:
        assert latency <= 1


@given(st.lists(latencies_ms, min_size=1, max_size=300), st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_a_percentile_bounds_the_true_one_within_a_bucket(values: list[int], fraction: float) -> None:
    buckets = histogram(Decimal(value) / 1000 for value in values)
    true = sorted(values)[math.ceil(fraction * len(values)) - 1]  # nearest rank
    reported = percentile_ms(buckets, fraction)
    assert reported is not None and true <= reported
    assert reported <= max(1.0, true * WIDTH) * (1 + 1e-12)


@given(st.lists(st.dictionaries(st.integers(0, 300), st.integers(1, 10**6), max_size=20), max_size=5))
def test_merged_slices_read_back_from_items(histograms: list[dict[int, int]]) -> None:
    items = [
        {"AggregateKey": "#stats", **{bucket_attribute(b): Decimal(c) for b, c in one.items()}} for one in histograms
    ]
    total = merged(histogram_of(item) for item in items)
    assert sum(total.values()) == sum(sum(one.values()) for one in histograms)
    assert difference(total, {}) == total and difference(total, total) == {}


def test_latency_is_exact_and_rounded_to_whole_milliseconds() -> None:
    (latency,) = latency_seconds(Decimal("1700000000.1235"), [Decimal("1700000000.0000")])
    assert latency == Decimal("0.1235") and milliseconds(latency) == 124  # half up
    assert milliseconds(Decimal("-0.0004")) == 0


def test_an_empty_histogram_has_no_percentile_and_a_fraction_must_be_one() -> None:
    assert percentile_ms({}, 0.5) is None
    with pytest.raises(ValueError, match="fraction"):
        percentile_ms({0: 1}, 0)


def test_attributes_other_than_buckets_are_not_read_as_buckets() -> None:
    item = {"LatencyBucketX": Decimal(1), "LatencyBucket3": "7", "MessagesApplied": Decimal(3), "LatencyBucket4": 2}
    assert histogram_of(item) == {4: 2}
