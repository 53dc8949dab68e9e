"""Everything the producer shows people: live progress, summaries, the verdict.

Kept apart so the sending, ledger, verifying and clearing logic stay free of rendering and
usable in-process (the chaos run, a benchmark): they report progress to the small
protocols they define (`sender.SendProgress`, `verifier.DrainProgress`,
`cleanup.ClearProgress`), which the
displays here implement, and the CLI connects the two. Live displays only run on a
terminal; in CI logs the same information appears as occasional plain lines.

TradeIDs, node keys, table names and paths are not this module's own text: each is shown as
`toolkit.untrusted.untrusted_text` (never parsed as rich markup, control characters escaped), so
no TradeID or hierarchy name can forge the verdict or write to the operator's terminal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from toolkit.untrusted import untrusted_text

if TYPE_CHECKING:
    from producer.cleanup import ClearStatus, ClearSummary
    from producer.sender import SendProgressSnapshot, SendSummary
    from producer.verifier import DrainStatus, VerificationReport
    from producer.watch import Figures, PipelineWatch

MAX_ROWS = 40
PLAIN_REPORT_INTERVAL = 10.0
PLAIN_WATCH_INTERVAL = 5.0
"""Off a terminal, a line of the pipeline's figures this often while `send` runs and drains."""


def describe_figures(watch: PipelineWatch) -> str:
    """One line of what the pipeline applied (`producer.watch`), for a live display or a log."""
    if watch.error is not None:
        return f"pipeline: cannot read back ({watch.error})"
    figures = watch.latest
    if figures is None:
        return "pipeline: reading back"
    rate = "" if figures.rate is None else f" · {figures.rate:,.0f} msg/s"
    return f"pipeline: {figures.applied:,} applied{rate} · latency {_latency(figures)}"


def _latency(figures: Figures) -> str:
    if figures.p50_ms is None:
        return "-"
    return f"p50 {_ms(figures.p50_ms)} p99 {_ms(figures.p99_ms)} max {_ms(figures.max_ms)}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f} ms" if value < 10_000 else f"{value / 1000:,.1f} s"


class WatchLines:
    """Off a terminal: the pipeline's figures as a plain line every `PLAIN_WATCH_INTERVAL` seconds."""

    def __init__(self, console: Console, watch: PipelineWatch) -> None:
        self._console = console
        self._watch = watch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch-lines", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(PLAIN_WATCH_INTERVAL):
            self._console.print(describe_figures(self._watch), highlight=False, soft_wrap=True)
            if (warning := self._watch.take_warning()) is not None:
                self._console.print(warning, highlight=False, soft_wrap=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()


class SendProgressDisplay:
    """A live bar (sent, sent/s, retried, throttled) polling the send counters: a `sender.SendProgress`."""

    def __init__(self, console: Console, enabled: bool | None = None, watch: PipelineWatch | None = None) -> None:
        """``enabled`` None: live on a terminal only. ``watch``: the pipeline's figures on the same line."""
        self._console = console
        self._watch = watch
        self._read: Callable[[], SendProgressSnapshot] | None = None
        self._total_messages: int | None = None
        self._enabled = console.is_terminal if enabled is None else enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._last_sample = (time.monotonic(), 0)
        self._rate = 0.0

    def start(
        self, total_messages: int | None, duration: float | None, read: Callable[[], SendProgressSnapshot]
    ) -> None:
        if self._watch is not None:
            self._watch.follow_sending(lambda: read().sent)
        if not self._enabled:
            return
        self._read = read
        self._total_messages = total_messages
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]sending"),
            BarColumn(),
            TextColumn("{task.fields[sent]:>10,} sent"),
            TextColumn("{task.fields[rate]:>9,.0f} msg/s"),
            TextColumn("retried {task.fields[retried]:,}"),
            TextColumn("throttled {task.fields[throttled]:,}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[pipeline]}"),
            console=self._console,
            transient=False,
        )
        total = float(total_messages) if total_messages else duration
        self._task = self._progress.add_task("send", total=total, sent=0, rate=0.0, retried=0, throttled=0, pipeline="")
        self._progress.start()
        self._thread = threading.Thread(target=self._poll, name="send-progress", daemon=True)
        self._thread.start()

    def _refresh(self) -> None:
        if self._progress is None or self._task is None or self._read is None:
            return
        snapshot = self._read()
        now = time.monotonic()
        then, sent_then = self._last_sample
        if now - then >= 0.5:
            instant = (snapshot.sent - sent_then) / (now - then)
            self._rate = instant if self._rate == 0 else 0.5 * self._rate + 0.5 * instant
            self._last_sample = (now, snapshot.sent)
        completed = float(snapshot.sent) if self._total_messages else snapshot.elapsed_seconds
        self._progress.update(
            self._task,
            completed=completed,
            sent=snapshot.sent,
            rate=self._rate,
            retried=snapshot.retried,
            throttled=snapshot.throttled,
            pipeline="" if self._watch is None else describe_figures(self._watch),
        )
        if self._watch is not None and (warning := self._watch.take_warning()) is not None:
            self._progress.console.print(warning, style="bold yellow", highlight=False, soft_wrap=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.25):
            self._refresh()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._progress is not None:
            self._refresh()
            self._progress.stop()


