"""The web dashboard in a real headless Chromium, against a real moto server.

Checks what a user sees: exact values with every decimal and thousands
separators, live updates without a reload, the expand/collapse state kept
across updates, the verification badge draining to "exact", and a hostile
hierarchy name shown as text (no dialog, no <img>). Saves a screenshot.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, expect

from frontend.web import CONTENT_SECURITY_POLICY
from tests.frontend.dashboard_helpers import (
    HOSTILE_NAME,
    DashboardLauncher,
    put_leaf_with_parents,
    put_marker,
    put_node,
    put_stats,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
#: Gitignored; CI keeps it as an artifact so a reviewer can look at the page.
TEST_OUTPUT = REPOSITORY_ROOT / "test-output"

BIG = "12345678901234567890.123456789012345678"  # 38 significant digits, DynamoDB's maximum
BIG_SHOWN = "12,345,678,901,234,567,890.123456789012345678"


def write_ledger(path: Path, nodes: dict[str, tuple[str, int]]) -> None:
    """A ledger in the producer's format: ``aggregates`` of key → Value (decimal string) and TradeCount."""
    aggregates = {key: {"Value": value, "TradeCount": count} for key, (value, count) in nodes.items()}
    path.write_text(json.dumps({"aggregates": aggregates}), encoding="utf-8")


def row(page: Page, key: str) -> dict[str, str]:
    """The name, value and trade count cells of the tree row for ``key`` (as displayed)."""
    locator = page.locator("#tree-body tr").filter(has=page.locator(f'span.name[title="{key}"]'))
    expect(locator).to_have_count(1)
    return {
        "name": locator.locator("span.name").inner_text(),
        "value": locator.locator("td.value").inner_text(),
        "trades": locator.locator("td.count").inner_text(),
    }


def test_dashboard_shows_exact_live_values_and_renders_hostile_names_as_text(
    browser: Browser, aggregate_table: Table, dashboards: DashboardLauncher, tmp_path: Path
) -> None:
    table = aggregate_table
    ledger = tmp_path / "ledger.json"
    seed_one_batch_behind(table, ledger)
    dashboard = dashboards.start(table.name, ledger_path=ledger)
    page, dialogs, console_errors = open_watched_page(browser)
    response = page.goto(dashboard.url)
    assert response is not None
    assert response.ok
    assert "default-src 'self'" in response.headers["content-security-policy"]

    # Top level expanded on first visit: levels 0 and 1 show, exact to the last digit.
    expect(page.locator("#table-name")).to_have_text(table.name)
    expect(page.locator("#tree-body")).to_contain_text("FXSpot")
    assert row(page, "Delta") == {"name": "Delta", "value": "1,234,567.891233", "trades": "3"}
    assert row(page, "Vega:Rates")["value"] == BIG_SHOWN
    expect(page.locator("#tree-body tr")).to_have_count(6)
    expect(page.locator("#messages-applied")).to_have_text("5")
    expect(page.locator("#latency-max")).to_have_text("800 ms")
    expect(page.locator("#verification")).to_have_text("draining: 10 of 13 nodes match")  # the batch just landed
    expect(page.locator("#differences-body tr")).to_have_count(3)
    expect(page.locator("#top-level")).to_contain_text(BIG_SHOWN)

    # Expand everything, then collapse Vega: that state must survive the updates below.
    page.get_by_role("button", name="Expand all").click()
    assert row(page, "Delta:FXSpot:AMER")["value"] == "1,234,567.891234"
    assert row(page, "Delta:FXSpot:EMEA")["value"] == "-0.000001"
    page.get_by_role("button", name="Collapse Vega", exact=True).click()
    expect(page.locator('span.name[title="Vega:Rates"]')).to_have_count(0)

    # The hostile name is plain text: visible verbatim, no element made from it, nothing ran.
    assert row(page, HOSTILE_NAME)["name"] == HOSTILE_NAME
    expect(page.locator("#top-level")).to_contain_text(HOSTILE_NAME)
    assert page.locator("img").count() == 0
    assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0

    # The pipeline drains: new values land in the table and the page follows without reloading.
    page.evaluate("window.__noReloadMarker = 'still the same page'")
    apply_the_last_batch(table)

    expect(page.locator("#verification")).to_have_text("exact · 13 nodes match the ledger")
    expect(page.locator("#differences-panel")).to_be_hidden()
    expect(page.locator("#messages-applied")).to_have_text("8")
    expect(page.locator("#latency-max")).to_have_text("1.25 s")
    assert row(page, "Gamma") == {"name": "Gamma", "value": "0.3", "trades": "2"}
    page.get_by_role("button", name="Expand Gamma", exact=True).click()  # a new node arrives collapsed
    page.get_by_role("button", name="Expand Credit", exact=True).click()
    assert row(page, "Gamma:Credit:EMEA") == {"name": "EMEA", "value": "0.3", "trades": "2"}
    assert page.evaluate("window.__noReloadMarker") == "still the same page"
    expect(page.locator('span.name[title="Vega:Rates"]')).to_have_count(0)  # still collapsed
    assert row(page, "Delta:FXSpot:AMER")["value"] == "1,234,567.891234"  # still expanded
    expect(page.locator("#grand-value")).to_have_text("12,345,678,901,235,802,500.814689789012345678")
    expect(page.locator("#chart svg path.line-rate").first).to_be_attached()

    assert page.locator("img").count() == 0
    assert dialogs == []
    assert console_errors == []  # includes CSP violations, which Chromium reports as console errors

    save_screenshot(page, tmp_path / "dashboard.png")
    page.close()


