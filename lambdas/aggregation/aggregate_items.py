"""The AggregateTable's key layout: hierarchy nodes in a key space of their own, held in slices.

Every `AggregateKey` is one of:

- `node#<slice>#<path>`: slice `<slice>` (a whole number) of the node whose hierarchy path
  key is `<path>` (`Delta:FXSpot`, `aggregation.hierarchy`). A node's totals are the sum
  of its slices' `Value` and `TradeCount`. Which slice a reduce transaction writes is part of
  the idempotency contract (docs/design.md, "Aggregates and keys"): in mode `crt+marker` the
  slice its token names (`aggregation.transactions.transaction_slice`), in mode `crt` the
  slice of its delta items (`slice_of` their `StreamShard`); either way a function of what the
  transaction holds, so a retry of it is the identical request, and a node is written by
  several reducers without one hot item.
- `#...`: bookkeeping, never a node: the reduce stage's running figures, one item per slice
  (`#stats` for slice 0, `#stats#<slice>` for the others), and the markers
  `#applied#<marker id>`.
- anything else: a node key of a release before this layout (its path, unprefixed). It is
  read as one more slice of that node, so a stack upgraded in place keeps its totals
  exact without a migration; `audit rebuild` folds such items into the current layout.

A node key always starts with `node#` and a bookkeeping key with `#`, so no level value,
however it is spelt (`#stats`, `#1 desk`, `node#0#x`), can make a node collide with a
bookkeeping item or with another node: the path follows a fixed prefix and is never
parsed for anything but the slice in front of it.
"""

import hashlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from aggregation.deltas import NodeDelta
from aggregation.latency import LATENCY_BUCKET_PREFIX, bucket_attribute, histogram_of, merged
from aggregation.names import (
    AGGREGATE_KEY,
    BOOKKEEPING_PREFIX,
    LAST_UPDATED,
    MESSAGES_APPLIED,
    NODE_PREFIX,
    SLICE_SEPARATOR,
    STATS_KEY,
)

MAX_SLICES = 10_000
"""Slice indexes stay below this (the key-length budget of `names.MAX_NODE_PREFIX_BYTES`)."""


def slice_of(stream_shard: str, slices: int) -> int:
    """The slice the units of a delta item add to in mode `crt`: a hash of its `StreamShard`,
    never of a batch.

    By the StateTable stream shard its records came from, so a replay of the item, in any reduce
    batch, meets the same slice, and different shards spread over the slices. Mode `crt` keeps
    this rule of every release before issue 37 (a `crt` retry must be the identical transaction
    across an upgrade); `crt+marker` plans an invocation's items together and writes the slice
    each transaction's token names (`aggregation.transactions.transaction_slice`), because a
    reducer's items come from many StateTable shards, and splitting them by slice multiplied the
    writes per message with the slice count.
    """
    if not 1 <= slices <= MAX_SLICES:
        raise ValueError(f"slices must be between 1 and {MAX_SLICES}, got {slices}")
    digest = hashlib.sha256(stream_shard.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % slices


def stats_item_key(slice_index: int) -> str:
    """The `AggregateKey` of the running figures one slice's transactions keep."""
    return STATS_KEY if slice_index == 0 else f"{STATS_KEY}{SLICE_SEPARATOR}{slice_index}"


def is_stats_key(item_key: str) -> bool:
    return item_key == STATS_KEY or item_key.startswith(STATS_KEY + SLICE_SEPARATOR)


def combined_stats(items: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The running figures of every stats slice among these items, as one `#stats` item.

    Items are plain-typed (as boto3's resource or `TypeDeserializer` gives them); other items
    are ignored. `MessagesApplied` and the latency histogram (`aggregation.latency`) are sums
    over the slices; the clock-dependent figures (`LastUpdated`, latest mean and max latency)
    are those of the slice updated last. None without a stats slice.
    """
    slices = [item for item in items if is_stats_key(str(item.get(AGGREGATE_KEY, "")))]
    if not slices:
        return None
    latest = max(slices, key=lambda item: item.get(LAST_UPDATED, 0))
    applied = sum(int(item.get(MESSAGES_APPLIED, 0)) for item in slices)
    buckets = merged(histogram_of(item) for item in slices)
    figures = {name: value for name, value in latest.items() if not name.startswith(LATENCY_BUCKET_PREFIX)}
    return {
        **figures,
        **{bucket_attribute(bucket): count for bucket, count in sorted(buckets.items())},
        AGGREGATE_KEY: STATS_KEY,
        MESSAGES_APPLIED: applied,
    }


def node_item_key(path_key: str, slice_index: int = 0) -> str:
    """The `AggregateKey` of one slice of the node at `path_key`."""
    if slice_index < 0:
        raise ValueError(f"a slice index cannot be negative, got {slice_index}")
    return f"{NODE_PREFIX}{slice_index}{SLICE_SEPARATOR}{path_key}"


def node_path_of(item_key: str) -> str | None:
    """The path key of the node an item holds a slice of; None for a bookkeeping item."""
    if item_key.startswith(NODE_PREFIX):
        slice_digits, separator, path_key = item_key.removeprefix(NODE_PREFIX).partition(SLICE_SEPARATOR)
        if separator and slice_digits.isdigit() and path_key:
            return path_key
    if item_key.startswith(BOOKKEEPING_PREFIX):
        return None
    return item_key  # a node key of the layout before slices (module docstring)


def sum_node_slices(items: Iterable[tuple[str, Decimal, int]]) -> dict[str, NodeDelta]:
    """Each node's totals from its slices: `(AggregateKey, Value, TradeCount)` of any items read.

    Bookkeeping items are left out; a node all of whose slices are zero is kept at zero (a
    reader decides whether an empty node is shown). Every reader of totals calls this.
    """
    totals: dict[str, NodeDelta] = {}
    for item_key, value, trade_count in items:
        path_key = node_path_of(item_key)
        if path_key is None:
            continue
        piece = NodeDelta(value, trade_count)
        totals[path_key] = totals[path_key].plus(piece) if path_key in totals else piece
    return totals
