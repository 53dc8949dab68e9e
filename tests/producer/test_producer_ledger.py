"""The ledger: ground truth from a hand-made scenario with hand-computed totals."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path

import pytest

from producer.generator import GeneratedMessage, GeneratorConfig, MessageKind, generate_messages
from producer.ledger import Ledger
from producer.model import AggregateNode, TradeState
from toolkit.ledger import LedgerError

DELTA_FX_AMER = ("Delta", "FXSpot", "AMER")
DELTA_FX_EMEA = ("Delta", "FXSpot", "EMEA")
GAMMA_RATES_APAC = ("Gamma", "Rates", "APAC")
DELTA_RATES_APAC = ("Delta", "Rates", "APAC")


def _message(
    sequence: int,
    kind: MessageKind,
    trade_id: str | None,
    state: TradeState | None,
    *,
    moves: bool = False,
    malformed_kind: str | None = None,
) -> GeneratedMessage:
    # The bytes do not matter to the ledger; only what was sent does.
    return GeneratedMessage(sequence, b"{}", trade_id or "x", kind, trade_id, state, moves, malformed_kind)


def _scenario() -> list[GeneratedMessage]:
    t1 = TradeState(1, Decimal("10.10"), DELTA_FX_AMER)
    return [
        _message(0, MessageKind.NEW_TRADE, "T1", t1),
        _message(1, MessageKind.NEW_TRADE, "T2", TradeState(1, Decimal("0.1"), DELTA_FX_EMEA)),
        _message(2, MessageKind.NEW_TRADE, "T3", TradeState(1, Decimal("0.2"), GAMMA_RATES_APAC)),
        _message(3, MessageKind.DUPLICATE, "T1", t1),
        _message(4, MessageKind.MODIFICATION, "T2", TradeState(3, Decimal("0.2"), DELTA_FX_EMEA)),
        _message(5, MessageKind.OUT_OF_ORDER, "T2", TradeState(2, Decimal("5.00"), GAMMA_RATES_APAC)),
        _message(6, MessageKind.MODIFICATION, "T3", TradeState(2, Decimal("0.1"), DELTA_RATES_APAC), moves=True),
        _message(7, MessageKind.MALFORMED, None, None, malformed_kind="value_nan"),
    ]


# Worked out by hand: T1 = 10.10 at Delta:FXSpot:AMER; T2 = 0.2 at Delta:FXSpot:EMEA (v3 beats the
# late v2); T3 = 0.1, moved from Gamma:Rates:APAC to Delta:Rates:APAC. Gamma is empty, so absent.
EXPECTED = {
    "Delta": AggregateNode(Decimal("10.40"), 3),
    "Delta:FXSpot": AggregateNode(Decimal("10.30"), 2),
    "Delta:FXSpot:AMER": AggregateNode(Decimal("10.10"), 1),
    "Delta:FXSpot:EMEA": AggregateNode(Decimal("0.2"), 1),
    "Delta:Rates": AggregateNode(Decimal("0.1"), 1),
    "Delta:Rates:APAC": AggregateNode(Decimal("0.1"), 1),
}


def test_hand_scenario_totals_and_counts() -> None:
    ledger = Ledger()
    for message in _scenario():
        ledger.record(message)
    assert ledger.aggregates() == EXPECTED
    assert ledger.trades["T2"] == TradeState(3, Decimal("0.2"), DELTA_FX_EMEA)
    counts = ledger.counts
    assert (counts.messages_sent, counts.new_trades, counts.modifications, counts.moves) == (8, 3, 2, 1)
    assert (counts.duplicates, counts.out_of_order, counts.malformed) == (1, 1, 1)
    assert counts.malformed_by_kind == {"value_nan": 1}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_arrival_order_does_not_matter(seed: int) -> None:
    messages = _scenario()
    random.Random(seed).shuffle(messages)  # retries reorder what Kinesis receives
    ledger = Ledger()
    for message in messages:
        ledger.record(message)
    assert ledger.aggregates() == EXPECTED


def test_runs_merge_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "ledger.json"
    first = Ledger()
    for message in _scenario():
        first.record(message)
    first.save(path)
    assert not [p for p in path.parent.iterdir() if p.name != "ledger.json"]  # no temp file left behind

    second = Ledger.load(path)
    # Run 2: T1 moves to Gamma with a new value; a stale T3 version arrives; T4 is new.
    second.record(
        _message(0, MessageKind.MODIFICATION, "T1", TradeState(2, Decimal("-3.05"), GAMMA_RATES_APAC), moves=True)
    )
    second.record(_message(1, MessageKind.OUT_OF_ORDER, "T3", TradeState(1, Decimal("99"), DELTA_FX_AMER)))
    second.record(_message(2, MessageKind.NEW_TRADE, "T4", TradeState(1, Decimal("0.3"), DELTA_FX_EMEA)))
    second.save(path)

    merged = Ledger.load(path)
    assert merged.aggregates() == {
        "Delta": AggregateNode(Decimal("0.6"), 3),
        "Delta:FXSpot": AggregateNode(Decimal("0.5"), 2),
        "Delta:FXSpot:EMEA": AggregateNode(Decimal("0.5"), 2),
        "Delta:Rates": AggregateNode(Decimal("0.1"), 1),
        "Delta:Rates:APAC": AggregateNode(Decimal("0.1"), 1),
        "Gamma": AggregateNode(Decimal("-3.05"), 1),
        "Gamma:Rates": AggregateNode(Decimal("-3.05"), 1),
        "Gamma:Rates:APAC": AggregateNode(Decimal("-3.05"), 1),
    }
    assert merged.counts.messages_sent == 11
    assert merged.counts.moves == 2

    document = json.loads(path.read_text())
    assert document["aggregates"]["Delta"] == {"Value": "0.6", "TradeCount": 3}
    assert document["trades"]["T1"] == {
        "Version": 2,
        "Value": "-3.05",
        "Hierarchy": {"RiskType": "Gamma", "TradeDesk": "Rates", "Region": "APAC"},
    }


def test_tampered_or_foreign_ledgers_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    ledger = Ledger()
    for message in _scenario():
        ledger.record(message)
    ledger.save(path)
    with pytest.raises(LedgerError, match="hierarchy levels"):
        Ledger.load(path, ("Region", "RiskType"))
    document = json.loads(path.read_text())
    document["aggregates"]["Delta"]["Value"] = "10.41"
    path.write_text(json.dumps(document))
    with pytest.raises(LedgerError, match="inconsistent"):
        Ledger.load(path)
    path.write_text("{not json")
    with pytest.raises(LedgerError):
        Ledger.load(path)
    assert Ledger.load(tmp_path / "absent.json").trades == {}


def test_generated_stream_matches_an_independent_replay() -> None:
    """Replaying the raw bytes with a naive highest-version rule gives the ledger's totals."""
    messages = generate_messages(GeneratorConfig(seed=21, count=4000, malformed_pct=5))
    ledger = Ledger()
    for message in messages:
        ledger.record(message)

    final: dict[str, tuple[int, Decimal, tuple[str, ...]]] = {}
    for message in messages:
        if message.kind is MessageKind.MALFORMED:
            continue
        document = json.loads(message.data, parse_float=Decimal)
        hierarchy = tuple(document["Hierarchy"][level] for level in ("RiskType", "TradeDesk", "Region"))
        candidate = (document["Version"], Decimal(document["Value"]), hierarchy)
        current = final.get(document["TradeID"])
        if current is None or candidate[0] > current[0]:
            final[document["TradeID"]] = candidate
    totals: dict[str, list[Decimal]] = {}
    for _, value, hierarchy in final.values():
        for depth in (1, 2, 3):
            totals.setdefault(":".join(hierarchy[:depth]), []).append(value)
    expected = {key: AggregateNode(sum(values, Decimal(0)), len(values)) for key, values in totals.items()}
    assert ledger.aggregates() == expected
