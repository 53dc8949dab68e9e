"""The terminal view: the same snapshot as the web page, fitted to the terminal's size.

Every line is laid out here rather than left to a table that would shrink columns: numbers
are never cut. When the terminal is narrow, the figures drop their labels first and the
node names are shortened with ``…``; when it is short, the tree is shown a page at a time,
and the user collapses it to a level. The grand total always shows. Off a terminal (piped
into a file or another program) the view prints one plain snapshot, every row and every
name in full, and exits.

Every name from the table goes through :func:`name_text` (one place), into a
:class:`rich.text.Text`, never through rich's markup parser, so a hierarchy name like
``[red]x`` or ``[/]`` is shown as typed.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from frontend.formatting import format_count, format_decimal, format_rate, format_seconds
from frontend.snapshot import Snapshot, SnapshotBuilder, TreeNode, VerificationStatus, walk
from toolkit.ledger import NodeTotals
from toolkit.untrusted import untrusted_text

#: How each verification status looks (rich styles).
VERIFICATION_STYLES: dict[VerificationStatus, str] = {
    "exact": "bold green",
    "draining": "bold cyan",
    "differs": "bold yellow",
    "stopped": "bold red",
    "no-ledger": "dim",
    "ledger-error": "bold red",
}

#: How many differing nodes are listed below the tree (when there is room).
MAX_LISTED_DIFFERENCES = 5

#: Spaces between the name, value and trades columns.
GAP = "  "

#: The keys the live view answers to, as its last line says.
KEYS_HELP = "keys: 1-9 level · 0 all · n/p page · q quit"


def name_text(name: str, style: str = "") -> Text:
    """Text from outside (a hierarchy level, a table name, a quarantine reason, an error message
    naming them) as text for the screen.

    The one way untrusted text reaches the terminal: as :class:`Text`, never as markup, with its
    control characters spelled as escapes (`toolkit.untrusted.untrusted_text`): ``ESC[2J`` or
    OSC 52 in a name never reaches the terminal.
    """
    return untrusted_text(name, style=style)


@dataclass
class ViewState:
    """What the user chose: how many levels to show (None: all) and which page of rows."""

    level: int | None = None
    page: int = 0

    def press(self, key: str) -> bool:
        """Applies one key; returns False for quit."""
        if key in ("q", "Q", "\x03", "\x04"):
            return False
        if key.isdigit():
            self.level = int(key) or None
            self.page = 0
        elif key in ("n", " ", "j", "\x1b[6~", "\x1b[B"):
            self.page += 1
        elif key in ("p", "b", "k", "\x1b[5~", "\x1b[A"):
            self.page = max(self.page - 1, 0)
        elif key in ("+", "="):
            self.level = None if self.level is None else self.level + 1
        elif key == "-":
            self.level = max((self.level or 2) - 1, 1)
            self.page = 0
        return True


@dataclass(frozen=True)
class Figure:
    """One figure of a line: an optional label, the value (never cut), and the value's style."""

    label: str
    value: Text


def fit_figures(figures: Sequence[Figure], width: int | None) -> Text:
    """The figures with their labels on as few lines as fit ``width``; where a labelled figure
    alone is wider than the terminal, the labels go.

    A value is never cut: at worst a line holds a single value wider than the terminal.
    """
    labelled = [
        Text.assemble((f"{figure.label} ", "dim"), figure.value) if figure.label else figure.value for figure in figures
    ]
    if width is not None and max(part.cell_len for part in labelled) > width:
        labelled = [figure.value for figure in figures]
    lines: list[Text] = []
    for part in labelled:
        if lines and (width is None or lines[-1].cell_len + 3 + part.cell_len <= width):
            lines[-1] = Text("   ").join([lines[-1], part])
        else:
            lines.append(part.copy())
    return Text("\n").join(lines)


def _value_cells(totals: NodeTotals | None) -> tuple[Text, Text]:
    if totals is None:
        return Text("—", style="dim"), Text("—", style="dim")
    value = format_decimal(totals.value)
    return Text(value, style="red" if value.startswith("-") else ""), Text(format_count(totals.trade_count))


def _clock(epoch_seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch_seconds))


def _ago(seconds: float) -> str:
    if seconds < 1:
        return "just now"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    return f"{seconds / 60:.0f} min ago"


def _bold(text: str, style: str = "bold") -> Text:
    return Text(text, style=style)


