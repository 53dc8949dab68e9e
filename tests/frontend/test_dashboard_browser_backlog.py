"""The web page during and after a `producer send`, in Debian's headless Chromium (issue 34).

While the send runs there is no ledger.json yet, only the sending processes' journals: the page
must show the backlog and "draining: X of Y applied" from them. Once the table matches the ledger
it must show no lag, and name the difference between the two counts instead."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Browser, expect

from producer.generator import GeneratedMessage, MessageKind
from producer.journal import JournalWriter, journal_path
from producer.model import TradeState
from tests.frontend.dashboard_helpers import DashboardLauncher, put_leaf_with_parents, put_stats

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table


def new_trade(trade_id: str, version: int, value: str, kind: MessageKind = MessageKind.NEW_TRADE) -> GeneratedMessage:
    return GeneratedMessage(
        sequence=0,
        data=b"",
        partition_key=trade_id,
        kind=kind,
        trade_id=trade_id,
        state=TradeState(version, Decimal(value), ("Delta", "FXSpot", "AMER")),
    )


def test_the_page_shows_the_backlog_of_a_send_in_progress_then_no_lag_once_exact(
    browser: Browser, aggregate_table: Table, dashboards: DashboardLauncher, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.json"
    processes = [JournalWriter(journal_path(ledger, "run", process)) for process in range(2)]
    for process, journal in enumerate(processes):  # two processes, 3 trades each, then a modification
        journal.sending(0, 4)
        trades = [new_trade(f"p{process}-t{number}", 1, "1.25") for number in range(3)]
        journal.accepted(0, [*trades, new_trade(f"p{process}-t0", 2, "2.5", MessageKind.MODIFICATION)])
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "2.5", 2)  # 2 of 8 applied so far
    put_stats(aggregate_table, messages_applied=2, last_updated=time.time(), mean="0.2", maximum="0.4")

    dashboard = dashboards.start(aggregate_table.name, ledger_path=ledger)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(dashboard.url)
    expect(page.locator("#backlog-ingested")).to_have_text("8")
    expect(page.locator("#backlog-to-apply")).to_have_text("8")
    expect(page.locator("#backlog-lag")).to_have_text("6")
    expect(page.locator("#verification")).to_have_text("draining: 2 of 8 applied")

    for journal in processes:  # the send goes on: one more trade each
        journal.sending(1, 1)
        journal.accepted(1, [new_trade(f"late-{journal.path.name}", 1, "1")])
    expect(page.locator("#backlog-ingested")).to_have_text("10")
    expect(page.locator("#backlog-lag")).to_have_text("8")
    expect(page.locator("#verification")).to_have_text("draining: 2 of 10 applied")

    # Drained: the totals match the ledger, but each process's trade and its modification shared a
    # state batch, so only the modification was written: 8 applied of the ledger's 10. Not lag.
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "12", 8)
    put_stats(aggregate_table, messages_applied=8, last_updated=time.time(), mean="0.2", maximum="0.4")
    expect(page.locator("#verification")).to_have_text("exact · 3 nodes match the ledger")
    expect(page.locator("#backlog-lag")).to_have_text("0")
    expect(page.locator("#backlog-superseded-line")).to_be_visible()
    expect(page.locator("#backlog-superseded")).to_have_text("2")
    for journal in processes:
        journal.close()
    page.close()
