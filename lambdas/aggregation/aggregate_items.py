"""The AggregateTable's key layout: hierarchy nodes in a key space of their own, held in slices.

Every `AggregateKey` is one of:

- `node#<slice>#<path>`: slice `<slice>` (a whole number) of the node whose hierarchy path
  key is `<path>` (`Delta:FXSpot`, `aggregation.hierarchy`). A node's totals are the sum
  of its slices' `Value` and `TradeCount`: which slice a delta unit adds to is part of the
  idempotency contract (docs/design.md, "Aggregates and keys"), so a node may be written
  by several writers without one hot item. Every release so far writes slice 0 only.
- `#...`: bookkeeping, never a node: `#stats` and the markers `#applied#<marker id>`.
- anything else: a node key of a release before this layout (its path, unprefixed). It is
  read as one more slice of that node, so a stack upgraded in place keeps its totals
  exact without a migration; `audit rebuild` folds such items into the current layout.

A node key always starts with `node#` and a bookkeeping key with `#`, so no level value,
however it is spelt (`#stats`, `#1 desk`, `node#0#x`), can make a node collide with a
bookkeeping item or with another node: the path follows a fixed prefix and is never
parsed for anything but the slice in front of it.
"""

from collections.abc import Iterable
from decimal import Decimal

from aggregation.deltas import NodeDelta
from aggregation.names import BOOKKEEPING_PREFIX, NODE_PREFIX, SLICE_SEPARATOR


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
