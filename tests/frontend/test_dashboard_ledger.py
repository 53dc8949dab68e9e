"""The producer's ledger: read tolerantly, exactly, and safely while it is being rewritten."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

from frontend.ledger import LedgerWatcher
from producer.ledger import Ledger, LedgerCounts
from producer.model import TradeState
from tests.frontend.dashboard_helpers import totals
from toolkit.ledger import LedgerError, LedgerMessages, load_ledger


def test_producer_format_decimal_strings_and_integer_or_string_counts(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "trades": {"t-1": {"Version": 3}},
                "aggregates": {
                    "Delta": {"Value": "1234567.891234", "TradeCount": 2},
                    "Delta:FXSpot": {"Value": "12345678901234567890.123456789012345678", "TradeCount": "7"},
                    "#1 desk": {"Value": "0.5", "TradeCount": 1},
                },
            }
        )
    )
    assert load_ledger(path) == {  # every key of the map is a node, `#…` ones too
        "Delta": totals("1234567.891234", 2),
        "Delta:FXSpot": totals("12345678901234567890.123456789012345678", 7),
        "#1 desk": totals("0.5", 1),
    }


def test_json_numbers_are_read_as_exact_decimals_and_other_layouts_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('{"Aggregates": [{"AggregateKey": "A", "value": 0.30000000000000004, "trade_count": 1.0}]}')
    assert load_ledger(path) == {"A": totals("0.30000000000000004", 1)}
    assert isinstance(load_ledger(path)["A"].value, Decimal)
    path.write_text('{"A": {"Value": 5, "count": 2}, "generated_at": 17}')  # the map is the document
    assert load_ledger(path) == {"A": totals("5", 2)}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"aggregates": 3}', "has no aggregates map"),
        ('{"aggregates": {"A": {"TradeCount": 1}}}', "none of the fields Value, value"),
        ('{"aggregates": {"A": {"Value": "abc", "TradeCount": 1}}}', "Value of 'A' is not a decimal number"),
        ('{"aggregates": {"A": {"Value": "Infinity", "TradeCount": 1}}}', "Value of 'A' is not a decimal number"),
        ('{"aggregates": {"A": {"Value": true, "TradeCount": 1}}}', "Value of 'A' is not a decimal number"),
        ('{"aggregates": {"A": {"Value": "1", "TradeCount": 1.5}}}', "TradeCount of 'A' is not a whole number"),
        ('{"aggregates": {"A": "1"}}', "entry 'A' is not an object"),
    ],
)
def test_unusable_ledgers_say_why_in_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(content)
    with pytest.raises(LedgerError, match=message) as raised:
        load_ledger(path)
    assert "\n" not in str(raised.value)


def test_watcher_follows_the_file_and_keeps_the_last_good_reading_over_a_partial_write(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    watcher = LedgerWatcher(path)
    assert (watcher().nodes, watcher().error) == (None, None)  # not written yet: no ledger

    path.write_text('{"aggregates": {"A": {"Value": "1", "TradeCount": 1}}}')
    assert watcher().nodes == {"A": totals("1", 1)}

    path.write_text('{"aggregates": {"A": {"Val')  # the producer is mid-write
    os.utime(path, ns=(1, 1))
    assert watcher().nodes == {"A": totals("1", 1)}

    path.write_text('{"aggregates": {"A": {"Value": "2", "TradeCount": 2}}}')
    os.utime(path, ns=(2, 2))
    assert watcher().nodes == {"A": totals("2", 2)}

    path.unlink()  # `producer clear`
    assert watcher().nodes is None


def test_watcher_reports_a_ledger_that_never_parsed(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('"not a ledger"')
    state = LedgerWatcher(path)()
    assert state.nodes is None
    assert state.error is not None
    assert "has no aggregates map" in state.error


def test_reads_the_file_the_producer_writes(tmp_path: Path) -> None:
    """Contract with ``producer/ledger.py``: whatever it saves, the badge reads the same totals."""
    ledger = Ledger()
    ledger.observe("t-1", TradeState(1, Decimal("0.1"), ("Delta", "FXSpot", "AMER")))
    ledger.observe("t-2", TradeState(4, Decimal("0.2"), ("Delta", "FXSpot", "EMEA")))
    ledger.observe("t-3", TradeState(2, Decimal("-1234567.891234"), ("<b>", "Rates", "AMER")))
    path = tmp_path / "ledger.json"
    ledger.save(path)
    nodes = load_ledger(path)
    assert nodes["Delta"] == totals("0.3", 2)
    assert nodes["Delta:FXSpot:EMEA"] == totals("0.2", 1)
    assert nodes["<b>:Rates:AMER"] == totals("-1234567.891234", 1)
    assert nodes == {key: totals(str(node.value), node.trade_count) for key, node in ledger.aggregates().items()}


def test_the_watcher_reads_the_producer_counts_for_the_backlog(tmp_path: Path) -> None:
    """Only new trades and modifications change a trade's state: what ``MessagesApplied`` reaches."""
    counts = LedgerCounts(messages_sent=10, new_trades=4, modifications=3, moves=1, duplicates=2, malformed=1)
    path = tmp_path / "ledger.json"
    Ledger(counts=counts).save(path)
    assert LedgerWatcher(path)().messages == LedgerMessages(sent=10, to_apply=7)
    path.write_text(json.dumps({"aggregates": {}}))  # a ledger without counts: no backlog to show
    os.utime(path, ns=(1, 1))
    assert LedgerWatcher(path)().messages is None


@pytest.mark.parametrize("data", [b'{"aggregates": {"\xff": {}}}', '{"aggregates": {"café": {}}}'.encode("latin-1")])
def test_a_ledger_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, data: bytes) -> None:
    """`python -m frontend --terminal` (and `audit reconcile --ledger`) crashed with UnicodeDecodeError
    on such a file (issue 38): the badge says the ledger is unreadable, naming it, like invalid JSON."""
    path = tmp_path / "ledger.json"
    path.write_bytes(data)
    with pytest.raises(LedgerError, match=r"ledger\.json is not UTF-8 text \(byte \d+\)"):
        load_ledger(path)
    state = LedgerWatcher(path)()
    assert state.nodes is None and state.error is not None
    assert state.error.startswith(f"{path} is not UTF-8 text") and "\n" not in state.error
