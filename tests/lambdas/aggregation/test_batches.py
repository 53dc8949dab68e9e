"""Batch-level rules: in-batch dedup and batch identity."""

import hashlib
import json
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from aggregation.batches import is_conflicting_duplicate, select_latest_versions
from aggregation.exact import canonical_number
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


def test_selection_reads_each_message_once_however_many_copies_a_trade_has() -> None:
    """Issue 21, finding 11: 10,000 copies of one trade, then a higher version, took seconds
    because every higher version searched the siblings it made stale. The selection is one
    pass: `message_of` is called exactly once per message (before: about three times each)."""
    copies = [trade("a", 1, "1") for _ in range(9_999)]
    batch = [trade("b", 4), *copies[:5_000], trade("a", 0), *copies[5_000:], trade("a", 2), trade("a", 2, "5")]
    batch += [trade("b", 4, "2"), trade("a", 2)]
    reads: list[TradeMessage] = []

    def message_of(message: TradeMessage) -> TradeMessage:
        reads.append(message)
        return message

    selection = select_latest_versions(batch, message_of)
    assert len(reads) == len(batch)
    assert selection.latest == [batch[0], batch[-4]]
    assert selection.superseded == 1 + 9_999  # "a" 0, then version 1 and its 9,998 siblings
    assert [m.value for m in selection.same_version] == [Decimal(5), Decimal(2), Decimal(1)]
    assert selection.same_version[1] is batch[-2] and selection.same_version[2] is batch[-1]


@given(
    st.decimals(allow_nan=False, allow_infinity=False),
    st.lists(st.text(), min_size=1, max_size=4).map(tuple),
)
def test_the_content_digest_is_the_sha256_of_its_compact_json(value: Decimal, hierarchy: tuple[str, ...]) -> None:
    """Digests are stored with every version: the text hashed stays exactly the compact JSON it always was."""
    text = json.dumps([str(canonical_number(value)), list(hierarchy)], separators=(",", ":"))
    expected = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert TradeMessage("t", 1, value, None, hierarchy).content_digest == expected


def test_a_stored_digest_reads_the_same_today() -> None:
    """`["2.5",["Vega","FX","EMEA"]]`, hashed: the digest a StateTable item holds for this content."""
    message = TradeMessage("t", 1, Decimal("2.50"), None, ("Vega", "FX", "EMEA"))
    assert message.content_digest == "e89c4e6449975a80d074a28322697550f9aa65c4e0af5ebe72556102e619ccd3"
