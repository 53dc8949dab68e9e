"""The figures table of the real run and the control, and the verdict on each."""

from __future__ import annotations

from decimal import Decimal

from rich.table import Table

from local.runner.redelivery import COUNTED_SHAPES
from local.scenarios.chaos.figures import KEPT_TOKENS_FIGURE, RunFigures, peak_invocations, stage_of
from local.scenarios.chaos.settings import STAGES, ChaosSettings, archive_lost_response_pct


def _amount(value: Decimal) -> str:
    return f"{value:,f}" if value else "0"


def _row_values(figures: RunFigures, settings: ChaosSettings) -> list[tuple[str, str]]:
    """(figure, value) rows of one run, in table order."""
    counts = figures.counts
    by_kind = counts.malformed_by_kind
    rows: list[tuple[str, str]] = [
        ("messages sent", f"{counts.messages_sent:,}"),
        (
            "  new trades / modifications (moves)",
            f"{counts.new_trades:,} / {counts.modifications:,} ({counts.moves:,})",
        ),
        ("  duplicates (identical resends)", f"{counts.duplicates:,}"),
        ("  out-of-order (stale versions)", f"{counts.out_of_order:,}"),
        ("  conflicting duplicates", f"{counts.conflicting_duplicates:,}"),
        ("  malformed, all kinds", f"{counts.malformed:,} ({len(by_kind)} kinds)"),
        ("    of which non-UTF-8", f"{by_kind.get('not_utf8', 0):,}"),
        ("    of which numbers beyond 38 digits", f"{by_kind.get('value_too_many_digits', 0):,}"),
        ("    of which ~1 MB records", f"{by_kind.get('oversized_record', 0):,}"),
    ]
    for stage in STAGES:
        injected: dict[str, int] = {}
        for name, counters in figures.functions.items():
            if stage_of(name) == stage:
                injected = counters["injected"]
        rows.append(
            (
                f"{stage} function faults before / after write ({settings.function_fault_pct(stage):g} % each)",
                f"{injected.get('before_write', 0):,} / {injected.get('after_write', 0):,}",
            )
        )
    for name, count in figures.emulator_faults.items():
        rows.append((f"{name} ({_emulator_pct(name, settings):g} %)", f"{count:,}"))
    for stage in settings.reshaped_retries:
        reshaped: dict[str, int] = {}
        for name, counters in figures.functions.items():
            if stage_of(name) == stage:
                reshaped = counters.get("reshaped", {})
        rows.append(
            (
                f"{stage} retries re-delivered {' / '.join(COUNTED_SHAPES)}",
                " / ".join(f"{reshaped.get(shape, 0):,}" for shape in COUNTED_SHAPES),
            )
        )
    if settings.again_after_success_pct:
        again = {stage_of(name): c.get("again_after_success", 0) for name, c in figures.functions.items()}
        rows.append(
            (
                f"successful batches delivered again ({settings.again_after_success_pct:g} %)",
                ", ".join(f"{stage} {again.get(stage, 0):,}" for stage in STAGES),
            )
        )
    sent = figures.sent
    rows += [
        ("producer records re-sent (throttled or failed put_records)", f"{sent.retried_records:,}" if sent else "-"),
        (
            "batch retries, all functions (errors)",
            f"{sum(c['retries'] for c in figures.functions.values()):,} "
            f"({sum(c['errors'] for c in figures.functions.values()):,})",
        ),
        (
            "function workers SIGKILLed mid-invocation (by stage)",
            f"{sum(figures.workers_killed.values())} ("
            + ", ".join(f"{stage} {n}" for stage, n in sorted(figures.workers_killed.items()))
            + ")",
        ),
        ("runner SIGKILLs and restarts (mid-batch)", f"{figures.runner_restarts} ({figures.killed_mid_batch})"),
        (
            f"most reducers at once ({settings.stream_shards} stream shards, {settings.reduce_slices} slices)",
            f"{peak_invocations(figures.functions, 'reduce')}",
        ),
        ("reduce transactions cancelled by a conflict, resent", f"{figures.transaction_conflicts:,}"),
        (
            "requests of the functions' roles checked by IAM (denied)",
            f"{figures.iam.get('requests_checked', 0):,} ({figures.iam.get('denied', 0):,})"
            if figures.iam.get("mode") == "enforce"
            else "IAM not enforced",
        ),
        (
            "records quarantined (expected: malformed + conflicts)",
            f"{figures.quarantine.records:,} ({counts.malformed + counts.conflicting_duplicates:,})",
        ),
        (
            "  conflicts / truncated ~1 MB / stored binary",
            f"{figures.quarantine.conflicting_duplicates:,} / {figures.quarantine.truncated:,} / "
            f"{figures.quarantine.stored_as_binary:,}",
        ),
    ]
    found = figures.discrepancies
    rows += [
        ("aggregate nodes compared / wrong", f"{found.nodes_compared:,} / {found.nodes_wrong:,}"),
        ("LOST: value / trade count in nodes", f"{_amount(found.value_missing)} / {found.trades_missing_from_nodes:,}"),
        (
            "DOUBLE-COUNTED: value / trade count in nodes",
            f"{_amount(found.value_double_counted)} / {found.trades_double_counted_in_nodes:,}",
        ),
        (
            "trades missing / at wrong version / with other content",
            f"{found.trades_missing:,} / {found.trades_at_wrong_version:,} / {found.trades_with_other_content:,}",
        ),
        (
            "audit reconcile (S3 archive vs aggregates)",
            "agrees" if figures.reconcile_exit_code == 0 else f"disagrees (exit {figures.reconcile_exit_code})",
        ),
        ("wall time", f"{figures.elapsed_seconds:.0f} s"),
    ]
    return rows


