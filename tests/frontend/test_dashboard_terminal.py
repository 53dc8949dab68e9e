"""The terminal view rendered to text: values, figures, verification, hostile names verbatim."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from frontend import terminal
from frontend.snapshot import LedgerState, SnapshotBuilder, StatsHistory, StatsRecord, TableReading
from tests.frontend.dashboard_helpers import HOSTILE_NAME, totals

MARKUP_NAME = "[bold red]pwned[/]"


def builder_over(readings: list[TableReading], ledger: LedgerState) -> SnapshotBuilder:
    pending = list(readings)
    now = iter(float(second) for second in range(1_700_000_000, 1_700_000_100))
    clock: Callable[[], float] = lambda: next(now)  # noqa: E731
    return SnapshotBuilder(
        "AggTable", lambda: pending.pop(0) if len(pending) > 1 else pending[0], lambda: ledger, clock=clock
    )


def render_text(builder: SnapshotBuilder) -> str:
    console = Console(record=True, width=150, color_system=None)
    console.print(terminal.render_snapshot(builder.build()))
    return console.export_text()


NODES = {
    "Delta": totals("1234567.891234", 2),
    "Delta:FXSpot": totals("1234567.891234", 2),
    "Delta:FXSpot:AMER": totals("1234567.891234", 2),
    HOSTILE_NAME: totals("-0.000001", 1),
    f"{HOSTILE_NAME}:{MARKUP_NAME}": totals("-0.000001", 1),
}


def test_terminal_shows_the_indented_tree_exact_values_figures_and_exact_badge() -> None:
    builder = builder_over(
        [
            TableReading(NODES, StatsRecord(100, 1_700_000_000.0, 0.25, 0.5)),
            TableReading(NODES, StatsRecord(160, 1_700_000_001.0, 0.75, 1.5)),
        ],
        LedgerState("ledger.json", dict(NODES)),
    )
    builder.build()
    text = render_text(builder)

    assert "AggTable" in text
    assert "applied 160" in text
    assert "rate 60.0/s" in text
    assert "latency 742 ms mean / 1.50 s max (last 1 min)" in text  # (60 x 0.75 + 1 x 0.25) / 61
    assert "verification exact · 5 nodes match the ledger" in text
    lines = text.splitlines()
    assert any(line.startswith("Delta ") and line.rstrip().endswith("1,234,567.891234 │      2") for line in lines)
    assert any(line.startswith("    AMER ") and "1,234,567.891234" in line for line in lines)
    assert any(line.startswith(f"{HOSTILE_NAME} ") and "-0.000001" in line for line in lines)
    assert any(line.startswith(f"  {MARKUP_NAME} ") for line in lines)  # markup shown, not applied
    assert any(line.startswith("All ") and "1,234,567.891233" in line for line in lines)


def test_terminal_lists_nodes_that_differ_while_draining() -> None:
    builder = builder_over(
        [TableReading({"Delta": totals("1", 1)}, None)],
        LedgerState("ledger.json", {"Delta": totals("1.5", 2), "Vega": totals("2", 1)}),
    )
    text = render_text(builder)
    assert "verification 2 nodes differ · Σ|Δ| = 2.5" in text
    assert "nodes that differ from the ledger" in text
    lines = text.splitlines()
    assert any(line.startswith(" Delta ") and line.rstrip().endswith("-0.5 │     -1") for line in lines)
    assert any(line.startswith(" Vega ") and line.rstrip().endswith("-2 │     -1") for line in lines)
    assert "applied — " in text
    assert "rate —" in text


def test_terminal_view_exits_cleanly_on_ctrl_c() -> None:
    builder = SnapshotBuilder("AggTable", lambda: TableReading({}, None), history=StatsHistory())
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    console = Console(record=True, width=100, color_system=None, force_terminal=False)
    assert terminal.run_terminal(builder, 0.5, console=console, sleep=sleep) == 0
    assert sleeps == [0.5, 0.5]
    assert "(no aggregates yet)" in console.export_text()
