"""Command line: `python -m audit reconcile | rebuild` (exit 0 ok, 1 mismatch, 2 usage or access error)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aggregation.transactions import DEFAULT_MARKER_TTL_DAYS, MIN_MARKER_TTL_DAYS
from audit.rebuild import DEFAULT_MARKER_WINDOW_HOURS, RebuildPlan, rebuild
from audit.reconcile import ReconcileReport, reconcile
from audit.targets import AuditError, resolve_target
from toolkit.cli import MAX_SECONDS, OneLineArgumentParser, bounded
from toolkit.ledger import LedgerError
from toolkit.pipeline import DEFAULT_OUTPUTS_PATH, TargetError
from toolkit.untrusted import printable, untrusted_text

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_ERROR = 2
MAX_DIFFERENCE_ROWS = 50
MAX_MARKER_TTL_DAYS = 365
"""As the stack's markerTtlDays (stacks/settings.py)."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="python -m audit", description=__doc__, error_prefix="error: ")
    commands = parser.add_subparsers(dest="command", required=True)

    def add_target_options(command: argparse.ArgumentParser) -> None:
        where = command.add_mutually_exclusive_group()
        where.add_argument(
            "--outputs", type=Path, default=None, help=f"local outputs file (default {DEFAULT_OUTPUTS_PATH})"
        )
        where.add_argument("--stack-name", help="read the table and bucket names from this stack's outputs")
        command.add_argument("--region", help="AWS region (default: the SDK's)")

    reconciling = commands.add_parser("reconcile", help="compare the aggregate table (and a ledger) with the archive")
    add_target_options(reconciling)
    reconciling.add_argument("--ledger", type=Path, help="also compare with the producer's ledger (JSON)")

    rebuilding = commands.add_parser("rebuild", help="restore the aggregate table from the archive")
    add_target_options(rebuilding)
    rebuilding.add_argument("--dry-run", action="store_true", help="show what would be written, write nothing")
    rebuilding.add_argument(
        "--marker-window-hours",
        type=bounded(int, 1, MAX_SECONDS // 3600),
        default=DEFAULT_MARKER_WINDOW_HOURS,
        help="restore reduce markers of deltas created this recently (default %(default)s)",
    )
    rebuilding.add_argument(
        "--marker-ttl-days",
        type=bounded(int, MIN_MARKER_TTL_DAYS, MAX_MARKER_TTL_DAYS),
        default=DEFAULT_MARKER_TTL_DAYS,
        help="markers expire this many days after their delta was created, as markerTtlDays (default %(default)s)",
    )
    return parser


def print_reconcile_report(report: ReconcileReport, console: Console) -> None:
    """The checks, the differing nodes and the verdict.

    Node keys and object keys come from producers and from the bucket: each is shown as
    `toolkit.untrusted.untrusted_text` (never parsed as markup, control characters escaped),
    so no name can end the report early (``Delta[/]``), forge its verdict or write to the terminal.
    """
    title = f"reconcile: {report.objects} archived objects, {report.items} delta items, {report.nodes} nodes"
    checks = Table(title=title)
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("detail")
    for check in report.checks:
        result = Text("ok", style="green") if check.ok else Text("MISMATCH", style="red")
        checks.add_row(untrusted_text(check.name), result, untrusted_text(check.detail))
    console.print(checks)
    if report.differences:
        differences = Table(title="nodes that differ (archive is the expected side)")
        for column in ("node", "compared with", "archive value", "other value", "archive trades", "other trades"):
            differences.add_column(column)
        for difference in report.differences[:MAX_DIFFERENCE_ROWS]:
            differences.add_row(
                untrusted_text(difference.key),
                untrusted_text(difference.source),
                Text(str(difference.archive.value)),
                Text(str(difference.other.value)),
                Text(str(difference.archive.trade_count)),
                Text(str(difference.other.trade_count)),
            )
        console.print(differences)
        if len(report.differences) > MAX_DIFFERENCE_ROWS:
            console.print(Text(f"... and {len(report.differences) - MAX_DIFFERENCE_ROWS} more"))
    for key, reason in report.unreadable[:MAX_DIFFERENCE_ROWS]:
        console.print(Text.assemble(("unreadable", "red"), " ", untrusted_text(f"{key}: {reason}")))
    verdict = Text("MATCH", style="bold green") if report.ok else Text("MISMATCH", style="bold red")
    console.print(Text.assemble("verdict: ", verdict))


def print_rebuild_plan(plan: RebuildPlan, dry_run: bool, console: Console) -> None:
    """What the rebuild wrote (or would write); stale keys shown as untrusted text."""
    action = "would write" if dry_run else "wrote"
    console.print(
        Text(
            f"rebuild {action}: {len(plan.nodes)} nodes, {len(plan.markers)} reduce markers, "
            f"#stats MessagesApplied={plan.messages_applied}; {len(plan.stale_items)} other node items "
            f"(nodes absent from the archive, other slices, the layout before slices) "
            f"{'would be' if dry_run else 'were'} deleted"
        )
    )
    for key in plan.stale_items[:MAX_DIFFERENCE_ROWS]:
        console.print(Text.assemble("  stale node item: ", untrusted_text(key)))


def main(argv: Sequence[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    console = Console()
    try:
        target = resolve_target(arguments)
        if arguments.command == "reconcile":
            report = reconcile(target, arguments.ledger)
            print_reconcile_report(report, console)
            return EXIT_OK if report.ok else EXIT_MISMATCH
        plan = rebuild(
            target,
            dry_run=arguments.dry_run,
            marker_window_hours=arguments.marker_window_hours,
            marker_ttl_days=arguments.marker_ttl_days,
        )
        print_rebuild_plan(plan, arguments.dry_run, console)
        return EXIT_OK
    except (AuditError, LedgerError, TargetError) as error:
        print(f"error: {printable(str(error))}", file=sys.stderr)
    except ClientError as error:
        details = error.response.get("Error", {})
        message = f"{details.get('Code', 'AWS error')}: {details.get('Message', error)}"
        print(f"error: {printable(message)}", file=sys.stderr)
    except BotoCoreError as error:
        print(f"error: {printable(str(error))}", file=sys.stderr)
    return EXIT_ERROR
