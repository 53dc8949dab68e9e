"""Values align on the decimal point, whole, in the terminal at 80 and 120 columns (issue 34).

People who read risk totals compare columns of figures: `-4,910,348,292.2893506611` must sit with
its point above the point of `14,380.92`, and a whole number's would-be point in the same column."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from rich.text import Text

from frontend import terminal
from frontend.formatting import format_decimal
from frontend.snapshot import LedgerState, SnapshotBuilder, TableReading, walk
from tests.frontend.dashboard_helpers import totals

RISK = {
    "Delta": ("-4910348292.2893506611", 3),
    "Delta:FXSpot": ("-4910348292.2893506611", 3),
    "Delta:FXSpot:AMER": ("14380.92", 1),
    "Delta:FXSpot:EMEA": ("-4910362673.2093506611", 1),
    "Delta:FXSpot:APAC": ("1000", 1),
    "Vega": ("0.5", 1),
    "Vega:Rates": ("0.5", 1),
    "Vega:Rates:AMER": ("0.5", 1),
    "Gamma": ("-0.000001", 2),
    "Gamma:Credit": ("-0.000001", 2),
    "Gamma:Credit:EMEA": ("-0.000001", 2),
}


def point_column(line: str, value: str) -> int:
    """Where `value`'s decimal point (or, for a whole number, the point it would have) is in `line`."""
    match = re.search(rf"(?<![\d,.]){re.escape(value)}(?![\d.])", line)
    assert match is not None, (value, line)
    point = value.find(".")
    return match.start() + (point if point >= 0 else len(value))


@pytest.mark.parametrize("width", [80, 120])
def test_decimal_points_align_and_no_digit_is_cut(width: int) -> None:
    nodes = {key: totals(value, count) for key, (value, count) in RISK.items()}
    snapshot = SnapshotBuilder("T", lambda: TableReading(nodes, None), lambda: LedgerState(None, None)).build()
    console = Console(record=True, width=width, color_system=None)
    console.print(terminal.render_snapshot(snapshot, width))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= width

    rows = {node.key: format_decimal(node.totals.value) for node in walk(snapshot.tree) if node.totals is not None}
    rows["All"] = format_decimal(snapshot.grand_total.value)
    tree_start = next(index for index, line in enumerate(lines) if line.lstrip().startswith("Node"))
    points = set()
    compared = 0
    for line in lines[tree_start + 1 :]:
        name = line.split()[0] if line.strip() else ""
        candidates = [value for key, value in rows.items() if key.split(":")[-1] == name]
        if not candidates:
            continue
        value = next(value for value in candidates if re.search(rf"(?<![\d,.]){re.escape(value)}(?![\d.])", line))
        points.add(point_column(line, value))  # found whole: no digit cut
        compared += 1
    assert compared == len(RISK) + 1  # every row and the grand total
    assert len(points) == 1, points
    assert "-4,910,348,292.2893506611" in "\n".join(lines)
    assert "14,380.92" in "\n".join(lines)


def test_the_padding_is_on_the_right_of_a_shorter_fraction() -> None:
    values = terminal.align_decimal_points([Text("14,380.92"), Text("-4,910,348,292.2893506611"), Text("1,000")])
    assert [value.plain for value in values] == ["14,380.92        ", "-4,910,348,292.2893506611", "1,000           "]