class _StatusDisplay:
    """A spinner with one line of status on a terminal; plain lines now and then otherwise."""

    def __init__(self, console: Console, enabled: bool | None, first_line: str) -> None:
        """``enabled`` None: live on a terminal, plain lines otherwise; False: silent."""
        self._console = console
        self._silent = enabled is False
        self._live = console.is_terminal if enabled is None else enabled
        self._status = console.status(first_line) if self._live else None
        self._last_plain = 0.0

    def __enter__(self) -> Self:
        if self._status is not None:
            self._status.start()
        return self

    def message(self, text: str) -> None:
        if self._status is not None:
            self._status.update(text)
            return
        now = time.monotonic()
        if not self._silent and now - self._last_plain >= PLAIN_REPORT_INTERVAL:
            self._console.print(text, highlight=False)
            self._last_plain = now

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._status is not None:
            self._status.stop()


class DrainProgressDisplay(_StatusDisplay):
    """A spinner while the verifier waits for the pipeline: a `verifier.DrainProgress`."""

    def __init__(self, console: Console, enabled: bool | None = None) -> None:
        """``enabled`` None: live on a terminal, plain lines otherwise; False: silent."""
        super().__init__(console, enabled, "waiting for the pipeline to drain")

    def update(self, status: DrainStatus) -> None:
        applied = f" · {status.messages_applied:,} messages applied" if status.messages_applied is not None else ""
        text = (
            f"waiting for the pipeline: {status.matching_nodes}/{status.expected_nodes} nodes match{applied}"
            f" · unchanged {status.unchanged_seconds:.0f} s"
            f" · {status.elapsed_seconds:.0f}/{status.timeout_seconds:.0f} s"
        )
        self.message(text)


class PipelineDrainDisplay(_StatusDisplay):
    """A spinner with the pipeline's figures while `send` waits for it to apply what was sent."""

    def __init__(self, console: Console, enabled: bool | None, watch: PipelineWatch) -> None:
        """``enabled`` None: live on a terminal (off one, `WatchLines` reports); False: silent."""
        super().__init__(console, False if enabled is None and not console.is_terminal else enabled, "draining")
        self._watch = watch

    def refresh(self) -> None:
        self.message(f"waiting for the pipeline to apply what was sent · {describe_figures(self._watch)}")


class ClearProgressDisplay(_StatusDisplay):
    """A spinner while ``clear`` waits for the pipeline to take the deleted trades out: a `cleanup.ClearProgress`."""

    def __init__(self, console: Console, enabled: bool | None = None) -> None:
        """``enabled`` None: live on a terminal, plain lines otherwise; False: silent."""
        super().__init__(console, enabled, "deleting state items")

    def update(self, status: ClearStatus) -> None:
        self.message(
            f"clearing through the pipeline: {status.state_items_deleted:,} state items deleted"
            f" · {status.nonzero_nodes:,} nodes not yet at zero"
            f" · {status.elapsed_seconds:.0f}/{status.timeout_seconds:.0f} s"
        )


def render_send_summary(summary: SendSummary, console: Console) -> None:
    """The end-of-run table."""
    counts = summary.counts
    table = Table(title="producer send", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("seed", str(summary.seed)),
        ("messages sent", f"{summary.messages_sent:,}"),
        ("  new trades", f"{counts.new_trades:,}"),
        ("  modifications", f"{counts.modifications:,} ({counts.moves:,} moves)"),
        ("  duplicates", f"{counts.duplicates:,}"),
        ("  out of order", f"{counts.out_of_order:,}"),
        ("  conflicting duplicates", f"{counts.conflicting_duplicates:,}"),
        ("  malformed", f"{counts.malformed:,}"),
        ("Kinesis records", f"{summary.records_sent:,}"),
        ("put_records calls", f"{summary.put_records_calls:,}"),
        ("records retried", f"{summary.retried_records:,}"),
        ("records throttled", f"{summary.throttled_records:,}"),
        ("call errors retried", f"{summary.call_errors:,}"),
        ("elapsed", f"{summary.elapsed_seconds:.1f} s"),
        ("throughput", f"{summary.messages_per_second:,.0f} msg/s ({summary.bytes_sent / 1e6:,.1f} MB)"),
    ]
    if summary.uncertain:
        rows.append(("in doubt (in flight when stopped)", f"{summary.uncertain:,}"))
    if summary.ledger_path is not None:
        rows.append(
            ("ledger", f"{summary.ledger_path} ({summary.ledger_trades:,} trades, {summary.ledger_nodes:,} nodes)")
        )
    for name, value in rows:
        style = "yellow" if name.startswith("uncertain") else ""
        table.add_row(untrusted_text(name, style), untrusted_text(value, style))
    console.print(table)


