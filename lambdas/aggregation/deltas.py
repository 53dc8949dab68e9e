"""Delta arithmetic: how one change of a trade's state moves the aggregates.

A state change is (old state, new state), either side absent for a new or a
removed trade. Its delta subtracts the old value and one trade from every node
above the old leaf and adds the new value and one trade to every node above the
new leaf; where the two paths share nodes the amounts net out, so a trade that
moves desks changes only the nodes it really leaves and enters.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aggregation.exact import ZERO, exact_difference, exact_sum
from aggregation.hierarchy import aggregate_keys
from aggregation.names import TRADE_HIERARCHY, TRADE_NODE_PATH


@dataclass(frozen=True)
class NodeDelta:
    """The change of one aggregate node: exact `Value` and `TradeCount` amounts."""

    value: Decimal
    trade_count: int

    def plus(self, other: "NodeDelta") -> "NodeDelta":
        return NodeDelta(exact_sum(self.value, other.value), self.trade_count + other.trade_count)

    def is_zero(self) -> bool:
        return self.value.is_zero() and self.trade_count == 0


@dataclass(frozen=True)
class TradeState:
    """What the state table holds of a trade, as far as the aggregates care."""

    value: Decimal
    path: tuple[str, ...]  # hierarchy values in level order


def image_node_path(image: Mapping[str, Any], levels: Sequence[str]) -> tuple[str, ...] | None:
    """The nodes a decoded StateTable image is counted in (its path), or None for no node at all.

    A trade must be subtracted from exactly the nodes it was added to. Both sides of that
    are computed from the same image (a version's NewImage when it arrives, the identical
    OldImage when the next version replaces it), so a function of the image alone makes them
    agree: the stored `NodePath`, written by the state function in the level order configured
    then, is used whenever the image has it, and `levels` (the current `hierarchyLevels`)
    never enter. Reordering or adding levels therefore moves each trade, at its next version,
    from its old nodes to its new ones, and never leaves a count 0 with a value behind.

    An image written by a release that stored no path falls back to its `Hierarchy` read with
    the current `levels`: the same nodes as before exactly when the levels have not changed
    since it was written (README, "Known limits"). When the current levels cannot place it at
    all (a level was added since: `Hierarchy` holds only the levels configured then, each one
    validated present), it is counted in no node, on both sides, rather than raising:

    - raising would fail the map batch on every retry (the image never changes), stalling its
      shard until the stream record expires, and then losing every record behind it;
    - any node computed now is a guess: subtracting from a node the trade never entered
      would corrupt a second node without repairing the first;
    - "no node" is consistent with itself: such a NewImage is added nowhere, and when it
      becomes the OldImage of the next version it is subtracted from nowhere, so that
      trade's later versions are exact. Only the contribution made under the old levels stays
      where it was, which is the documented limit (change levels on a stack whose state items
      all carry a path, or on a fresh stack); the map function counts such images in a metric.
    """
    stored = image.get(TRADE_NODE_PATH)
    if isinstance(stored, list) and stored and all(isinstance(value, str) for value in stored):
        return tuple(stored)
    hierarchy = image.get(TRADE_HIERARCHY)
    if not isinstance(hierarchy, Mapping) or not all(isinstance(hierarchy.get(level), str) for level in levels):
        return None
    return tuple(str(hierarchy[level]) for level in levels)


def add_deltas(total: dict[str, NodeDelta], more: Mapping[str, NodeDelta]) -> None:
    """Accumulate `more` into `total` in place, dropping nodes that net to zero."""
    for key, delta in more.items():
        combined = total[key].plus(delta) if key in total else delta
        if combined.is_zero():
            total.pop(key, None)
        else:
            total[key] = combined


def state_change_deltas(old: TradeState | None, new: TradeState | None) -> dict[str, NodeDelta]:
    """Node deltas of one trade going from `old` to `new` (zero-sum nodes omitted)."""
    deltas: dict[str, NodeDelta] = {}
    if old is not None:
        leaving = NodeDelta(exact_difference(ZERO, old.value), -1)
        add_deltas(deltas, dict.fromkeys(aggregate_keys(old.path), leaving))
    if new is not None:
        add_deltas(deltas, dict.fromkeys(aggregate_keys(new.path), NodeDelta(new.value, 1)))
    return deltas


def sum_state_changes(changes: Iterable[tuple[TradeState | None, TradeState | None]]) -> dict[str, NodeDelta]:
    """The net node deltas of many state changes."""
    total: dict[str, NodeDelta] = {}
    for old, new in changes:
        add_deltas(total, state_change_deltas(old, new))
    return total
