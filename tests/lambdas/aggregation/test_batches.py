"""Batch-level rules: in-batch dedup and batch identity."""

from decimal import Decimal

from aggregation.batches import is_conflicting_duplicate, select_latest_versions
from aggregation.messages import TradeMessage


def trade(trade_id: str, version: int, value: str = "1") -> TradeMessage:
    return TradeMessage(trade_id, version, Decimal(value), Decimal(0), ("Delta", "FX", "AMER"))


def test_only_the_highest_version_per_trade_is_kept_in_first_seen_order() -> None:
    batch = [trade("a", 1), trade("b", 5), trade("a", 3), trade("a", 2), trade("b", 5), trade("c", 0)]
    selection = select_latest_versions(batch, lambda m: m)
    assert [(m.trade_id, m.version) for m in selection.latest] == [("a", 3), ("b", 5), ("c", 0)]
    assert selection.superseded == 2
    assert selection.same_version == [batch[4]]


def test_same_version_messages_are_set_aside_for_comparison_with_the_applied_one() -> None:
    first, other, same = trade("b", 5, "1"), trade("b", 5, "9"), trade("b", 5, "1.00")
    selection = select_latest_versions([first, other, same], lambda m: m)
    assert selection.latest == [first]
    assert selection.same_version == [other, same]
    assert [is_conflicting_duplicate(m, first.content_digest) for m in (other, same)] == [True, False]
    assert not is_conflicting_duplicate(other, None), "against a newer stored version it is merely stale"


def test_a_newer_version_makes_earlier_same_version_siblings_stale() -> None:
    batch = [trade("a", 1), trade("a", 1, "7"), trade("a", 2)]
    selection = select_latest_versions(batch, lambda m: m)
    assert selection.latest == [batch[2]]
    assert (selection.superseded, selection.same_version) == (2, [])


def test_content_digest_ignores_timestamp_and_number_spelling() -> None:
    base = trade("a", 1, "2.50")
    assert base.content_digest == TradeMessage("a", 1, Decimal("2.5"), Decimal(99), base.hierarchy).content_digest
    assert base.content_digest != TradeMessage("a", 1, Decimal("2.5"), None, ("Vega", "FX", "AMER")).content_digest
