"""The terminal view rendered to text: values, figures, verification, hostile names verbatim; fitted to
80, 120 and 140 columns without cutting a number; paged and collapsed to a level; one plain snapshot
off a terminal."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from frontend import terminal
from frontend.formatting import format_count, format_decimal
from frontend.snapshot import (
    IDLE_AFTER_SECONDS,
    LedgerState,
    QuarantinedRecord,
    QuarantineSummary,
    Snapshot,
    SnapshotBuilder,
    StatsHistory,
    StatsRecord,
    TableReading,
    walk,
)
from tests.frontend.dashboard_helpers import HOSTILE_NAME, totals
from toolkit.ledger import LedgerMessages, NodeTotals

MARKUP_NAME = "[bold red]pwned[/]"
START = 1_700_000_000


def builder_over(
    readings: list[TableReading],
    ledger: LedgerState,
    quarantine: QuarantineSummary | None = None,
    step: float = 1.0,
) -> SnapshotBuilder:
    pending = list(readings)
    now = iter(START + step * tick for tick in range(100))
    clock: Callable[[], float] = lambda: next(now)  # noqa: E731
    return SnapshotBuilder(
        "AggTable",
        lambda: pending.pop(0) if len(pending) > 1 else pending[0],
        lambda: ledger,
        read_quarantine=(lambda: quarantine) if quarantine else None,
        clock=clock,
    )


def render_text(snapshot: Snapshot, width: int = 150, height: int | None = None, **view: int | None) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(terminal.render_snapshot(snapshot, width, height, terminal.ViewState(**view)))  # type: ignore[arg-type]
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
            TableReading(NODES, StatsRecord(100, START, 0.25, 0.5)),
            TableReading(NODES, StatsRecord(160, START + 1.0, 0.75, 1.5)),
        ],
        LedgerState("ledger.json", dict(NODES)),
    )
    builder.build()
    text = render_text(builder.build())

    assert "table AggTable" in text
    assert "applied 160" in text
    assert "rate 60.0/s" in text
    assert "latency mean 742 ms   max 1.50 s   over 1 min" in text  # (60 x 0.75 + 1 x 0.25) / 61
    assert "verification exact · 5 nodes match the ledger" in text
    lines = text.splitlines()
    assert any(re.fullmatch(r"Delta +1,234,567\.891234  +2 *", line) for line in lines)
    assert any(line.startswith("    AMER ") and "1,234,567.891234" in line for line in lines)
    assert any(line.startswith(f"{HOSTILE_NAME} ") and "-0.000001" in line for line in lines)
    assert any(line.startswith(f"  {MARKUP_NAME} ") for line in lines)  # markup shown, not applied
    assert any(re.fullmatch(r"All +1,234,567\.891233  +3 *", line) for line in lines)
    assert "nodes 5" in text  # as many as the badge compares, as the page says


def test_a_difference_is_draining_until_the_pipeline_is_idle_then_a_failure() -> None:
    ledger = LedgerState(
        "ledger.json", {"Delta": totals("1.5", 2), "Vega": totals("2", 1)}, messages=LedgerMessages(5, 4)
    )
    builder = builder_over([TableReading({"Delta": totals("1", 1)}, StatsRecord(1, START, 0.1, 0.1))], ledger)
    draining = builder.build()
    text = render_text(draining)
    assert "verification draining: 1 of 4 applied" in text
    assert "ingested 5   to apply 4   lag 3" in text
    assert "nodes 1" in text
    for _ in range(int(IDLE_AFTER_SECONDS)):
        idle = builder.build()  # one second apart, MessagesApplied stands still
    text = render_text(idle)
    assert "verification 2 nodes differ · Σ|Δ| = 2.5" in text
    assert "nodes that differ from the ledger" in text
    lines = text.splitlines()
    assert any(re.fullmatch(r"Delta +-0\.5  +-1 *", line) for line in lines)
    assert any(re.fullmatch(r"Vega +-2  +-1 *", line) for line in lines)


def test_quarantine_count_and_latest_reasons_are_shown() -> None:
    quarantine = QuarantineSummary(
        12, (QuarantinedRecord("e2", "not JSON", START + 5), QuarantinedRecord("e1", f"bad {MARKUP_NAME}", START))
    )
    builder = builder_over([TableReading({}, None)], LedgerState(None, None), quarantine)
    text = render_text(builder.build(), width=80)
    assert "quarantined 12" in text
    assert text.index("  not JSON") < text.index(f"  bad {MARKUP_NAME}")
    assert "(no aggregates yet)" in text


def long_tree() -> dict[str, NodeTotals]:
    """Three levels of long names holding DynamoDB's largest numbers (38 digits), 40 leaves."""
    nodes: dict[str, NodeTotals] = {}
    for risk in ("Delta", "Vega-" + "v" * 60):
        nodes[risk] = totals("-12345678901234567890.123456789012345678", 123_456_789)
        for desk in range(4):
            desk_key = f"{risk}:Desk-{desk}-{'d' * 50}"
            nodes[desk_key] = totals("98765432109876543210.987654321098765432", 12_345_678)
            for region in range(5):
                nodes[f"{desk_key}:Region-{region}-{'r' * 70}"] = totals("0.000000000000000000000000000000000001", 1)
    return nodes


