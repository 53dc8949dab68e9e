"""End-to-end latency figures: from a message's producer `Timestamp` to its totals committed.

A figure, never a total: nothing exact depends on it. The reduce stage measures one latency per
applied message that carries a timestamp (the delta item's `ProducerTimestamps`, on its first
unit only, so a message is measured once, when the transaction holding that unit commits) and
reports it twice:

- as one CloudWatch value per message (Powertools/EMF `EndToEndLatency`, milliseconds), from
  which CloudWatch computes p50, p99 and the maximum;
- as a histogram in the `#stats` slice it writes, for readers without CloudWatch (the local
  runtime, `producer send`): `LatencyBucket<b>` attributes, ADDed outside the transactions.

Only the units an invocation applies itself are measured: a retry whose units the markers show
applied (a cancelled transaction naming them) measures nothing again. A retry within the
ClientRequestToken's 10 minutes, in the same boundaries, is the identical request, and DynamoDB
answers it with success without applying it again: those messages are measured a second time.
Retries are rare, so the figures stay faithful; the exact count is `#stats` `MessagesApplied`,
added inside the transactions.

Buckets are logarithmic, `BUCKETS_PER_DOUBLING` to a doubling: bucket `b` > 0 holds latencies in
(2^((b-1)/8), 2^(b/8)] ms, bucket 0 everything up to 1 ms (a producer clock ahead of the
function's gives a negative latency: it lands there too). A percentile read from the histogram
is its bucket's upper bound: the true value is at most that, and at most 9 % (2^(1/8)) below it.
Why a histogram rather than the values: the `#stats` item must stay small (one write unit), and
a load test of millions of messages fills about 100 buckets between 1 ms and an hour.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Final

from aggregation.exact import exact_difference

BUCKETS_PER_DOUBLING: Final = 8
LATENCY_BUCKET_PREFIX: Final = "LatencyBucket"
"""A `#stats` slice's histogram attributes: `LatencyBucket<b>` (N), messages measured in bucket b."""


def latency_seconds(committed_at: Decimal, producer_timestamps: Iterable[Decimal]) -> list[Decimal]:
    """Each message's latency, exactly: the commit time minus its producer timestamp."""
    return [exact_difference(committed_at, timestamp) for timestamp in producer_timestamps]


def milliseconds(latency: Decimal) -> int:
    """A latency in whole milliseconds (rounded half up), the unit of the metric and the buckets."""
    return int((latency * 1000).to_integral_value(rounding="ROUND_HALF_UP"))


def bucket_of(latency_ms: int) -> int:
    """The histogram bucket of a latency in milliseconds (module docstring)."""
    if latency_ms <= 1:
        return 0
    return math.ceil(BUCKETS_PER_DOUBLING * math.log2(latency_ms))


def bucket_upper_ms(bucket: int) -> float:
    """The largest latency (ms) bucket `bucket` holds."""
    return 2 ** (bucket / BUCKETS_PER_DOUBLING)


def histogram(latencies: Iterable[Decimal]) -> dict[int, int]:
    """Messages per bucket of these latencies (seconds)."""
    return dict(Counter(bucket_of(milliseconds(latency)) for latency in latencies))


def bucket_attribute(bucket: int) -> str:
    return f"{LATENCY_BUCKET_PREFIX}{bucket}"


def histogram_of(item: Mapping[str, Any]) -> dict[int, int]:
    """The histogram a `#stats` item holds (plain-typed, as boto3's resource layer or
    `TypeDeserializer` gives it); attributes that are not buckets are ignored."""
    buckets: dict[int, int] = {}
    for name, count in item.items():
        digits = name.removeprefix(LATENCY_BUCKET_PREFIX)
        if name.startswith(LATENCY_BUCKET_PREFIX) and digits.isdigit() and isinstance(count, Decimal | int):
            buckets[int(digits)] = buckets.get(int(digits), 0) + int(count)
    return buckets


def merged(histograms: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """The sum of several histograms (the slices of `#stats`)."""
    total: Counter[int] = Counter()
    for one in histograms:
        total.update(one)
    return dict(total)


def difference(later: Mapping[int, int], earlier: Mapping[int, int]) -> dict[int, int]:
    """What was measured between two readings of one growing histogram (buckets that shrank,
    e.g. after `audit rebuild` reset `#stats`, count as nothing)."""
    return {bucket: count - earlier.get(bucket, 0) for bucket, count in later.items() if count > earlier.get(bucket, 0)}


def percentile_ms(buckets: Mapping[int, int], fraction: float) -> float | None:
    """The nearest-rank percentile (`fraction` 0.5 for p50, 0.99 for p99) as its bucket's upper
    bound in milliseconds; None for an empty histogram."""
    if not 0 < fraction <= 1:
        raise ValueError(f"a percentile's fraction lies in (0, 1], got {fraction}")
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = math.ceil(fraction * total)
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank:
            return bucket_upper_ms(bucket)
    raise AssertionError("unreachable: the ranks add up to the total")
