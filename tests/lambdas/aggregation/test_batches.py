"""Batch-level rules: in-batch dedup and batch identity."""

from decimal import Decimal

import pytest

from aggregation.batches import batch_identity, latest_versions
from aggregation.messages import TradeMessage


def trade(trade_id: str, version: int, value: str = "1") -> TradeMessage:
    return TradeMessage(trade_id, version, Decimal(value), Decimal(0), ("Delta", "FX", "AMER"))


def test_only_the_highest_version_per_trade_is_kept_in_first_seen_order() -> None:
    batch = [trade("a", 1), trade("b", 5), trade("a", 3), trade("a", 2), trade("b", 5, "9"), trade("c", 0)]
    kept = latest_versions(batch)
    assert [(m.trade_id, m.version) for m in kept] == [("a", 3), ("b", 5), ("c", 0)]
    assert kept[1].value == Decimal("1"), "on equal versions the first occurrence stands"


def test_batch_identity_is_deterministic_order_sensitive_and_unambiguous() -> None:
    assert batch_identity(["e1", "e2"]) == batch_identity(["e1", "e2"])
    assert batch_identity(["e1", "e2"]) != batch_identity(["e2", "e1"])
    assert batch_identity(["ab", "c"]) != batch_identity(["a", "bc"])
    assert len(batch_identity(["e1"])) == 64
    with pytest.raises(ValueError):
        batch_identity([])
