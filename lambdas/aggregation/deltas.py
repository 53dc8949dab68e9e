"""Delta arithmetic: how one change of a trade's state moves the aggregates.

A state change is (old state, new state), either side absent for a new or a
removed trade. Its delta subtracts the old value and one trade from every node
above the old leaf and adds the new value and one trade to every node above the
new leaf; where the two paths share nodes the amounts net out, so a trade that
moves desks changes only the nodes it really leaves and enters.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from aggregation.exact import ZERO, exact_difference, exact_sum
from aggregation.hierarchy import aggregate_keys


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