def render_pipeline_summary(
    figures: Figures, settled: bool, dashboard_url: str, waited_seconds: float, console: Console
) -> None:
    """What the pipeline applied of the run, read back from it (`producer.watch`)."""
    table = Table(title="pipeline (read back)", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    drained = "" if settled else f" (still applying after {waited_seconds:.0f} s: `producer verify` waits longer)"
    rows = [
        ("messages applied", f"{figures.applied:,}{drained}"),
        ("applied rate", "-" if figures.rate is None else f"{figures.rate:,.0f} msg/s"),
        ("end-to-end latency p50", _ms(figures.p50_ms)),
        ("end-to-end latency p99", _ms(figures.p99_ms)),
        ("end-to-end latency max", _ms(figures.max_ms)),
    ]
    if dashboard_url:
        rows.append(("dashboard", dashboard_url))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


def render_verification_report(report: VerificationReport, console: Console) -> None:
    """The verdict; on a mismatch, which nodes and trades differ and by how much."""
    comparison = report.aggregates
    counts = report.ledger_counts
    context = (
        f"{counts.messages_sent:,} messages: {counts.duplicates:,} duplicates, {counts.out_of_order:,} out of order, "
        f"{counts.modifications:,} modifications ({counts.moves:,} moves), {counts.malformed:,} malformed"
    )
    if report.uncertain_messages:
        console.print(
            f"[yellow]warning: {report.uncertain_messages:,} messages in doubt: in flight when a run was stopped, "
            "they may or may not have reached the stream; a mismatch may be theirs[/yellow]"
        )
    if report.exact:
        console.print(
            Text.assemble(
                ("EXACT", "bold green"),
                f": all {comparison.expected_nodes:,} nodes and {report.trades_checked:,} trades match the ledger "
                f"({context}; waited {report.waited_seconds:.0f} s)",
            )
        )
        return
    waited = "" if report.settled else f"; timed out after {report.waited_seconds:.0f} s, still changing"
    console.print(
        Text.assemble(
            ("MISMATCH", "bold red"),
            f": {len(comparison.mismatches):,} of {len(comparison.mismatches) + comparison.matching_nodes:,} nodes "
            f"differ, {len(report.trade_mismatches):,} of {report.trades_checked:,} trades wrong or missing "
            f"({context}{waited})",
        )
    )
    if comparison.mismatches:
        nodes = Table(title="aggregate nodes that differ", title_justify="left")
        for column in ("node", "expected value", "actual value", "difference", "expected count", "actual count"):
            nodes.add_column(column, justify="left" if column == "node" else "right")
        for mismatch in comparison.mismatches[:MAX_ROWS]:
            _add_row(
                nodes,
                mismatch.key,
                _text(mismatch.expected.value) if mismatch.expected else "(absent)",
                _text(mismatch.actual.value) if mismatch.actual else "(absent)",
                _signed(mismatch.value_difference),
                str(mismatch.expected.trade_count) if mismatch.expected else "(absent)",
                str(mismatch.actual.trade_count) if mismatch.actual else "(absent)",
            )
        _more(nodes, len(comparison.mismatches), 6)
        console.print(nodes)
    if report.trade_mismatches:
        trades = Table(title="trades missing or at the wrong version", title_justify="left")
        for column in ("trade", "problem", "expected version", "actual version", "expected value", "actual value"):
            trades.add_column(column, justify="left" if column in ("trade", "problem") else "right")
        for wrong in report.trade_mismatches[:MAX_ROWS]:
            actual = wrong.actual
            _add_row(
                trades,
                wrong.trade_id,
                wrong.problem,
                str(wrong.expected.version),
                str(actual.version) if actual else "-",
                _text(wrong.expected.value),
                _text(actual.value) if actual else "-",
            )
        _more(trades, len(report.trade_mismatches), 6)
        console.print(trades)


def render_clear_summary(summary: ClearSummary, console: Console) -> None:
    """What ``clear`` deleted, and how long the pipeline took to bring every node to zero."""
    for name, deleted in summary.deleted_items.items():
        console.print(untrusted_text(f"cleared {name}: {deleted:,} items deleted"))
    console.print(
        Text.assemble(
            ("cleared", "bold green"),
            f": every aggregate node is back at zero (waited {summary.waited_seconds:.0f} s for the pipeline)",
        )
    )
    for note in summary.notes:
        console.print(untrusted_text(note))
    if summary.ledger_deleted is not None:
        console.print(untrusted_text(f"deleted ledger {summary.ledger_deleted}"))


def _text(value: object) -> str:
    return format(value, "f") if not isinstance(value, str) else value


def _signed(value: object) -> str:
    text = _text(value)
    return text if text.startswith("-") else f"+{text}"


def _more(table: Table, total: int, columns: int) -> None:
    if total > MAX_ROWS:
        _add_row(table, f"… and {total - MAX_ROWS:,} more", *([""] * (columns - 1)))


def _add_row(table: Table, *cells: str) -> None:
    """A row whose every cell is untrusted text: a string cell would be parsed as markup."""
    table.add_row(*(untrusted_text(cell) for cell in cells))