def seed_one_batch_behind(table: Table, ledger: Path) -> None:
    """The table before the pipeline applies its last batch, and a ledger that already expects it: one node differs."""
    put_leaf_with_parents(table, "Delta:FXSpot:AMER", "1234567.891234", 2)
    put_node(table, "Delta:FXSpot:EMEA", "-0.000001", 1)
    put_node(table, "Delta:FXSpot", "1234567.891233", 3)
    put_node(table, "Delta", "1234567.891233", 3)
    put_leaf_with_parents(table, f"{HOSTILE_NAME}:Desk:APAC", "42.5", 1)
    put_leaf_with_parents(table, "Vega:Rates:AMER", BIG, 1)
    put_stats(table, messages_applied=5, last_updated=time.time(), mean="0.25", maximum="0.8")
    for marker in range(20):
        put_marker(table, f"batch-{marker}")
    expected = {
        "Delta": ("1234567.891233", 3),
        "Delta:FXSpot": ("1234567.891233", 3),
        "Delta:FXSpot:AMER": ("1234567.891234", 2),
        "Delta:FXSpot:EMEA": ("-0.000001", 1),
        HOSTILE_NAME: ("42.5", 1),
        f"{HOSTILE_NAME}:Desk": ("42.5", 1),
        f"{HOSTILE_NAME}:Desk:APAC": ("42.5", 1),
        "Vega": (BIG, 1),
        "Vega:Rates": (BIG, 1),
        "Vega:Rates:AMER": (BIG, 1),
        "Gamma": ("0.3", 2),
        "Gamma:Credit": ("0.3", 2),
        "Gamma:Credit:EMEA": ("0.3", 2),
    }
    write_ledger(ledger, expected)


def apply_the_last_batch(table: Table) -> None:
    """The pipeline drains the batch the ledger already expects: a new Gamma branch, and the stats move on."""
    put_leaf_with_parents(table, "Gamma:Credit:EMEA", "0.1", 1)
    put_node(table, "Gamma:Credit:EMEA", "0.3", 2)  # 0.1 + 0.2, exactly
    put_node(table, "Gamma:Credit", "0.3", 2)
    put_node(table, "Gamma", "0.3", 2)
    put_stats(table, messages_applied=8, last_updated=time.time(), mean="0.5", maximum="1.25")


def open_watched_page(browser: Browser) -> tuple[Page, list[Dialog], list[str]]:
    """A new page whose dialogs (dismissed) and console errors, CSP violations included, are collected."""
    dialogs: list[Dialog] = []
    console_errors: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("console", lambda message: _record_error(message, console_errors))
    page.on("pageerror", lambda error: console_errors.append(str(error)))
    return page, dialogs, console_errors


def save_screenshot(page: Page, screenshot: Path) -> None:
    """Into test-output/ too, which CI keeps for a reviewer."""
    page.screenshot(path=str(screenshot), full_page=True)
    TEST_OUTPUT.mkdir(exist_ok=True)
    shutil.copy(screenshot, TEST_OUTPUT / "dashboard.png")


def _record_error(message: ConsoleMessage, errors: list[str]) -> None:
    if message.type == "error":
        errors.append(message.text)


def test_dashboard_says_when_the_table_cannot_be_read(
    browser: Browser, aggregate_table: Table, dashboards: DashboardLauncher
) -> None:
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "10.5", 1)
    dashboard = dashboards.start(aggregate_table.name)
    page = browser.new_page()
    page.goto(dashboard.url)
    expect(page.locator("#connection")).to_contain_text("live")

    aggregate_table.delete()  # the emulator went away or the stack was destroyed

    expect(page.locator("#read-error")).to_contain_text("cannot read table")
    expect(page.locator("#connection")).to_contain_text("table unreachable")
    assert row(page, "Delta")["value"] == "10.5"  # the last good reading stays on screen
    aggregate_table.wait_until_not_exists()
    aggregate_table.meta.client.create_table(
        TableName=aggregate_table.name,
        KeySchema=[{"AttributeName": "AggregateKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "AggregateKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )  # so the fixture's teardown can delete it
    page.close()


def test_the_refusals_a_browser_receives_carry_the_security_headers(
    browser: Browser, aggregate_table: Table, dashboards: DashboardLauncher
) -> None:
    """The 501s for POST, PUT, OPTIONS and HEAD (sent by the base class) and a 404, as Chromium sees them."""
    dashboard = dashboards.start(aggregate_table.name)
    page, dialogs, _ = open_watched_page(browser)  # Chromium logs each refusal as a console error
    page.goto(dashboard.url)
    answers = page.evaluate(
        """async () => {
            const answers = {};
            for (const [method, path] of [['POST', '/api/snapshot'], ['PUT', '/'], ['OPTIONS', '/api/snapshot'],
                                          ['HEAD', '/'], ['GET', '/missing']]) {
                const response = await fetch(path, {method});
                answers[`${method} ${path}`] = {
                    status: response.status,
                    csp: response.headers.get('content-security-policy'),
                    nosniff: response.headers.get('x-content-type-options'),
                    frames: response.headers.get('x-frame-options'),
                    type: response.headers.get('content-type'),
                };
            }
            return answers;
        }"""
    )
    expected_status = {"POST /api/snapshot": 501, "PUT /": 501, "OPTIONS /api/snapshot": 501, "HEAD /": 501}
    expected_status["GET /missing"] = 404
    assert {request: answer["status"] for request, answer in answers.items()} == expected_status
    for request, answer in answers.items():
        assert answer["csp"] == CONTENT_SECURITY_POLICY, request
        assert (answer["nosniff"], answer["frames"], answer["type"]) == ("nosniff", "DENY", "text/plain; charset=utf-8")
    assert dialogs == []
    page.close()
