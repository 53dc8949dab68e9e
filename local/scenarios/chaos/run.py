"""One run on a fresh runtime under every fault, and the chaos run with its negative control."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from rich.console import Console

from aggregation.names import TOKEN_AND_MARKERS, UNSAFE_ADD
from local.deploy import lifecycle
from local.emulator.control import iam_report, transaction_conflicts
from local.emulator.iam_check import ENFORCE as IAM_ENFORCE
from local.emulator.iam_check import ENVIRONMENT_VARIABLE as IAM_ENVIRONMENT_VARIABLE
from local.emulator.injected_faults import clear_faults, configure_faults
from local.paths import REPO_ROOT, LocalPaths
from local.scenarios.chaos.figures import (
    RunFigures,
    count_quarantine,
    emulator_fault_figures,
    records_processed,
    report_discrepancies,
)
from local.scenarios.chaos.kills import KILL_WAIT_FOR_BATCH_SECONDS, RunnerRestarts, kill_plan
from local.scenarios.chaos.report import control_caught, figures_table, run_passed
from local.scenarios.chaos.settings import ChaosError, ChaosSettings, emulator_fault_config
from producer.sender import SendSummary, send_messages
from producer.verifier import verify_pipeline
from toolkit.pipeline import PipelineTarget, target_from_outputs

DEFAULT_CONTROL_COUNT = 5_000
"""The control only has to show the over-count; a quarter of the real run keeps `make chaos` short."""

Report = Callable[[str], None]


def run_pipeline(
    paths: LocalPaths,
    console: Console,
    settings: ChaosSettings,
    *,
    label: str,
    reduce_mode: str | None,
    count: int,
) -> RunFigures:
    """One full run on a fresh runtime; always ends with `down`."""
    started = time.monotonic()
    figures = RunFigures(label=label, reduce_mode=reduce_mode or f"{TOKEN_AND_MARKERS} (deployed default)")
    environment = {
        **os.environ,
        **settings.function_fault_environment(),
        **settings.runner_environment(),
        **settings.concurrency_environment(),
        IAM_ENVIRONMENT_VARIABLE: IAM_ENFORCE,  # the run proves the roles' grants suffice (`local.emulator.iam_check`)
    }
    environment.pop("REDUCE_IDEMPOTENCY", None)
    if reduce_mode is not None:
        environment["REDUCE_IDEMPOTENCY"] = reduce_mode
    if reduce_mode == UNSAFE_ADD:
        environment.update(settings.control_environment())
    quiet: Report = lambda _: None  # noqa: E731
    lifecycle.down(paths, report=quiet)  # a fresh emulator: the run's tables hold only this run
    console.print(f"[bold]{label}[/]: starting a fresh runtime (reduce {figures.reduce_mode})")
    deployment = lifecycle.up(paths, environment=environment, report=quiet)
    try:
        outputs = deployment.local_outputs()
        target = target_from_outputs(paths.outputs)
        configure_faults(deployment.endpoint_url, emulator_fault_config(settings, outputs, settings.seed))
        restarts = RunnerRestarts(paths, environment, figures)
        _send_and_drain(
            paths, console, settings=settings, target=target, restarts=restarts, figures=figures, count=count
        )
        restarts.finish()
        figures.emulator_faults = emulator_fault_figures(clear_faults(deployment.endpoint_url))
        figures.transaction_conflicts = transaction_conflicts(deployment.endpoint_url)
        figures.iam = iam_report(deployment.endpoint_url)
        console.print(f"{label}: verifying the aggregates against the ledger")
        report = verify_pipeline(target, paths.ledger, timeout=120.0, settle_seconds=5.0)
        figures.discrepancies = report_discrepancies(report)
        figures.verified_exact = report.exact
        figures.quarantine = count_quarantine(target)
        console.print(f"{label}: python -m audit reconcile")
        reconciled = subprocess.run(
            [
                sys.executable,
                "-m",
                "audit",
                "reconcile",
                "--outputs",
                str(paths.outputs),
                "--ledger",
                str(paths.ledger),
            ],
            cwd=REPO_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        figures.reconcile_exit_code = reconciled.returncode
        figures.reconcile_report = reconciled.stdout + reconciled.stderr
    finally:
        lifecycle.down(paths, report=quiet)
    figures.elapsed_seconds = time.monotonic() - started
    return figures


def _send_and_drain(
    paths: LocalPaths,
    console: Console,
    *,
    settings: ChaosSettings,
    target: PipelineTarget,
    restarts: RunnerRestarts,
    figures: RunFigures,
    count: int,
) -> None:
    """Send in the background; kill the runner at evenly spaced points of progress; wait for the drain."""
    outcome: list[SendSummary | BaseException] = []

    def send() -> None:
        try:
            summary = send_messages(target, settings.send_options(count, paths.ledger))
            outcome.append(summary)
        except BaseException as error:  # reported by the main thread
            outcome.append(error)

    sender = threading.Thread(target=send, name="chaos-send", daemon=True)
    sender.start()
    kills = kill_plan(settings)

    def spaced(records: int) -> list[float]:
        return [records * (index + 1) / (len(kills) + 1) for index in range(len(kills))]

    # The state's progress is counted in Kinesis records: one per message, unless they are KPL
    # aggregates, whose number is known once the send is done (it is quick next to the drain).
    kill_points: list[float] | None = None if settings.aggregate else spaced(count)
    # A stall, not a slow run, is a failure: the limit counts from the last record any function completed.
    last_line = 0.0
    progress, progress_at = -1, time.monotonic()
    while True:
        stats = restarts.stats()
        lives = (figures.functions, stats.get("functions", {}))  # earlier runner lives, this one
        processed = sum(records_processed(functions, "state") for functions in lives)
        if (completed := sum(records_processed(functions) for functions in lives)) != progress:
            progress, progress_at = completed, time.monotonic()
        if kill_points is None and outcome and isinstance(outcome[0], SendSummary):
            kill_points = spaced(outcome[0].records_sent)
        if kill_points and processed >= kill_points[0]:
            kill_points.pop(0)
            victim = kills.pop(0)
            if victim == "runner":
                busy = restarts.kill_runner_and_restart()
                console.print(
                    f"  SIGKILLed the runner and its workers (in flight: {', '.join(busy) or 'nothing'}); "
                    f"restarted it from its checkpoints (restart {figures.runner_restarts})"
                )
            elif restarts.kill_worker(victim):
                console.print(f"  SIGKILLed the {victim} function's worker inside an invocation")
            else:
                console.print(f"  [yellow]no {victim} invocation to kill within {KILL_WAIT_FOR_BATCH_SECONDS:.0f} s[/]")
            continue
        sent = bool(outcome)
        if sent and isinstance(outcome[0], BaseException):
            raise ChaosError(f"the producer failed: {outcome[0]}")
        if sent and not kill_points and restarts.drained():
            break
        if time.monotonic() - progress_at > settings.drain_timeout_seconds:
            raise ChaosError(
                f"the pipeline completed no record for {settings.drain_timeout_seconds:.0f} s "
                f"({processed:,} of {count:,} state records processed)"
            )
        now = time.monotonic()
        if now - last_line >= 10:
            last_line = now
            functions = stats.get("functions", {}).values()
            console.print(
                f"  {'sent' if sent else 'sending'}; state records processed {processed:,} / {count:,} "
                f"(replays included), errors {sum(f['errors'] for f in functions)}, "
                f"retries {sum(f['retries'] for f in functions)} (this runner life), "
                f"restarts {figures.runner_restarts}"
            )
        time.sleep(0.2)
    summary = outcome[0]
    assert isinstance(summary, SendSummary)
    figures.sent = summary


def run_chaos(paths: LocalPaths, console: Console, settings: ChaosSettings) -> int:
    """The chaos run, then the control; the figures table; 0 only if exact and the control is caught."""
    started = time.monotonic()
    console.rule(f"[bold]chaos run[/]: {settings.count:,} messages, every failure at once")
    real = run_pipeline(paths, console, settings, label="chaos run", reduce_mode=None, count=settings.count)
    control: RunFigures | None = None
    if settings.control:
        control_count = settings.control_count or min(settings.count, DEFAULT_CONTROL_COUNT)
        console.rule(f"[bold]negative control[/]: the same run, reduce {UNSAFE_ADD}")
        control = run_pipeline(
            paths, console, settings, label="negative control", reduce_mode=UNSAFE_ADD, count=control_count
        )
    console.print(figures_table(real, control, settings))
    console.print(f"total wall time {time.monotonic() - started:.0f} s")
    failures: list[str] = []
    if not run_passed(real):
        failures.append("the chaos run is NOT exact (see the table)")
        if real.reconcile_exit_code != 0:
            console.rule("audit reconcile of the chaos run")
            console.print(real.reconcile_report, markup=False, highlight=False)
        if not real.iam_enforced_and_sufficient:
            console.rule("IAM: calls of the functions' roles their policies did not allow")
            for message, count in real.iam.get("denials", {}).items():
                console.print(f"{count:>6} x {message}", markup=False, highlight=False)
    if control is not None and not control_caught(control):
        failures.append("the negative control was NOT caught: the verifier cannot see an over-count")
    for failure in failures:
        console.print(f"[bold red]FAIL[/]: {failure}")
    if not failures:
        caught = " and the unsafe control was caught" if control is not None else ""
        console.print(f"[bold green]PASS[/]: exactly once under every failure{caught}")
    return 1 if failures else 0
