"""Value types shared by the generator, the ledger and the verifier.

They live apart from any of those modules so that the ledger (the ground truth)
and the verifier depend only on plain data, never on how messages were made.
Every money amount is a ``decimal.Decimal``; nothing here ever holds a float.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

DEFAULT_HIERARCHY_LEVELS: tuple[str, ...] = ("RiskType", "TradeDesk", "Region")
"""The configured hierarchy levels when nothing else is said (docs/design.md, "Messages")."""

AGGREGATE_KEY_SEPARATOR = ":"


@dataclass(frozen=True, slots=True)
class TradeState:
    """What the pipeline should hold for one trade: its highest valid version.

    ``hierarchy`` holds the values of the configured levels, in level order, so
    that two states compare equal exactly when the pipeline would treat them alike.
    """

    version: int
    value: Decimal
    hierarchy: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AggregateNode:
    """One hierarchy node's totals: the exact sum of values and the trade count."""

    value: Decimal
    trade_count: int

    @property
    def is_empty(self) -> bool:
        """A node that no trade is under any more; equal to an absent node."""
        return self.trade_count == 0 and self.value == 0


def parse_hierarchy_levels(text: str) -> tuple[str, ...]:
    """Parse a comma-separated level list such as ``RiskType,TradeDesk,Region``.

    Raises ValueError on empty, duplicate or ``:``-containing level names, since
    any of those would make aggregate keys ambiguous.
    """
    levels = tuple(part.strip() for part in text.split(","))
    if not levels or any(not level for level in levels):
        raise ValueError(f"hierarchy levels must be non-empty names separated by commas, got {text!r}")
    if len(set(levels)) != len(levels):
        raise ValueError(f"hierarchy levels must be distinct, got {text!r}")
    if any(AGGREGATE_KEY_SEPARATOR in level for level in levels):
        raise ValueError(f"hierarchy level names must not contain ':', got {text!r}")
    return levels