def header_lines(snapshot: Snapshot, width: int | None) -> list[Text]:
    """Everything above the tree: title, figures, backlog, quarantine, verification."""
    stats = snapshot.stats
    lines = [
        fit_figures(
            [
                Figure("", _bold("Aggregates")),
                Figure("table", name_text(snapshot.table_name, "cyan")),
                Figure("at", Text(_clock(snapshot.generated_at))),
            ],
            width,
        ),
        fit_figures(
            [
                Figure("applied", _bold(format_count(stats.messages_applied) if stats else "—")),
                Figure("rate", _bold(format_rate(snapshot.applied_per_second))),
                Figure("latency mean", _bold(format_seconds(snapshot.latency.mean_seconds))),
                Figure("max", _bold(format_seconds(snapshot.latency.max_seconds))),
                Figure("over", Text(f"{snapshot.latency.window_seconds / 60:g} min", style="dim")),
            ],
            width,
        ),
    ]
    backlog = snapshot.backlog
    if backlog is not None:
        figures = [
            Figure("ingested", _bold(format_count(backlog.sent) if backlog.sent is not None else "—")),
            Figure("to apply", _bold(format_count(backlog.to_apply) if backlog.to_apply is not None else "—")),
            Figure("lag", _bold(format_count(backlog.behind) if backlog.behind is not None else "—")),
        ]
        if backlog.superseded:
            figures.append(Figure("superseded in their batch", Text(format_count(backlog.superseded))))
        if backlog.last_applied_at is not None:
            figures.append(Figure("last batch", Text(_ago(snapshot.generated_at - backlog.last_applied_at))))
        lines.append(fit_figures(figures, width))
    lines.extend(quarantine_lines(snapshot, width))
    verification = snapshot.verification
    lines.append(
        fit_figures(
            [Figure("verification", name_text(verification.label, VERIFICATION_STYLES[verification.status]))], width
        )
    )
    if snapshot.read_error:
        lines.append(name_text(f"showing the last good reading: {snapshot.read_error}", "yellow"))
    return lines


def quarantine_lines(snapshot: Snapshot, width: int | None) -> list[Text]:
    """The quarantine count, then the latest reasons (shortened to the width, never the count)."""
    quarantine = snapshot.quarantine
    if quarantine is None and snapshot.quarantine_error is None:
        return []
    count = format_count(quarantine.count) if quarantine else "—"
    lines = [
        fit_figures(
            [Figure("quarantined", _bold(count, "bold red" if quarantine and quarantine.count else "bold"))], width
        )
    ]
    if snapshot.quarantine_error:
        lines.append(name_text(snapshot.quarantine_error, "yellow"))
    for record in quarantine.latest if quarantine else ():
        line = Text("  ") + name_text(record.reason)
        if width is not None:
            line.truncate(width, overflow="ellipsis")
        lines.append(line)
    return lines


def visible_rows(tree: tuple[TreeNode, ...], level: int | None) -> list[TreeNode]:
    """The nodes shown when the tree is collapsed to ``level`` levels (None: every level)."""
    return [node for node in walk(tree) if level is None or node.depth < level]


def depth_of(tree: tuple[TreeNode, ...]) -> int:
    """How many levels the tree has."""
    return max((node.depth + 1 for node in walk(tree)), default=0)


@dataclass(frozen=True)
class Columns:
    """Widths of the tree's columns: names take what the numbers leave."""

    name: int
    value: int
    trades: int

    def row(self, name: Text, value: Text, trades: Text) -> Text:
        """One row: the name cut to its column with ``…``, the numbers whole and right-aligned."""
        name = name.copy()
        if name.cell_len > self.name:
            name.truncate(self.name, overflow="ellipsis")
        name.pad_right(self.name - name.cell_len)
        value = value.copy()
        value.pad_left(self.value - value.cell_len)
        trades = trades.copy()
        trades.pad_left(self.trades - trades.cell_len)
        return Text.assemble(name, GAP, value, GAP, trades)


def fraction_width(value: Text) -> int:
    """How many cells a value's fraction takes, its point included (0 for a whole number or ``—``)."""
    point = value.plain.find(".")
    return 0 if point < 0 else value.cell_len - point


