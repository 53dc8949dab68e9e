"""The page's layout in Debian's headless Chromium at a phone's, a laptop's and a wide screen's width.

Long names and DynamoDB's largest numbers (38 significant digits): no number breaks across
lines, none is pushed out of sight, a long name wraps beside its ▸, the page never scrolls
sideways, every figure the terminal view shows is on the page, and both count the same nodes.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Browser, Page, expect
from rich.console import Console

from frontend.terminal import render_snapshot
from tests.frontend.dashboard_helpers import (
    DashboardLauncher,
    create_quarantine_table,
    put_leaf_with_parents,
    put_node,
    put_quarantined,
    put_stats,
)

TEST_OUTPUT = Path(__file__).resolve().parents[2] / "test-output"

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource, Table

BIG = "12345678901234567890.123456789012345678"
LONG_DESK = "Rates-desk-number-one-in-the-global-markets-division-" + "x" * 40
LEAVES = {
    f"Delta:{LONG_DESK}:AMER": (BIG, 123_456),
    "Delta:FXSpot:EMEA": ("-98765432109876543210.987654321098765432", 7),
    "Vega:Rates:APAC": ("0.5", 1),
}

#: A JavaScript function: for every number element, how many lines its text takes and whether
#: it lies inside the window (a number scrolled or clipped out of sight counts as not shown).
#: Lines are counted from the text's own boxes (a value cell holds its digits in spans, whose
#: element boxes are as tall as the line, not as the text).
NUMBER_BOXES = """() => [...document.querySelectorAll('.number, td.num')]
  .filter((node) => node.offsetParent !== null && node.textContent.trim())
  .map((node) => {
    const texts = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
    const rects = [];
    for (let text = texts.nextNode(); text; text = texts.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(text);
      rects.push(...[...range.getClientRects()].filter((rect) => rect.width > 0));
    }
    const tops = new Set(rects.map((rect) => Math.round(rect.top)));
    const left = Math.min(...rects.map((rect) => rect.left));
    const right = Math.max(...rects.map((rect) => rect.right));
    const box = node.closest('.card, .panel, .topbar').getBoundingClientRect();
    return {
      text: node.textContent,
      lines: tops.size,
      inside: left >= box.left && right <= box.right,
      clipped: node.scrollWidth > node.clientWidth + 1,
    };
  })"""

#: For every tree row: the toggle's top and the top of the name's first line.
TOGGLE_AND_NAME = """() => [...document.querySelectorAll('#tree-body tr')].map((row) => {
  const range = document.createRange();
  range.selectNodeContents(row.querySelector('span.name'));
  return {
    name: row.querySelector('span.name').textContent,
    toggle: row.querySelector('.toggle').getBoundingClientRect().top,
    name_top: range.getClientRects()[0].top,
    left: row.querySelector('.toggle').getBoundingClientRect().left,
    depth: Number(row.querySelector('td.node').style.getPropertyValue('--depth')),
  };
})"""


def seed(table: Table, quarantine: Table, ledger: Path) -> None:
    """A drained pipeline: three long branches, a zero node the ledger does not list, two quarantined records."""
    aggregates: dict[str, dict[str, Any]] = {}
    for key, (value, count) in LEAVES.items():
        put_leaf_with_parents(table, key, value, count)
        levels = key.split(":")
        for depth in range(1, 4):
            aggregates[":".join(levels[:depth])] = {"Value": value, "TradeCount": count}
    put_node(table, "Gamma", "0", 0)  # every trade moved away: a node the table keeps and the ledger drops
    put_stats(table, messages_applied=1_234_567, last_updated=time.time() - 30, mean="0.25", maximum="1.8")
    put_quarantined(quarantine, "event-1", "not JSON: Expecting value: line 1 column 1 (char 0)", 1_700_000_000)
    put_quarantined(quarantine, "event-2", "Value is not a decimal number: 'abc'", 1_700_000_001)
    counts = {"messages_sent": 1_300_000, "new_trades": 1_000_000, "modifications": 234_567}
    ledger.write_text(json.dumps({"counts": counts, "aggregates": aggregates}), encoding="utf-8")


def terminal_figures(text: str) -> set[str]:
    """Every number the terminal view shows, but the clock and the figures of a moment (rate, ago)."""
    text = re.sub(r"\d\d:\d\d:\d\d", "", text)
    text = re.sub(r"last batch \S+ \S+ ago|rate \S+|over \S+ min", "", text)
    return set(re.findall(r"-?\d[\d,]*(?:\.\d+)?", text))


@pytest.mark.parametrize("width", [360, 1024, 1920])
def test_numbers_stay_whole_and_in_sight_and_every_terminal_figure_is_on_the_page(
    width: int, browser: Browser, dynamodb: DynamoDBServiceResource, aggregate_table: Table, tmp_path: Path
) -> None:
    quarantine = create_quarantine_table(dynamodb, f"Quarantine-{uuid.uuid4().hex[:8]}")
    dashboards = DashboardLauncher(dynamodb)
    try:
        ledger = tmp_path / "ledger.json"
        seed(aggregate_table, quarantine, ledger)
        dashboard = dashboards.start(aggregate_table.name, ledger, quarantine_table=quarantine.name)
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(dashboard.url)
        expect(page.locator("#verification")).to_have_text("exact · 9 nodes match the ledger")
        expect(page.locator("#quarantine-count")).to_have_text("2")
        page.get_by_role("button", name="Expand all").click()
        expect(page.locator("#tree-body tr")).to_have_count(9)

        assert page.evaluate("document.documentElement.scrollWidth") <= width  # never sideways
        assert page.locator(".topbar").bounding_box()["width"] == width  # type: ignore[index]
        for box in page.evaluate(NUMBER_BOXES):
            assert box["lines"] == 1, box
            assert box["inside"] and not box["clipped"], box  # in sight: inside its card, not scrolled away
        rows = page.evaluate(TOGGLE_AND_NAME)
        for row in rows:
            assert abs(row["toggle"] - row["name_top"]) < 8, row  # the ▸ sits on the name's first line
        indents = {depth: {row["left"] for row in rows if row["depth"] == depth} for depth in (0, 1, 2)}
        assert max(indents[0]) < min(indents[1]) and max(indents[1]) < min(indents[2])  # each level indented

        builder = dashboards.builder(aggregate_table.name, ledger, quarantine.name)
        builder.build()
        snapshot = builder.build()
        console = Console(record=True, width=120, color_system=None)
        console.print(render_snapshot(snapshot, 120))
        terminal = console.export_text()
        assert "nodes 9" in terminal
        assert page.locator("#node-count").inner_text() == "9"  # zero node counted alike in both views
        page_text = page.locator("body").inner_text()
        for figure in terminal_figures(terminal):
            assert figure in page_text, figure
        for reason in ("not JSON: Expecting value", "Value is not a decimal number: 'abc'"):
            assert reason in terminal
            expect(page.locator("#quarantine-latest")).to_contain_text(reason)

        check_latency_max_line(page, aggregate_table)
        TEST_OUTPUT.mkdir(exist_ok=True)  # gitignored; CI keeps it for a reviewer
        page.screenshot(path=str(TEST_OUTPUT / f"dashboard-{width}px.png"), full_page=True)
        page.close()
    finally:
        for running in dashboards.running:
            running.stop()
        quarantine.delete()


def check_latency_max_line(page: Page, table: Table) -> None:
    """Batches of one message each (max equals mean): the max line is still drawn, on top, and seen."""
    for applied in (1_234_568, 1_234_569):
        put_stats(table, messages_applied=applied, last_updated=time.time(), mean="0.5", maximum="0.5")
        time.sleep(0.5)
    line = page.locator("#chart svg path.line-max")
    expect(line).to_have_attribute("d", re.compile(r"L"))
    box = line.bounding_box()
    assert box is not None and box["width"] > 0
    last_path = page.evaluate("[...document.querySelectorAll('#chart svg path')].pop().getAttribute('class')")
    assert last_path == "line-max"
    assert page.evaluate("getComputedStyle(document.querySelector('#chart svg path.line-max')).stroke") != "none"
