"""The AggregateTable's key layout: node keys never collide with bookkeeping items or with each other."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregation.aggregate_items import (
    combined_stats,
    is_stats_key,
    node_item_key,
    node_path_of,
    slice_of,
    stats_item_key,
    sum_node_slices,
)
from aggregation.deltas import NodeDelta
from aggregation.names import MARKER_PREFIX, STATS_KEY, marker_id

AWKWARD_PATHS = [
    "Delta",
    "Delta:FXSpot:AMER",
    "#stats",
    "#1 desk",
    "#1 desk:FXSpot",
    "#applied#abc/0of2/0",
    "node#0#Delta",
    "node#x",
    " spaced ",
    "Δέλτα:東京",
]


@pytest.mark.parametrize("path_key", AWKWARD_PATHS)
@pytest.mark.parametrize("slice_index", [0, 1, 9999])
def test_every_path_round_trips_through_its_slice_key_and_is_never_bookkeeping(path_key: str, slice_index: int) -> None:
    key = node_item_key(path_key, slice_index)
    assert node_path_of(key) == path_key
    assert key not in {STATS_KEY} and not key.startswith(MARKER_PREFIX) and not key.startswith("#")


def test_bookkeeping_items_are_never_nodes() -> None:
    assert node_path_of(STATS_KEY) is None
    assert node_path_of(MARKER_PREFIX + marker_id("a" * 64, 0, 2, 0)) is None


def test_a_key_of_the_layout_before_slices_is_read_as_its_own_node() -> None:
    assert node_path_of("Delta:FXSpot") == "Delta:FXSpot"
    assert node_path_of("node#x#Delta") == "node#x#Delta"  # not a slice key: a legacy node of that name


def test_no_slice_can_be_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        node_item_key("Delta", -1)


def test_readers_sum_every_slice_and_the_legacy_item_of_a_node_and_skip_bookkeeping() -> None:
    items = [
        (node_item_key("Delta", 0), Decimal("1.10"), 1),
        (node_item_key("Delta", 3), Decimal("-0.10"), 2),
        ("Delta", Decimal("100"), 4),  # written before the layout had slices
        (node_item_key("#stats", 0), Decimal("7"), 1),  # a node named like the bookkeeping item
        (STATS_KEY, Decimal("999"), 999),
        (MARKER_PREFIX + "x/0of2/0", Decimal(0), 0),
        (node_item_key("Vega", 1), Decimal(0), 0),
    ]
    assert sum_node_slices(items) == {
        "Delta": NodeDelta(Decimal("101.00"), 7),
        "#stats": NodeDelta(Decimal("7"), 1),
        "Vega": NodeDelta(Decimal(0), 0),
    }


def test_a_delta_item_adds_to_the_slice_its_stream_shard_hashes_to_whatever_the_batch() -> None:
    shards = [f"label/shardId-{n:05d}" for n in range(400)]
    chosen = [slice_of(shard, 8) for shard in shards]
    assert chosen == [slice_of(shard, 8) for shard in shards]  # a pure function of the shard
    assert set(chosen) == set(range(8))  # every slice used
    assert max(chosen.count(s) for s in range(8)) < 2 * len(shards) / 8  # spread, no hot slice
    assert {slice_of(shard, 1) for shard in shards} == {0}
    for bad in (0, 10_001):
        with pytest.raises(ValueError, match="slices"):
            slice_of("x", bad)


def test_stats_slices_are_bookkeeping_and_combine_into_one_stats_item() -> None:
    assert stats_item_key(0) == STATS_KEY and stats_item_key(3) == "#stats#3"
    assert all(is_stats_key(stats_item_key(s)) and node_path_of(stats_item_key(s)) is None for s in (0, 1, 9999))
    assert not is_stats_key(node_item_key("#stats", 0)) and not is_stats_key("#statsx")
    items = [
        {
            "AggregateKey": STATS_KEY,
            "MessagesApplied": Decimal(5),
            "LastUpdated": Decimal("10.5"),
            "LatencyBucket3": Decimal(4),
            "LatencyBucket9": Decimal(1),
        },
        {
            "AggregateKey": "#stats#2",
            "MessagesApplied": Decimal(7),
            "LastUpdated": Decimal("12.0"),
            "X": 1,
            "LatencyBucket3": Decimal(2),
        },
        {"AggregateKey": node_item_key("Delta"), "Value": Decimal(1), "TradeCount": 1},
    ]
    assert combined_stats(items) == {
        "AggregateKey": STATS_KEY,
        "MessagesApplied": 12,
        "LastUpdated": Decimal("12.0"),
        "X": 1,
        "LatencyBucket3": 6,  # the histogram summed over the slices, like the count
        "LatencyBucket9": 1,
    }
    assert combined_stats(items[2:]) is None