def align_decimal_points(values: Sequence[Text]) -> list[Text]:
    """The values padded on the right to the column's longest fraction, so that, right-aligned,
    their decimal points line up (a whole number's would-be point included). Nothing is cut."""
    widest = max((fraction_width(value) for value in values), default=0)
    aligned = []
    for value in values:
        padded = value.copy()
        padded.pad_right(widest - fraction_width(value))
        aligned.append(padded)
    return aligned


def _aligned_rows(rows: Sequence[tuple[Text, Text, Text]]) -> list[tuple[Text, Text, Text]]:
    """The rows with their value column aligned on the decimal point."""
    values = align_decimal_points([row[1] for row in rows])
    return [(row[0], value, row[2]) for row, value in zip(rows, values, strict=True)]


#: The fewest cells the name column keeps when decimal points are aligned. Aligning widens the value
#: column to its longest whole part plus its longest fraction, which for DynamoDB's extremes (20 integer
#: digits in one row, 37 fraction digits in another) leaves no room for names in 80 columns: then the
#: values are right-aligned as they are, whole, and the names keep their room.
MIN_ALIGNED_NAME_CELLS = 12


def _fitted_rows(rows: Sequence[tuple[Text, Text, Text]], width: int | None) -> list[tuple[Text, Text, Text]]:
    """The rows aligned on the decimal point, unless that leaves the names too little of ``width``."""
    aligned = _aligned_rows(rows)
    if width is None or tree_columns(aligned, width).name >= min(MIN_ALIGNED_NAME_CELLS, tree_columns(rows, None).name):
        return aligned
    return list(rows)


def tree_columns(rows: Sequence[tuple[Text, Text, Text]], width: int | None) -> Columns:
    """Numbers get their full width; the name column gets the rest of ``width`` (all it needs when None)."""
    value = max([len("Value"), *(cells[1].cell_len for cells in rows)])
    trades = max([len("Trades"), *(cells[2].cell_len for cells in rows)])
    wanted = max([len("Node"), *(cells[0].cell_len for cells in rows)])
    room = wanted if width is None else width - value - trades - 2 * len(GAP)
    return Columns(max(min(wanted, room), 1), value, trades)


def _row_cells(node: TreeNode) -> tuple[Text, Text, Text]:
    name = Text("  " * node.depth) + name_text(node.name, "bold" if node.depth == 0 else "")
    return (name, *_value_cells(node.totals))


