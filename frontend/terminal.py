"""The terminal view: the same snapshot as the web page, as a rich Live table.

Every piece of text from the table (and every other string that is not this module's own)
goes through `toolkit.untrusted.untrusted_text`: a `rich.text.Text`, never rich's markup
parser, so a hierarchy name like ``[red]x`` or ``[/]`` is shown as typed, and its control
characters are spelled as escapes: ``ESC[2J`` or OSC 52 in a name never reaches the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from frontend.formatting import format_count, format_decimal, format_rate, format_seconds
from frontend.snapshot import Snapshot, SnapshotBuilder, TreeNode, VerificationStatus
from toolkit.ledger import NodeTotals
from toolkit.untrusted import untrusted_text

#: How each verification status looks (rich styles).
VERIFICATION_STYLES: dict[VerificationStatus, str] = {
    "exact": "bold green",
    "differs": "bold yellow",
    "no-ledger": "dim",
    "ledger-error": "bold red",
}

#: How many differing nodes are listed below the tree.
MAX_LISTED_DIFFERENCES = 5


def _walk(nodes: tuple[TreeNode, ...]) -> Iterator[TreeNode]:
    for node in nodes:
        yield node
        yield from _walk(node.children)


def _value_cells(totals: NodeTotals | None) -> tuple[Text, Text]:
    if totals is None:
        return Text("—", style="dim"), Text("—", style="dim")
    value = format_decimal(totals.value)
    return Text(value, style="red" if value.startswith("-") else ""), Text(format_count(totals.trade_count))


def render_snapshot(snapshot: Snapshot) -> RenderableType:
    """The whole terminal screen for one snapshot."""
    stats = snapshot.stats
    verification = snapshot.verification
    clock = time.strftime("%H:%M:%S", time.localtime(snapshot.generated_at))

    header = Text.assemble(
        ("Aggregates", "bold"), " · table ", untrusted_text(snapshot.table_name, "cyan"), f" · {clock}"
    )

    window = f"last {snapshot.latency.window_seconds / 60:g} min"
    figures = Text.assemble(
        ("applied ", "dim"),
        (format_count(stats.messages_applied) if stats else "—", "bold"),
        ("   rate ", "dim"),
        (format_rate(snapshot.applied_per_second), "bold"),
        ("   latency ", "dim"),
        (format_seconds(snapshot.latency.mean_seconds), "bold"),
        (" mean / ", "dim"),
        (format_seconds(snapshot.latency.max_seconds), "bold"),
        (f" max ({window})", "dim"),
    )
    badge = Text.assemble(
        ("verification ", "dim"), untrusted_text(verification.label, VERIFICATION_STYLES[verification.status])
    )

    tree = Table(expand=False, show_edge=False, header_style="bold dim", pad_edge=False)
    tree.add_column("Node", no_wrap=True, overflow="fold")
    tree.add_column("Value", justify="right", no_wrap=True)
    tree.add_column("Trades", justify="right", no_wrap=True)
    for node in _walk(snapshot.tree):
        name = untrusted_text("  " * node.depth + node.name, style="bold" if node.depth == 0 else "")
        tree.add_row(name, *_value_cells(node.totals))
    if snapshot.tree:
        tree.add_section()
        tree.add_row(Text("All", style="bold"), *_value_cells(snapshot.grand_total))
    else:
        tree.add_row(Text("(no aggregates yet)", style="dim"), Text(""), Text(""))

    parts: list[RenderableType] = [header, figures, badge]
    if snapshot.read_error:
        parts.append(untrusted_text(f"showing the last good reading: {snapshot.read_error}", style="yellow"))
    parts.append(tree)
    if verification.differences:
        differences = Table(title="nodes that differ from the ledger", title_justify="left", show_edge=False)
        differences.add_column("Node", overflow="fold")
        differences.add_column("Table - ledger", justify="right", no_wrap=True)
        differences.add_column("Trades", justify="right", no_wrap=True)
        for difference in verification.differences[:MAX_LISTED_DIFFERENCES]:
            count_difference = difference.actual.trade_count - difference.expected.trade_count
            differences.add_row(
                untrusted_text(difference.key),
                Text(format_decimal(difference.value_difference)),
                Text(f"{count_difference:+,d}" if count_difference else "0"),
            )
        unlisted = len(verification.differences) - MAX_LISTED_DIFFERENCES
        if unlisted > 0:
            differences.add_row(Text(f"… and {format_count(unlisted)} more", style="dim"), Text(""), Text(""))
        parts.append(differences)
    return Group(*parts)


def run_terminal(
    builder: SnapshotBuilder,
    interval: float,
    console: Console | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Refreshes the view every ``interval`` seconds until Ctrl-C; returns the exit status (0)."""
    try:
        with Live(render_snapshot(builder.build()), console=console, auto_refresh=False) as live:
            while True:
                sleep(interval)
                live.update(render_snapshot(builder.build()), refresh=True)
    except KeyboardInterrupt:
        return 0