def figures_of(snapshot: Snapshot) -> list[str]:
    """Every number the tree shows, formatted as the views show it."""
    figures = [format_decimal(snapshot.grand_total.value), format_count(snapshot.grand_total.trade_count)]
    for node in walk(snapshot.tree):
        assert node.totals is not None
        figures += [format_decimal(node.totals.value), format_count(node.totals.trade_count)]
    return figures


@pytest.mark.parametrize("width", [80, 120, 140])
def test_every_line_fits_the_width_and_no_number_is_cut(width: int) -> None:
    nodes = long_tree()
    builder = builder_over(
        [TableReading(nodes, StatsRecord(123_456_789, START, 0.25, 12.5))],
        LedgerState("ledger.json", nodes, messages=LedgerMessages(123_456_790, 123_456_789)),
        QuarantineSummary(1, (QuarantinedRecord("e", "reason " * 40, START),)),
    )
    snapshot = builder.build()
    text = render_text(snapshot, width=width)  # every row: the whole tree
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    for figure in set(figures_of(snapshot)):
        assert re.search(rf"(^| ){re.escape(figure)}( |$)", text, re.MULTILINE), figure
    assert "applied 123,456,789" in text
    assert "latency mean 250 ms" in text and "max 12.50 s" in text
    assert "ingested 123,456,790" in text
    assert "quarantined 1" in text
    assert "verification exact · 50 nodes match the ledger" in text
    assert "nodes 50" in text
    assert any(line.startswith("    Region-0-rrr") and "…" in line for line in lines)  # names gave way, not numbers
    assert any(
        re.fullmatch(r"All +-24,691,357,802,469,135,780\.246913578024691356  +246,913,578 *", line) for line in lines
    )


def test_rows_are_paged_to_the_height_and_collapse_to_a_level() -> None:
    nodes = long_tree()
    snapshot = builder_over([TableReading(nodes, None)], LedgerState(None, None)).build()
    first = render_text(snapshot, width=120, height=24)
    assert len(first.splitlines()) <= 24
    assert "page 1 of 4" in first
    assert "keys: 1-9 level · 0 all · n/p page · q quit" in first
    assert "All " in first  # the grand total is on every page
    view = terminal.ViewState()
    for key in "nnnnn":  # past the last page: stays on it
        assert view.press(key)
    last = render_text(snapshot, width=120, height=24, level=view.level, page=view.page)
    assert "page 4 of 4" in last
    assert "All " in last
    view.press("2")
    collapsed = render_text(snapshot, width=120, height=24, level=view.level, page=view.page)
    assert "levels shown 2 of 3" in collapsed
    assert "page 1 of 1" in collapsed
    assert "Region-" not in collapsed
    assert collapsed.count("Desk-") == 8
    assert not view.press("q")


def test_live_view_answers_keys_and_quits_on_q() -> None:
    nodes = long_tree()
    builder = SnapshotBuilder("AggTable", lambda: TableReading(nodes, None), history=StatsHistory())
    keys = iter(["", "1", "", "q"])
    output = io.StringIO()
    console = Console(file=output, width=100, height=30, force_terminal=True, color_system=None)
    assert terminal.run_terminal(builder, 0.01, console=console, wait_for_key=lambda timeout: next(keys)) == 0
    assert "levels shown 1 of 3" in output.getvalue()


