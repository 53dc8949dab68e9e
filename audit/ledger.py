"""The producer's ground-truth ledger, read tolerantly (its format belongs to `producer/ledger.py`).

Only the expected node totals are needed. They are taken from the ledger's ``aggregates``
when present, else derived from its ``trades`` (the final state of every trade). Amounts may
be decimal strings or JSON numbers (parsed as Decimal, never as float).
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from aggregation.deltas import NodeDelta
from aggregation.exact import ZERO, exact_sum
from audit.targets import AuditError

KEY_SEPARATOR = ":"


def load_ledger_totals(path: Path) -> dict[str, NodeDelta]:
    """Expected totals per aggregate key; `AuditError` (one line) when the file cannot say."""
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)
    except FileNotFoundError:
        raise AuditError(f"ledger {path} does not exist") from None
    except (OSError, ValueError) as error:
        raise AuditError(f"ledger {path} is not readable JSON: {error}") from None
    if not isinstance(document, dict):
        raise AuditError(f"ledger {path} is not a JSON object")
    try:
        aggregates = document.get("aggregates")
        if isinstance(aggregates, dict):
            return {
                str(key): NodeDelta(Decimal(str(node["Value"])), int(node["TradeCount"]))
                for key, node in aggregates.items()
            }
        trades = document.get("trades")
        levels = document.get("hierarchy_levels")
        if isinstance(trades, dict) and isinstance(levels, list):
            totals: dict[str, NodeDelta] = {}
            for trade in trades.values():
                path_values = [str(trade["Hierarchy"][level]) for level in levels]
                for depth in range(1, len(path_values) + 1):
                    key = KEY_SEPARATOR.join(path_values[:depth])
                    current = totals.get(key, NodeDelta(ZERO, 0))
                    totals[key] = NodeDelta(
                        exact_sum(current.value, Decimal(str(trade["Value"]))), current.trade_count + 1
                    )
            return totals
    except (KeyError, TypeError, ValueError, InvalidOperation) as error:
        raise AuditError(f"ledger {path} has a malformed entry: {error!r}") from None
    raise AuditError(f"ledger {path} has neither 'aggregates' nor 'trades' with 'hierarchy_levels'")