def _emulator_pct(name: str, settings: ChaosSettings) -> float:
    if name == KEPT_TOKENS_FIGURE:
        return 100.0 if settings.kept_tokens else 0.0
    if name.startswith("lost response, archive"):
        return archive_lost_response_pct(settings.lost_response_pct)
    return settings.lost_response_pct if name.startswith("lost response") else settings.throttle_pct


def quarantine_matches(figures: RunFigures) -> bool:
    counts = figures.counts
    return figures.quarantine.records == counts.malformed + counts.conflicting_duplicates and (
        figures.quarantine.conflicting_duplicates == counts.conflicting_duplicates
    )


def run_passed(figures: RunFigures) -> bool:
    """The real run: exact, the archive agrees, every bad record quarantined once, and every call
    of the functions' roles allowed by their policies with IAM enforced."""
    return (
        figures.verified_exact
        and figures.iam_enforced_and_sufficient
        and figures.discrepancies.exact
        and figures.reconcile_exit_code == 0
        and quarantine_matches(figures)
    )


def control_caught(figures: RunFigures) -> bool:
    """The unsafe control must be seen as wrong by the verifier."""
    return not figures.verified_exact and not figures.discrepancies.exact


def figures_table(real: RunFigures, control: RunFigures | None, settings: ChaosSettings) -> Table:
    table = Table(title="make chaos: figures", show_lines=False)
    table.add_column("figure")
    table.add_column(f"{real.label}\n(reduce {real.reduce_mode})", justify="right")
    if control is not None:
        table.add_column(f"{control.label}\n(reduce {control.reduce_mode})", justify="right")
    real_rows = _row_values(real, settings)
    control_rows = _row_values(control, settings) if control is not None else []
    for index, (name, value) in enumerate(real_rows):
        cells = [name, value] + ([control_rows[index][1]] if control is not None else [])
        table.add_row(*cells)
    verdict = "[green]EXACT: lost 0, double-counted 0[/]" if run_passed(real) else "[red]NOT EXACT[/]"
    cells = ["verdict", verdict]
    if control is not None:
        cells.append("[green]over-count CAUGHT[/]" if control_caught(control) else "[red]NOT CAUGHT[/]")
    table.add_row(*cells, style="bold")
    return table