def render_snapshot(
    snapshot: Snapshot, width: int | None = None, height: int | None = None, view: ViewState | None = None
) -> Group:
    """The whole screen for one snapshot, ``width`` columns by ``height`` lines (None: unbounded).

    With a height, the rows are paged (``view.page``, clamped to the last page) and the
    footer says which page and how to move; without one every row is listed.
    """
    view = view if view is not None else ViewState()
    header_text = Text("\n").join(header_lines(snapshot, width))
    unaligned = [*(_row_cells(node) for node in visible_rows(snapshot.tree, view.level))]
    *cells, grand = fitted = _fitted_rows([*unaligned, (_bold("All"), *_value_cells(snapshot.grand_total))], width)
    columns = tree_columns(fitted, width)
    levels = depth_of(snapshot.tree)

    def summary(page: int, pages: int) -> Text:
        figures = [Figure("nodes", Text(format_count(snapshot.node_count)))]
        if view.level is not None and view.level < levels:
            figures.append(Figure("levels shown", Text(f"{view.level} of {levels}")))
        if height is not None:
            figures.append(Figure("page", Text(f"{page + 1} of {pages}")))
            figures.append(Figure("", Text(KEYS_HELP, style="dim")))
        return fit_figures(figures, width)

    # Under the tree: the nodes that differ, always in a plain snapshot, and live once the
    # pipeline is idle (a failure to look into; while draining they are work in flight).
    failing = height is None or snapshot.verification.status == "differs"
    differences = difference_lines(snapshot, width) if failing else []
    most_pages = max(len(cells), 1)  # the widest the summary can get, to count its lines
    footer_lines = 2 + _line_count(summary(most_pages - 1, most_pages)) + len(differences)  # rule, All, ...
    room = None if height is None else max(height - _line_count(header_text) - 1 - footer_lines, 1)  # 1: headings
    pages = 1 if room is None or not cells else -(-len(cells) // room)
    view.page = min(view.page, pages - 1)
    shown = cells if room is None else cells[view.page * room : (view.page + 1) * room]

    parts: list[Text] = [header_text]
    parts.append(columns.row(Text("Node", "bold dim"), Text("Value", "bold dim"), Text("Trades", "bold dim")))
    if not cells:
        parts.append(Text("(no aggregates yet)", style="dim"))
    parts.extend(columns.row(*row) for row in shown)
    parts.append(Text("─" * (columns.name + columns.value + columns.trades + 2 * len(GAP)), style="dim"))
    parts.append(columns.row(*grand))
    parts.append(summary(view.page, pages))
    parts.extend(differences)
    return Group(*parts)


def _line_count(text: Text) -> int:
    return len(text.plain.splitlines())


def difference_lines(snapshot: Snapshot, width: int | None) -> list[Text]:
    """The first nodes that differ from the ledger (the plain snapshot lists them under the tree)."""
    differences = snapshot.verification.differences
    if not differences:
        return []
    rows: list[tuple[Text, Text, Text]] = []
    for difference in differences[:MAX_LISTED_DIFFERENCES]:
        count_difference = difference.actual.trade_count - difference.expected.trade_count
        rows.append(
            (
                name_text(difference.key),
                Text(format_decimal(difference.value_difference)),
                Text(f"{count_difference:+,d}" if count_difference else "0"),
            )
        )
    rows = _fitted_rows(rows, width)
    columns = tree_columns(rows, width)
    lines = [Text("nodes that differ from the ledger (table - ledger)", style="bold")]
    lines.append(columns.row(Text("Node", "bold dim"), Text("Value", "bold dim"), Text("Trades", "bold dim")))
    lines.extend(columns.row(*row) for row in rows)
    unlisted = len(differences) - MAX_LISTED_DIFFERENCES
    if unlisted > 0:
        lines.append(Text(f"… and {format_count(unlisted)} more", style="dim"))
    return lines


def print_snapshot(snapshot: Snapshot, console: Console) -> None:
    """One plain snapshot, every row and name in full, never wrapped or cut (for a pipe or a file)."""
    for line in render_snapshot(snapshot).renderables:
        console.print(line, soft_wrap=True, crop=False, overflow="ignore")


@contextmanager
def _keyboard() -> Iterator[Callable[[float], str]]:
    """Reads single key presses from the terminal (no echo, no Enter) while the view runs."""
    descriptor = sys.stdin.fileno()
    saved = termios.tcgetattr(descriptor)
    tty.setcbreak(descriptor)

    def wait_for_key(timeout: float) -> str:
        ready, _, _ = select.select([descriptor], [], [], timeout)
        return os.read(descriptor, 8).decode(errors="replace") if ready else ""

    try:
        yield wait_for_key
    finally:
        termios.tcsetattr(descriptor, termios.TCSADRAIN, saved)


def _sleeping(timeout: float) -> str:
    time.sleep(timeout)
    return ""


def run_terminal(
    builder: SnapshotBuilder,
    interval: float,
    console: Console | None = None,
    wait_for_key: Callable[[float], str] | None = None,
) -> int:
    """The live view until ``q`` or Ctrl-C; off a terminal, one plain snapshot. Returns the exit status (0).

    ``wait_for_key(timeout)`` returns a key pressed within ``timeout`` seconds, or "" when
    none was (default: the terminal's keyboard when stdin is one, else plain sleeping).
    """
    console = console or Console()
    if not console.is_terminal:
        print_snapshot(builder.build(), console)
        return 0
    if wait_for_key is None and sys.stdin.isatty():
        with _keyboard() as keyboard:
            return _live(builder, interval, console, keyboard)
    return _live(builder, interval, console, wait_for_key or _sleeping)


def _live(builder: SnapshotBuilder, interval: float, console: Console, wait_for_key: Callable[[float], str]) -> int:
    view = ViewState()

    def screen(snapshot: Snapshot) -> Group:
        size = console.size
        return render_snapshot(snapshot, size.width, size.height - 1, view)

    try:
        snapshot = builder.build()
        with Live(screen(snapshot), console=console, auto_refresh=False, vertical_overflow="crop") as live:
            next_build = time.monotonic() + interval
            while True:
                key = wait_for_key(max(next_build - time.monotonic(), 0.0))
                if key and not view.press(key):
                    return 0
                if time.monotonic() >= next_build:
                    snapshot = builder.build()
                    next_build = time.monotonic() + interval
                live.update(screen(snapshot), refresh=True)
    except KeyboardInterrupt:
        return 0
