"""The backlog during and after a `producer send`: read from the send's journals as it runs, and no
lag once the table matches the ledger (issue 34)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from frontend.ledger import LedgerWatcher
from frontend.snapshot import LedgerState, SnapshotBuilder, StatsRecord, TableReading
from frontend.terminal import render_snapshot
from frontend.web import snapshot_document
from producer.generator import GeneratedMessage, MessageKind
from producer.journal import JournalWriter, journal_path
from producer.ledger import Ledger
from producer.model import TradeState
from tests.frontend.dashboard_helpers import totals
from toolkit.ledger import LedgerMessages

LEVELS = ("Delta", "FXSpot", "AMER")


def message(kind: MessageKind, trade_id: str, version: int, value: str) -> GeneratedMessage:
    return GeneratedMessage(
        sequence=0,
        data=b"",
        partition_key=trade_id,
        kind=kind,
        trade_id=trade_id,
        state=TradeState(version, Decimal(value), LEVELS),
    )


def test_a_send_in_progress_is_read_from_every_process_journal(tmp_path: Path) -> None:
    """No ledger.json yet (it is written when the send ends): the journals are the ground truth."""
    ledger_path = tmp_path / "ledger.json"
    watcher = LedgerWatcher(ledger_path)
    assert watcher().nodes is None  # nothing sent yet

    first = JournalWriter(journal_path(ledger_path, "run", 0))
    second = JournalWriter(journal_path(ledger_path, "run", 1))
    first.sending(0, 2)
    first.accepted(
        0, [message(MessageKind.NEW_TRADE, "t-1", 1, "1.5"), message(MessageKind.DUPLICATE, "t-1", 1, "1.5")]
    )
    second.sending(0, 1)
    second.accepted(0, [message(MessageKind.NEW_TRADE, "t-2", 1, "2.25")])
    state = watcher()
    assert state.nodes is not None
    assert state.nodes["Delta"] == totals("3.75", 2)
    assert state.messages == LedgerMessages(sent=3, to_apply=2)

    first.sending(1, 1)
    first.accepted(1, [message(MessageKind.MODIFICATION, "t-1", 2, "10")])  # the send goes on
    state = watcher()
    assert state.nodes is not None
    assert state.nodes["Delta"] == totals("12.25", 2)
    assert state.messages == LedgerMessages(sent=4, to_apply=3)
    first.close()
    second.close()


def test_journals_the_ledger_already_merged_are_not_counted_twice(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.json"
    journal = JournalWriter(journal_path(ledger_path, "run", 0))
    journal.sending(0, 1)
    journal.accepted(0, [message(MessageKind.NEW_TRADE, "t-1", 1, "1")])
    journal.settled(0)
    journal.close()
    ledger = Ledger.load(ledger_path)  # what the send does when it ends: merge, save, then delete
    ledger.save(ledger_path)
    state = LedgerWatcher(ledger_path)()  # read between the save and the delete
    assert state.nodes is not None
    assert state.nodes["Delta"] == totals("1", 1)
    assert state.messages == LedgerMessages(sent=1, to_apply=1)


def test_a_journal_beside_an_earlier_ledger_adds_to_it(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.json"
    ledger = Ledger()
    ledger.record(message(MessageKind.NEW_TRADE, "t-1", 1, "1"))
    ledger.save(ledger_path)
    watcher = LedgerWatcher(ledger_path)
    assert watcher().messages == LedgerMessages(sent=1, to_apply=1)
    journal = JournalWriter(journal_path(ledger_path, "second", 0))
    journal.sending(0, 1)
    journal.accepted(0, [message(MessageKind.NEW_TRADE, "t-2", 1, "2")])
    journal.close()
    state = watcher()
    assert state.nodes is not None
    assert state.nodes["Delta"] == totals("3", 2)
    assert state.messages == LedgerMessages(sent=2, to_apply=2)


def _settled_snapshot(applied: int, to_apply: int, table_matches: bool) -> SnapshotBuilder:
    nodes = {"Delta": totals("3", 2)}
    ledger = LedgerState("l.json", nodes, messages=LedgerMessages(sent=to_apply + 5, to_apply=to_apply))
    reading = TableReading(nodes if table_matches else {"Delta": totals("1", 1)}, StatsRecord(applied, 100.0, 0.1, 0.2))
    clock = iter([200.0, 201.0])
    return SnapshotBuilder("T", lambda: reading, lambda: ledger, clock=lambda: next(clock))


def test_no_lag_once_the_table_matches_the_ledger_and_the_difference_is_named() -> None:
    """A new trade and its modification in one state batch are one write: MessagesApplied stays
    below the ledger's count of messages that change a trade, with nothing in flight."""
    snapshot = _settled_snapshot(applied=17_028, to_apply=17_091, table_matches=True).build()
    assert snapshot.verification.status == "exact"
    assert snapshot.backlog is not None
    assert (snapshot.backlog.behind, snapshot.backlog.superseded) == (0, 63)

    terminal = "\n".join(line.plain for line in render_snapshot(snapshot, width=120).renderables)  # type: ignore[union-attr]
    assert "lag 0" in terminal
    assert "lag 63" not in terminal
    assert "superseded in their batch 63" in terminal
    document = snapshot_document(snapshot)
    assert (document["backlog"]["lag"], document["backlog"]["superseded"]) == ("0", "63")


def test_while_the_table_differs_the_difference_is_lag() -> None:
    snapshot = _settled_snapshot(applied=17_028, to_apply=17_091, table_matches=False).build()
    assert snapshot.verification.status != "exact"
    assert snapshot.backlog is not None
    assert (snapshot.backlog.behind, snapshot.backlog.superseded) == (63, None)
