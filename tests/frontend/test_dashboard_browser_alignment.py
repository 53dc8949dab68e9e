"""Decimal points line up in the web page's value columns at 360, 1024 and 1920 px, no digit cut
(issue 34): tabular figures, integers right-aligned, then a fraction column as wide as the longest."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Browser, expect

from tests.frontend.dashboard_helpers import DashboardLauncher, put_leaf_with_parents, put_stats

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

LEAVES = {
    "Delta:FXSpot:AMER": "-4910348292.2893506611",
    "Delta:FXSpot:EMEA": "14380.92",
    "Vega:Rates:APAC": "1000",
    "Gamma:Credit:EMEA": "12345678901234567890.123456789012345678",
    "Theta:Rates:AMER": "-0.000001",
}

#: For each value cell of a table: its text, where its decimal point is (the fraction's left edge,
#: or the whole number's right edge), and whether any of it is cut or out of its cell.
POINTS = """(selector) => [...document.querySelectorAll(selector)]
  .filter((cell) => cell.offsetParent !== null && cell.querySelector('.digits'))
  .map((cell) => {
    const whole = cell.querySelector('.int').getBoundingClientRect();
    const fraction = cell.querySelector('.frac');
    const range = document.createRange();
    range.selectNodeContents(cell.querySelector('.digits'));
    const text = range.getBoundingClientRect();
    const box = cell.getBoundingClientRect();
    return {
      text: cell.textContent,
      point: fraction.textContent ? fraction.getBoundingClientRect().left : whole.right,
      shown: text.left >= box.left - 0.5 && text.right <= box.right + 0.5 && cell.scrollWidth <= cell.clientWidth + 1,
      font: getComputedStyle(cell).fontVariantNumeric,
    };
  })"""


@pytest.mark.parametrize("width", [360, 1024, 1920])
def test_decimal_points_align_in_every_value_column_and_no_digit_is_cut(
    width: int, browser: Browser, aggregate_table: Table, dashboards: DashboardLauncher
) -> None:
    for key, value in LEAVES.items():
        put_leaf_with_parents(aggregate_table, key, value, 1)
    put_stats(aggregate_table, messages_applied=5, last_updated=time.time(), mean="0.2", maximum="0.4")
    dashboard = dashboards.start(aggregate_table.name)
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(dashboard.url)
    page.get_by_role("button", name="Expand all").click()
    expect(page.locator("#tree-body tr")).to_have_count(13)

    for selector in ("#tree-body td.value", "table.totals td.value"):
        cells = page.evaluate(POINTS, selector)
        assert len(cells) >= 5, selector
        for cell in cells:
            assert cell["shown"], cell  # every digit in sight
            assert "tabular-nums" in cell["font"], cell
        points = [cell["point"] for cell in cells]
        assert max(points) - min(points) < 1, cells  # one column of decimal points
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.close()
