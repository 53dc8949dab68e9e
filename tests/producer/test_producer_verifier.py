"""The verifier: passes an exact pipeline, fails loudly on any deviation."""

from __future__ import annotations

import io
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from rich.console import Console

from producer.display import render_verification_report
from producer.ledger import Ledger
from producer.model import AggregateNode
from producer.verifier import AggregateSnapshot, compare_aggregates, verify_pipeline, wait_for_drain
from toolkit.pipeline import PipelineTarget

FillTables = Callable[[PipelineTarget, Ledger], None]


def _render(report: object) -> str:
    buffer = io.StringIO()
    render_verification_report(report, Console(file=buffer, width=200))  # type: ignore[arg-type]
    return buffer.getvalue()


def test_exact_tables_pass(pipeline: PipelineTarget, sent_ledger: tuple[Path, Ledger], fill_tables: FillTables) -> None:
    path, ledger = sent_ledger
    fill_tables(pipeline, ledger)
    report = verify_pipeline(pipeline, path, timeout=10, settle_seconds=0.5, poll_interval=0.1)
    assert report.exact
    assert report.trades_checked == len(ledger.trades)
    assert report.messages_applied == ledger.counts.messages_sent
    assert "EXACT" in _render(report)


def test_corrupted_tables_fail_loudly(
    pipeline: PipelineTarget, sent_ledger: tuple[Path, Ledger], fill_tables: FillTables
) -> None:
    path, ledger = sent_ledger
    fill_tables(pipeline, ledger)
    client = pipeline.dynamodb()
    node_key = next(iter(ledger.aggregates()))
    client.update_item(
        TableName=pipeline.aggregate_table,
        Key={"AggregateKey": {"S": node_key}},
        UpdateExpression="ADD #value :cent",
        ExpressionAttributeNames={"#value": "Value"},
        ExpressionAttributeValues={":cent": {"N": "0.01"}},
    )
    missing_trade, stale_trade = list(ledger.trades)[:2]
    client.delete_item(TableName=pipeline.state_table, Key={"TradeID": {"S": missing_trade}})
    client.update_item(
        TableName=pipeline.state_table,
        Key={"TradeID": {"S": stale_trade}},
        UpdateExpression="SET #version = :old",
        ExpressionAttributeNames={"#version": "Version"},
        ExpressionAttributeValues={":old": {"N": str(ledger.trades[stale_trade].version - 1)}},
    )

    report = verify_pipeline(pipeline, path, timeout=10, settle_seconds=0.3, poll_interval=0.1)

    assert not report.exact
    assert report.settled
    [node] = report.aggregates.mismatches
    assert node.key == node_key
    assert node.value_difference == Decimal("0.01")
    assert node.count_difference == 0
    problems = {mismatch.trade_id: mismatch.problem for mismatch in report.trade_mismatches}
    assert problems == {missing_trade: "missing", stale_trade: "wrong version"}
    text = _render(report)
    assert "MISMATCH" in text and node_key in text and "+0.01" in text
    assert missing_trade in text and "wrong version" in text


def test_compare_aggregates_is_exact_and_symmetric() -> None:
    expected = {"Delta": AggregateNode(Decimal("0.3"), 2), "Delta:FXSpot": AggregateNode(Decimal("0.3"), 2)}
    same = {
        "Delta": AggregateNode(Decimal("0.30"), 2),  # trailing zeros are the same number
        "Delta:FXSpot": AggregateNode(Decimal("0.3"), 2),
        "Gamma": AggregateNode(Decimal("0"), 0),  # emptied node: equal to absent
    }
    assert compare_aggregates(expected, same).exact
    hash_named = compare_aggregates(expected, {**same, "#stats": AggregateNode(Decimal("5"), 1)})
    assert [m.key for m in hash_named.mismatches] == ["#stats"]  # a node's name, compared like any other
    off = compare_aggregates(expected, {"Delta": AggregateNode(Decimal("0.30000000000000004"), 2)})
    assert [m.key for m in off.mismatches] == ["Delta", "Delta:FXSpot"]
    assert off.mismatches[1].actual is None
    drift = compare_aggregates({}, {"Gamma": AggregateNode(Decimal("0.01"), 0)})
    assert [m.key for m in drift.mismatches] == ["Gamma"]  # count 0 but value left behind
    extra = compare_aggregates(expected, {**same, "Rho": AggregateNode(Decimal("1"), 1)})
    assert [m.key for m in extra.mismatches] == ["Rho"] and extra.mismatches[0].expected is None


def test_wait_for_drain_returns_on_match_settle_or_timeout() -> None:
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    expected = {"Delta": AggregateNode(Decimal("3"), 3)}
    progress = iter([Decimal(1), Decimal(2), Decimal(3)])

    def growing() -> AggregateSnapshot:
        value = next(progress, Decimal(3))
        return AggregateSnapshot({"Delta": AggregateNode(value, int(value))}, None)

    snapshot, settled, waited = wait_for_drain(
        growing, expected, timeout=60, settle_seconds=5, poll_interval=1, clock=lambda: clock[0], sleep=sleep
    )
    assert settled and snapshot.nodes == expected and waited == 2

    stuck = AggregateSnapshot({"Delta": AggregateNode(Decimal(2), 2)}, None)
    clock[0] = 0.0
    _, settled, waited = wait_for_drain(
        lambda: stuck, expected, timeout=60, settle_seconds=5, poll_interval=1, clock=lambda: clock[0], sleep=sleep
    )
    assert settled and waited == 5

    counter = iter(range(1000))
    clock[0] = 0.0
    _, settled, waited = wait_for_drain(
        lambda: AggregateSnapshot({"Delta": AggregateNode(Decimal(next(counter)), 1)}, None),
        expected,
        timeout=10,
        settle_seconds=5,
        poll_interval=1,
        clock=lambda: clock[0],
        sleep=sleep,
    )
    assert not settled and waited == 10
