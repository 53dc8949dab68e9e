"""The shared model: tree building, throughput and latency from #stats samples, verification, snapshots."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest

from frontend.snapshot import (
    LedgerState,
    SnapshotBuilder,
    StatsHistory,
    StatsRecord,
    TableReadError,
    TableReading,
    TreeNode,
    build_tree,
    sum_totals,
    verify,
)
from tests.frontend.dashboard_helpers import HOSTILE_NAME, totals
from toolkit.ledger import LedgerMessages, NodeTotals


def shape(nodes: tuple[TreeNode, ...]) -> list[object]:
    return [(node.key, node.name, node.depth, shape(node.children)) for node in nodes]


def test_tree_nests_keys_by_level_sorted_and_a_level_value_starting_with_hash_is_a_node() -> None:
    nodes = {
        "Vega": totals("1", 1),
        "Delta:FXSpot:EMEA": totals("2", 1),
        "Delta": totals("5", 2),
        "Delta:FXSpot": totals("5", 2),
        "Delta:FXSpot:AMER": totals("3", 1),
        "Vega:Rates": totals("1", 1),
        "#1 desk": totals("4", 1),
    }
    tree = build_tree(nodes)
    assert shape(tree) == [
        ("#1 desk", "#1 desk", 0, []),
        (
            "Delta",
            "Delta",
            0,
            [
                (
                    "Delta:FXSpot",
                    "FXSpot",
                    1,
                    [("Delta:FXSpot:AMER", "AMER", 2, []), ("Delta:FXSpot:EMEA", "EMEA", 2, [])],
                )
            ],
        ),
        ("Vega", "Vega", 0, [("Vega:Rates", "Rates", 1, [])]),
    ]
    assert tree[1].totals == totals("5", 2)


def test_tree_keeps_a_parent_without_its_own_item_and_hostile_names_verbatim() -> None:
    tree = build_tree({f"{HOSTILE_NAME}:Desk": totals("1.5", 1)})
    assert shape(tree) == [(HOSTILE_NAME, HOSTILE_NAME, 0, [(f"{HOSTILE_NAME}:Desk", "Desk", 1, [])])]
    assert tree[0].totals is None
    assert tree[0].children[0].totals == totals("1.5", 1)


def test_sums_are_exact_beyond_the_default_decimal_precision() -> None:
    big = Decimal("12345678901234567890.123456789012345678")  # 38 digits; the default context keeps 28
    total = sum_totals([NodeTotals(big, 1), NodeTotals(Decimal("0.000000000000000001"), 2), None])
    assert total == NodeTotals(Decimal("12345678901234567890.123456789012345679"), 3)


def stats(applied: int, updated: float, mean: float | None = 0.5, maximum: float | None = 1.0) -> StatsRecord:
    return StatsRecord(applied, updated, mean, maximum)


def test_throughput_is_the_growth_of_messages_applied_over_the_rate_window() -> None:
    history = StatsHistory(rate_window_seconds=5)
    history.record(100.0, stats(0, 99.0))
    assert history.applied_per_second() is None  # one sample is no rate
    history.record(101.0, stats(50, 100.5))
    assert history.applied_per_second() == pytest.approx(50)
    for second in range(2, 12):
        history.record(100.0 + second, stats(50 + 100 * (second - 1), 100.0 + second))
    # Only the last ~5 s count: 100 messages a second, whatever happened before.
    assert history.applied_per_second() == pytest.approx(100)
    history.record(112.0, stats(1050, 111.0))  # nothing applied in the last second
    assert history.applied_per_second() == pytest.approx(80)


def test_no_stats_item_yet_means_no_figures() -> None:
    history = StatsHistory()
    history.record(1.0, None)
    history.record(2.0, None)
    assert history.applied_per_second() is None
    assert history.latency(2.0).mean_seconds is None
    assert [point.applied_per_second for point in history.chart()] == [None, None]


def test_latency_over_the_last_minute_weights_each_transaction_by_the_messages_it_applied() -> None:
    history = StatsHistory(latency_window_seconds=60)
    history.record(1000.0, stats(0, 930.0, mean=9.0, maximum=9.0))  # older than a minute: ignored
    history.record(1001.0, stats(10, 1000.0, mean=1.0, maximum=2.0))  # 10 messages
    history.record(1002.0, stats(10, 1000.0, mean=1.0, maximum=2.0))  # same transaction seen again
    history.record(1003.0, stats(40, 1002.5, mean=2.0, maximum=3.0))  # 30 messages
    latency = history.latency(1003.0)
    assert latency.observations == 2
    assert latency.mean_seconds == pytest.approx((10 * 1.0 + 30 * 2.0) / 40)
    assert latency.max_seconds == 3.0
    assert history.latency(1061.0).observations == 1  # the first has left the window
    assert history.latency(2000.0).mean_seconds is None


def test_chart_marks_latency_only_where_a_new_transaction_was_seen() -> None:
    history = StatsHistory(chart_seconds=10)
    history.record(1.0, stats(5, 0.5, mean=0.2, maximum=0.4))
    history.record(2.0, stats(5, 0.5, mean=0.2, maximum=0.4))
    history.record(3.0, stats(9, 2.9, mean=0.3, maximum=0.6))
    chart = history.chart()
    assert [(p.latency_mean_seconds, p.latency_max_seconds) for p in chart] == [(0.2, 0.4), (None, None), (0.3, 0.6)]
    assert chart[2].applied_per_second == pytest.approx(2.0)
    history.record(20.0, stats(9, 2.9))
    assert [point.observed_at for point in history.chart()] == [20.0]  # older than chart_seconds


def test_a_cleared_table_restarts_the_history() -> None:
    history = StatsHistory()
    history.record(1.0, stats(500, 0.9))
    history.record(2.0, stats(600, 1.9))
    history.record(3.0, stats(0, 2.9))  # `producer clear`
    assert history.applied_per_second() is None
    history.record(4.0, stats(20, 3.9))
    assert history.applied_per_second() == pytest.approx(20)


def test_verification_is_exact_when_every_node_matches_numerically() -> None:
    actual = {"Delta": totals("1.50", 2), "Gone": totals("0", 0), "#stats": totals("9", 9)}
    expected = {"Delta": totals("1.5", 2), "#stats": totals("9", 9)}  # `#stats` here is a node's name
    verification = verify(actual, LedgerState("ledger.json", expected))
    assert verification.status == "exact"
    assert verification.label == "exact · 3 nodes match the ledger"
    assert verification.differences == ()


def test_verification_counts_differing_nodes_and_the_total_absolute_difference() -> None:
    actual = {"A": totals("10.25", 3), "B": totals("-1", 1), "C": totals("7", 2), "Extra": totals("0.5", 1)}
    expected = {"A": totals("10", 3), "B": totals("1", 1), "C": totals("7", 3), "Missing": totals("-2.125", 1)}
    verification = verify(actual, LedgerState("ledger.json", expected))
    assert verification.status == "differs"
    assert [d.key for d in verification.differences] == ["A", "B", "C", "Extra", "Missing"]
    # |0.25| + |-2| + |0| + |0.5| + |2.125|
    assert verification.total_absolute_difference == Decimal("4.875")
    assert verification.label == "5 nodes differ · Σ|Δ| = 4.875"
    assert verification.differences[1].value_difference == Decimal("-2")


def test_verification_with_one_difference_and_without_a_ledger() -> None:
    one = verify({"A": totals("1", 1)}, LedgerState("l.json", {}))
    assert one.label == "1 node differs · Σ|Δ| = 1"
    assert verify({}, LedgerState(None, None)).label == "no ledger"
    broken = verify({}, LedgerState("l.json", None, "l.json is not valid JSON"))
    assert (broken.status, broken.label) == ("ledger-error", "ledger unreadable: l.json is not valid JSON")


def test_builder_combines_reading_history_and_ledger_and_survives_read_failures() -> None:
    readings: list[TableReading | Exception] = [
        TableReading({"Delta": totals("1", 1), "Delta:FX": totals("1", 1)}, stats(1, 9.5)),
        TableReadError("cannot read table T: endpoint down"),
        TableReading({"Delta": totals("3", 2), "Delta:FX": totals("3", 2)}, stats(2, 11.5)),
    ]

    def read() -> TableReading:
        item = readings.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    now = iter([10.0, 11.0, 12.0])
    clock: Callable[[], float] = lambda: next(now)  # noqa: E731
    ledger = LedgerState("ledger.json", {"Delta": totals("3", 2), "Delta:FX": totals("3", 2)})
    builder = SnapshotBuilder("T", read, lambda: ledger, clock=clock)

    first = builder.build()
    assert (first.grand_total, first.node_count, first.verification.status) == (totals("1", 1), 2, "draining")
    assert first.verification.label == "draining: 0 of 2 nodes match"  # the last batch landed 0.5 s ago
    failed = builder.build()
    assert failed.read_error == "cannot read table T: endpoint down"
    assert failed.tree == first.tree  # the last good reading stays
    assert failed.last_read_at == 10.0
    recovered = builder.build()
    assert recovered.read_error is None
    assert recovered.verification.status == "exact"
    assert recovered.applied_per_second == pytest.approx(0.5)


def test_backlog_after_a_clear_is_unknown_rather_than_wrong() -> None:
    """`producer clear` starts a new ledger while `#stats` keeps counting: more applied than the
    ledger expects means the two no longer describe the same messages."""
    ledger = LedgerState("l.json", {"A": totals("1", 1)}, messages=LedgerMessages(sent=12, to_apply=10))
    now = iter([100.0, 101.0])
    builder = SnapshotBuilder("T", lambda: TableReading({}, stats(25, 100.0)), lambda: ledger, clock=lambda: next(now))
    snapshot = builder.build()
    assert snapshot.backlog is not None
    assert (snapshot.backlog.applied, snapshot.backlog.to_apply, snapshot.backlog.behind) == (25, 10, None)
    assert snapshot.verification.label == "draining: 0 of 1 nodes match"  # not "25 of 10 applied"
    in_step = verify({}, ledger, idle=False, messages_applied=4)
    assert in_step.label == "draining: 4 of 10 applied"
