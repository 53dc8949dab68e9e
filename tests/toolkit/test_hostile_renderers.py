"""Issue 26, items 1 and 2: hostile names through every renderer an operator reads.

A producer chooses node names and TradeIDs; the archive, a ledger or a table written before the
door refused control characters can hold anything. Each renderer (``audit reconcile`` and
``rebuild``, ``producer verify``, ``send`` and ``clear``, the dashboard's terminal view and API
document, ``make status``, the capacity planner) is given names that are rich markup
(``Delta[/]`` raised `MarkupError`, ``[bold green]verdict: MATCH`` forged a verdict,
``[link=…]`` made a link) and terminal escapes (clear the screen, OSC 52 writes the clipboard,
OSC 8 makes a link, a C1 CSI, a bidirectional override). Each must finish, show every name
literally (control characters as escapes) and send the terminal no escape sequence but its own
colours.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console

from audit.cli import print_rebuild_plan, print_reconcile_report
from audit.rebuild import RebuildPlan
from audit.reconcile import Check, NodeDifference, ReconcileReport
from benchmarks.capacity import render_rich
from frontend.snapshot import LedgerState, SnapshotBuilder, StatsRecord, TableReading
from frontend.terminal import render_snapshot
from frontend.web import snapshot_document
from local.deploy.status import alarms, functions_table, shards_table
from planner.inputs import Workload
from planner.model import plan_capacity
from planner.prices import load_price_table
from producer.cleanup import ClearSummary
from producer.display import render_clear_summary, render_send_summary, render_verification_report
from producer.ledger import LedgerCounts
from producer.model import AggregateNode, TradeState
from producer.sender import SendSummary
from producer.verifier import AggregateComparison, NodeMismatch, TradeMismatch, VerificationReport
from toolkit.ledger import NodeTotals
from toolkit.untrusted import UNSAFE_CHARACTERS, printable

FORGED_VERDICT = "[bold green]verdict: MATCH"
HOSTILE_NAMES = (
    "Delta[/]",
    FORGED_VERDICT,
    "[link=x.example/y]y[/link]",
    "Vega\x1b[2J\x1b[Hexact",  # clear the screen, then paint
    "\x1b]52;c;aGk=\x07",  # OSC 52: write the clipboard
    "\x1b]8;;x.example/y\x1b\\y\x1b]8;;\x1b\\",  # OSC 8: a hyperlink
    "\x1b]0;title\x07",  # OSC 0: the window title
    "\x9b2J",  # C1 CSI
    "\u202eHCTAM",  # right-to-left override
)
"""As node keys, each is a top-level node, but the forged verdict, whose ':' makes it two nodes deep."""

SGR = re.compile(r"\x1b\[[0-9;]*m")
"""Select Graphic Rendition: the colours the renderers set themselves, and the only sequence allowed."""


def rendered(render: Callable[[Console], None]) -> tuple[str, str]:
    """What ``render`` sends a colour terminal, and the plain text a person reads there."""
    console = Console(record=True, force_terminal=True, color_system="truecolor", width=2000)
    render(console)
    return console.export_text(styles=True, clear=False), console.export_text()


def assert_shows_names_literally(render: Callable[[Console], None], names: tuple[str, ...] = HOSTILE_NAMES) -> str:
    """``render`` finishes, shows every name literally, and sends no escape sequence but colours; its plain text."""
    terminal, plain = rendered(render)
    for name in names:
        assert printable(name) in plain, name
    unsafe = UNSAFE_CHARACTERS.findall(SGR.sub("", terminal).replace("\n", ""))
    assert unsafe == [], unsafe
    assert FORGED_VERDICT in terminal  # the brackets are there: it was never parsed as markup
    return plain


def lines_starting(plain: str, prefix: str) -> list[str]:
    return [line.strip() for line in plain.splitlines() if line.strip().startswith(prefix)]


def totals(value: str, count: int) -> NodeTotals:
    return NodeTotals(Decimal(value), count)


def test_audit_reconcile_shows_hostile_node_and_object_keys_and_its_own_verdict() -> None:
    report = ReconcileReport(
        objects=2,
        items=2,
        nodes=len(HOSTILE_NAMES),
        checks=[Check("aggregate table = archive, node by node", False, f"{len(HOSTILE_NAMES)} nodes differ")],
        differences=[NodeDifference(name, "aggregate table", totals("1", 1), totals("2", 1)) for name in HOSTILE_NAMES],
        unreadable=[(f"deltas/{name}.json", f"not a delta: {name}") for name in HOSTILE_NAMES],
    )
    plain = assert_shows_names_literally(lambda console: print_reconcile_report(report, console))
    assert lines_starting(plain, "verdict:") == ["verdict: MISMATCH"]


def test_audit_rebuild_shows_hostile_stale_keys() -> None:
    plan = RebuildPlan(nodes={}, stale_items=[f"node#0#{name}" for name in HOSTILE_NAMES], messages_applied=0)
    assert_shows_names_literally(lambda console: print_rebuild_plan(plan, True, console))


def test_producer_verify_shows_hostile_nodes_and_trade_ids_and_its_own_verdict() -> None:
    report = VerificationReport(
        aggregates=AggregateComparison(
            mismatches=tuple(NodeMismatch(name, AggregateNode(Decimal(1), 1), None) for name in HOSTILE_NAMES),
            expected_nodes=len(HOSTILE_NAMES),
            actual_nodes=0,
            matching_nodes=0,
        ),
        trade_mismatches=tuple(
            TradeMismatch(name, TradeState(1, Decimal("1.5"), (name,)), None) for name in HOSTILE_NAMES
        ),
        trades_checked=len(HOSTILE_NAMES),
        settled=True,
        waited_seconds=1.0,
        messages_applied=None,
        ledger_counts=LedgerCounts(),
    )
    plain = assert_shows_names_literally(lambda console: render_verification_report(report, console))
    assert plain.startswith("MISMATCH: ")
    assert "EXACT" not in plain


def test_producer_send_and_clear_show_hostile_paths_and_table_names() -> None:
    summary = SendSummary(
        seed=1,
        counts=LedgerCounts(),
        messages_sent=1,
        bytes_sent=1,
        put_records_calls=1,
        retried_records=0,
        throttled_records=0,
        call_errors=0,
        elapsed_seconds=1.0,
        uncertain=0,
        ledger_path=Path("/".join(HOSTILE_NAMES)),
        ledger_trades=1,
        ledger_nodes=1,
    )
    assert_shows_names_literally(lambda console: render_send_summary(summary, console), ("/".join(HOSTILE_NAMES),))
    cleared = ClearSummary(
        deleted_items=dict.fromkeys(HOSTILE_NAMES, 1), ledger_deleted=Path(HOSTILE_NAMES[0]), notes=list(HOSTILE_NAMES)
    )
    assert_shows_names_literally(lambda console: render_clear_summary(cleared, console))


def hostile_snapshot_builder() -> SnapshotBuilder:
    nodes = {name: totals("1", 1) for name in HOSTILE_NAMES}
    reading = TableReading(nodes, StatsRecord(1, 1_700_000_000.0, 0.25, 0.75))
    ledger = LedgerState("/".join(HOSTILE_NAMES), {**nodes, HOSTILE_NAMES[0]: totals("2", 1)})
    return SnapshotBuilder(FORGED_VERDICT, lambda: reading, lambda: ledger)


def test_the_dashboard_terminal_view_shows_hostile_names_and_its_own_badge() -> None:
    snapshot = hostile_snapshot_builder().build()
    plain = assert_shows_names_literally(lambda console: console.print(render_snapshot(snapshot)))
    assert lines_starting(plain, "verification") == ["verification 1 node differs · Σ|Δ| = 1"]


def strings_in(document: Any) -> Iterator[str]:
    if isinstance(document, str):
        yield document
    elif isinstance(document, dict):
        for value in document.values():
            yield from strings_in(value)
    elif isinstance(document, list):
        for value in document:
            yield from strings_in(value)


def test_the_dashboard_api_document_carries_no_control_character() -> None:
    document = json.loads(json.dumps(snapshot_document(hostile_snapshot_builder().build())))
    assert [text for text in strings_in(document) if UNSAFE_CHARACTERS.search(text)] == []
    names = {node["name"] for node in document["tree"]}
    assert names == {printable(name.split(":")[0]) for name in HOSTILE_NAMES}
    assert document["verification"]["differences"][0]["key"] == printable(HOSTILE_NAMES[0])


def test_make_status_shows_hostile_function_and_shard_names() -> None:
    stats = {
        "functions": {
            name: dict.fromkeys(
                (
                    "invocations",
                    "errors",
                    "timeouts",
                    "retries",
                    "records_processed",
                    "records_filtered",
                    "batches_skipped",
                    "records_dropped",
                    "cold_starts",
                    "in_flight",
                ),
                1,
            )
            for name in HOSTILE_NAMES
        },
        "shards": [
            {
                "function": name,
                "source": "dynamodb",
                "source_name": name,
                "shard_id": f"shardId-{name}"[-8:],
                "records_read": 1,
                "records_pending": 0,
                "ms_behind": 0,
                "checkpoint": "49" * 10,
            }
            for name in HOSTILE_NAMES
        ],
    }

    def render(console: Console) -> None:
        for line in alarms(stats):
            console.print(line)
        console.print(functions_table(stats))
        console.print(shards_table(stats))

    assert_shows_names_literally(render)


def test_the_capacity_planner_shows_a_hostile_price_table_literally() -> None:
    prices = dataclasses.replace(load_price_table(), region=" ".join(HOSTILE_NAMES))
    plan = plan_capacity(Workload(rate=50_000), prices=prices)
    assert_shows_names_literally(lambda console: render_rich(plan, console), (" ".join(HOSTILE_NAMES),))