def test_live_view_exits_cleanly_on_ctrl_c() -> None:
    builder = SnapshotBuilder("AggTable", lambda: TableReading({}, None), history=StatsHistory())
    waits: list[float] = []

    def wait_for_key(timeout: float) -> str:
        waits.append(timeout)
        if len(waits) == 2:
            raise KeyboardInterrupt
        return ""

    console = Console(file=io.StringIO(), width=100, height=30, force_terminal=True, color_system=None)
    assert terminal.run_terminal(builder, 0.5, console=console, wait_for_key=wait_for_key) == 0
    assert len(waits) == 2


def test_off_a_terminal_one_plain_snapshot_with_every_name_whole() -> None:
    nodes = long_tree()
    builder = SnapshotBuilder("AggTable", lambda: TableReading(nodes, None), history=StatsHistory())
    output = io.StringIO()
    console = Console(file=output, width=80, color_system=None)  # a pipe: not a terminal
    assert terminal.run_terminal(builder, 60, console=console, wait_for_key=lambda _: pytest.fail("waited")) == 0
    text = output.getvalue()
    assert "…" not in text
    assert text.count("Region-") == 40
    assert "keys:" not in text
    assert "\x1b" not in text


def test_the_live_view_lists_the_differing_nodes_once_idle_and_still_fits() -> None:
    nodes = long_tree()
    ledger = LedgerState("ledger.json", {**nodes, "Delta": totals("1", 1)})
    builder = builder_over([TableReading(nodes, StatsRecord(1, START - 60, 0.1, 0.1))], ledger)
    text = render_text(builder.build(), width=100, height=30)
    assert "verification 1 node differs" in text
    assert "nodes that differ from the ledger (table - ledger)" in text
    assert re.search(r"^Delta +-12,345,678,901,234,567,891\.123456789012345678 +\+123,456,788 *$", text, re.MULTILINE)
    assert len(text.splitlines()) <= 30


level_names = st.text(
    alphabet=st.characters(whitelist_categories=("L", "N", "P", "S", "Zs"), blacklist_characters=":[]\\"),
    min_size=1,
    max_size=60,
)
exact_values = st.decimals(allow_nan=False, allow_infinity=False, min_value=-(10**20), max_value=10**20, places=6)


@settings(max_examples=40)
@given(
    leaves=st.dictionaries(
        st.tuples(level_names, level_names), st.tuples(exact_values, st.integers(0, 10**9)), min_size=1, max_size=8
    ),
    width=st.integers(min_value=60, max_value=200),
    height=st.one_of(st.none(), st.integers(min_value=16, max_value=60)),
)
def test_any_names_and_values_fit_any_width_with_every_shown_number_whole(
    leaves: dict[tuple[str, str], tuple[Decimal, int]], width: int, height: int | None
) -> None:
    nodes = {f"{top}:{leaf}": NodeTotals(value, count) for (top, leaf), (value, count) in leaves.items()}
    snapshot = builder_over([TableReading(nodes, None)], LedgerState(None, None)).build()
    text = render_text(snapshot, width=width, height=height)
    lines = text.splitlines()
    assert all(cell_len(line) <= width for line in lines)
    if height is not None:
        assert len(lines) <= height
    figures = {
        (format_decimal(node.totals.value), format_count(node.totals.trade_count))
        for node in walk(snapshot.tree)
        if node.totals is not None
    }
    figures.add((format_decimal(snapshot.grand_total.value), format_count(snapshot.grand_total.trade_count)))
    heading = next(index for index, line in enumerate(lines) if re.fullmatch(r"Node +Value  +Trades *", line))
    rule = next(index for index, line in enumerate(lines) if line.startswith("─"))
    rows = [*lines[heading + 1 : rule], lines[rule + 1]]
    for line in rows:  # every row on screen ends in its two figures, whole
        match = re.search(r"  (\S+)  +(\S+) *$", line)
        assert match is not None, line
        if match.groups() != ("—", "—"):
            assert match.groups() in figures, line
    assert rows[-1].startswith("All ")
