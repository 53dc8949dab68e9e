"""`python -m local upgrade --from <release>`: a stack of an earlier release upgraded in place while messages flow.

The runner plays AWS's Lambda service and stays this checkout's; the code it runs is the
release's, loaded from the deployed assets as always. So the scenario is:

1. **old**: a fresh emulator; the release's own template and function code (`release_tree`)
   deployed by `up`; the producer sends the first part (ground truth in the ledger) while the
   old functions run with the demo's fault rates.
2. **in flight**: the old functions now fail after their writes (`IN_FLIGHT_FAULTS`: every
   reduce and archive invocation, half of state and map): whatever the old code commits from
   here is never acknowledged, so its batches stay in flight, markers, tokens, delta items and
   archive claims written. The producer sends the second part in the background, paced to
   span the upgrade.
3. **upgrade**: once the old reducer has committed and failed at least once, the runner stops
   (Lambda stops invoking the old code; what it had under way ends unacknowledged), and `up`
   with this checkout's assembly runs the settings guard and the CloudFormation update in place
   and starts the runner from the kept checkpoints: the new code takes the next invocations and
   retries the batches the old code left in flight. Its reducer runs without faults after its
   writes, so every ClientRequestToken the emulator sees met from here on is the old code's.
4. **more**: the third part is sent to the new code; the pipeline drains.
5. **verify**: `producer verify` against the ledger (EXACT or not), `audit reconcile`, and the
   figures that show the upgrade was what it claims: the old code's unacknowledged commits,
   the old tokens the new reducer met (the emulator's counters: same request, answered; other
   request, refused) and the old markers it found (its log lines), and the node items of the
   old layout the totals still hold.

`negative_control` upgrades to the new code with reduce in mode `unsafe-add` (no token, no
marker): the batches the old code committed are then applied again, and the run must come out
NOT EXACT, which shows the check can see an upgrade that is not exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aggregation.aggregate_items import node_path_of
from aggregation.names import AGGREGATE_KEY, NODE_PREFIX, TOKEN_ONLY, UNSAFE_ADD
from function_support.faults import FailurePoint, failure_variable
from local.deploy import deployer, lifecycle
from local.emulator.control import advance_clock, transaction_figures
from local.emulator.moto_compat import CLIENT_REQUEST_TOKEN_WINDOW_SECONDS
from local.paths import REPO_ROOT, LocalPaths
from local.runner.stats import read_stats
from local.scenarios.chaos.figures import stage_of
from local.scenarios.chaos.settings import STAGES
from local.scenarios.demo import DEMO_FAULT_RATES, is_drained
from local.upgrade.release_tree import checkout_assembly, release_assembly
from local.upgrade.releases import Release
from producer.sender import SendOptions, send_messages
from producer.verifier import VerificationReport, verify_pipeline
from toolkit.pipeline import PipelineTarget, target_from_outputs

REDUCE_AFTER_WRITE = failure_variable("reduce", FailurePoint.AFTER_WRITE)

IN_FLIGHT_FAULTS: Mapping[str, str] = {
    failure_variable("state", FailurePoint.AFTER_WRITE): "50",
    failure_variable("map", FailurePoint.AFTER_WRITE): "50",
    REDUCE_AFTER_WRITE: "100",
    failure_variable("archive", FailurePoint.AFTER_WRITE): "100",
}
"""The old code's faults just before the upgrade: every reduce and archive batch it commits stays
unacknowledged, so the new code is certain to retry some batch whose writes the old code made."""

PART_SHARES = (0.4, 0.3, 0.3)
"""The messages sent before the upgrade, across it, and after it."""

SPANNING_SEND_SECONDS = 6.0
"""How long the second part takes to send: long enough that the upgrade lands inside it."""

WAIT_SECONDS = 60.0
"""Limit of each wait for the old code (its first applied batch, its first unacknowledged commit)."""


def _quiet(_: str) -> None:
    """Lifecycle reports the scenario does not show."""


class UpgradeError(RuntimeError):
    """The scenario could not run (not: the totals were wrong, which is its verdict)."""


@dataclass(frozen=True)
class UpgradeSettings:
    release: Release
    count: int = 1500
    seed: int = 7
    drain_timeout_seconds: float = 180.0
    negative_control: bool = False
    keep_running: bool = False
    reduce_mode: str | None = None
    """`reduceIdempotency` both releases are synthesized with (None: `cdk.json`'s, `crt+marker`)."""
    drained: bool = False
    """The migration for mode `crt` (README, "Upgrading in place"): no batch left in flight; the
    producer stops, the old release drains, then the upgrade (declared drained), then the rest."""

    @property
    def context(self) -> dict[str, str]:
        return {} if self.reduce_mode is None else {"reduceIdempotency": self.reduce_mode}

    @property
    def expects_refusal(self) -> bool:
        """Whether the deploy must refuse this upgrade: in mode `crt` mid-stream, unless declared
        drained, over a release whose guard does not say how its reduce batches were formed
        (`Release.guard_carries_reduce_batches`)."""
        return not self.release.guard_carries_reduce_batches and self.reduce_mode == TOKEN_ONLY and not self.drained


@dataclass
class UpgradeFigures:
    """What the run did and found; `passed` is its verdict."""

    release: Release
    negative_control: bool
    old_template_sha256: str = ""
    new_template_sha256: str = ""
    stack_status: str = ""
    expects_refusal: bool = False
    """`UpgradeSettings.expects_refusal` of the run."""
    refusal: str | None = None
    """The deploy's one line when it refused the upgrade (the stack then stays the old release's)."""
    tokens_expired_to_drain: bool = False
    """The new code drained only once the old code's tokens had expired (the compat clock moved on
    by their 10 minutes): it was stalled on a token it could not prove applied."""
    """The stack's status after the upgrade: UPDATE_COMPLETE when the template changed."""
    sent: list[int] = field(default_factory=list)
    old_unacknowledged_commits: dict[str, int] = field(default_factory=dict)
    """Per stage, the old code's invocations that failed after their writes just before the upgrade."""
    new_token_replays: int = 0
    """Old tokens the new reducer met with the same request: DynamoDB's success, nothing applied again."""
    new_token_mismatches: int = 0
    """Old tokens the new reducer met with another request (the keys changed with the slices): refused."""
    new_markers_found: int = 0
    """Markers the new reducer found for the units of the requests refused so."""
    new_units_already_applied: int = 0
    pre_slice_node_items: int = 0
    sliced_node_items: int = 0
    verification: VerificationReport | None = None
    reconcile_exit_code: int | None = None
    reconcile_report: str = ""
    elapsed_seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return self.verification is not None and self.verification.exact

    @property
    def passed(self) -> bool:
        """Refused when it must be; otherwise exact and reconciled, or, for the negative control,
        caught as not exact."""
        if self.refusal is not None or self.expects_refusal:
            return self.refusal is not None and self.expects_refusal
        if self.negative_control:
            return self.verification is not None and not self.verification.exact
        return self.exact and self.reconcile_exit_code == 0


def part_counts(count: int) -> list[int]:
    """`count` split by `PART_SHARES`, each part at least 1, the last taking the rounding."""
    first, second = (max(1, int(count * share)) for share in PART_SHARES[:2])
    return [first, second, max(1, count - first - second)]


def _after_write_failures(stats: Mapping[str, Any]) -> int:
    return int(stats.get("injected_failures", {}).get("after_write", 0))


def _completed(stats: Mapping[str, Any]) -> int:
    return int(stats.get("invocations", 0)) - int(stats.get("errors", 0))


def wait_until(condition: Callable[[], bool], what: str, timeout_seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        if time.monotonic() > deadline:
            raise UpgradeError(f"{what} did not happen within {timeout_seconds:.0f} s")
        time.sleep(0.2)


def new_code_log_figures(log_lines: list[str]) -> tuple[int, int]:
    """(markers found after a refused token, units found applied) in reduce's log lines.

    The new reducer logs a token DynamoDB refused as reused with other parameters (the old code
    used it for another request: the item keys changed with the slices) with the markers it then
    found, and per batch the units whose markers were already there.
    """
    markers = already = 0
    for line in log_lines:
        if not line.startswith("{") or '"service":"reduce"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("message") == "token refused as reused with other parameters":
            markers += int(entry.get("markers_found", 0))
        elif entry.get("message") == "reduce batch done":
            already += int(entry.get("units_already_applied", 0))
    return markers, already


def count_node_items(target: PipelineTarget) -> tuple[int, int]:
    """(node items of the layout before slices, sliced node items) in the AggregateTable."""
    client = target.dynamodb()
    pre_slice = sliced = 0
    for page in client.get_paginator("scan").paginate(
        TableName=target.aggregate_table, ProjectionExpression="#k", ExpressionAttributeNames={"#k": AGGREGATE_KEY}
    ):
        for item in page.get("Items", []):
            key = item[AGGREGATE_KEY]["S"]
            if key.startswith(NODE_PREFIX) and node_path_of(key) != key:
                sliced += 1
            elif node_path_of(key) == key:
                pre_slice += 1
    return pre_slice, sliced


def _reconcile(paths: LocalPaths, environment: Mapping[str, str]) -> tuple[int, str]:
    """`python -m audit reconcile` of the run: the archive (what both releases wrote) against the totals."""
    completed = subprocess.run(
        [sys.executable, "-m", "audit", "reconcile", "--outputs", str(paths.outputs), "--ledger", str(paths.ledger)],
        cwd=REPO_ROOT,
        env=dict(environment),
        capture_output=True,
        text=True,
        check=False,
    )
    return completed.returncode, completed.stdout + completed.stderr


@dataclass
class _Run:
    """One run's state between its phases."""

    paths: LocalPaths
    console: Console
    settings: UpgradeSettings
    figures: UpgradeFigures
    base: dict[str, str]
    parts: list[int]
    target: PipelineTarget | None = None
    tokens_before: dict[str, int] = field(default_factory=dict)

    def counter(self, stage: str, count: Callable[[Mapping[str, Any]], int]) -> int:
        functions = (read_stats(self.paths.runner_stats) or {}).get("functions", {})
        return sum(count(stats) for name, stats in functions.items() if stage_of(name) == stage)

    def send(self, part: int, rate: float = 0.0) -> int:
        assert self.target is not None
        options = SendOptions(
            count=self.parts[part], seed=self.settings.seed + part, rate=rate, ledger_path=self.paths.ledger
        )
        return send_messages(self.target, options).messages_sent


def _run_old_release(run: _Run, old_assembly: Path) -> None:
    """Phase 1: the release deployed and fed its part, until its reducer has applied a batch."""
    run.console.rule(f"[bold]1. old[/]: release {run.settings.release.name} deployed, {run.parts[0]:,} messages sent")
    lifecycle.up(run.paths, environment={**run.base, **DEMO_FAULT_RATES}, cdk_out=old_assembly, report=_quiet)
    run.target = target_from_outputs(run.paths.outputs)
    run.figures.sent.append(run.send(0))
    wait_until(lambda: run.counter("reduce", _completed) > 0, "the old reducer's first applied batch")


def _upgrade_mid_stream(run: _Run, old_assembly: Path, new_assembly: Path) -> int | None:
    """Phases 2 and 3: the old code leaves batches in flight while a part is sent, and this
    checkout is deployed in place meanwhile; returns where the new code's log lines start
    (None: the deploy refused the upgrade)."""
    if run.settings.drained:
        return _upgrade_drained(run, new_assembly)
    run.console.rule(f"[bold]2. in flight[/]: the old code fails after its writes; {run.parts[1]:,} more sending")
    lifecycle.up(run.paths, environment={**run.base, **IN_FLIGHT_FAULTS}, cdk_out=old_assembly, report=_quiet)
    spanning: list[int | BaseException] = []

    def send_across_the_upgrade() -> None:
        try:
            spanning.append(run.send(1, rate=run.parts[1] / SPANNING_SEND_SECONDS))
        except BaseException as error:  # reported below
            spanning.append(error)

    sender = threading.Thread(target=send_across_the_upgrade, name="upgrade-send", daemon=True)
    sender.start()
    wait_until(
        lambda: run.counter("reduce", _after_write_failures) > 0,
        "a reduce batch committed by the old code and left unacknowledged",
    )
    run.figures.old_unacknowledged_commits = {stage: run.counter(stage, _after_write_failures) for stage in STAGES}

    run.console.rule("[bold]3. upgrade[/]: this checkout deployed in place, mid-stream")
    log_offset = _deploy_the_new_release(run, new_assembly)
    sender.join()
    if isinstance(spanning[0], BaseException):
        raise UpgradeError(f"the producer failed across the upgrade: {spanning[0]}")
    run.figures.sent.append(spanning[0])
    return log_offset


def _deploy_the_new_release(run: _Run, new_assembly: Path) -> int | None:
    """The upgrade itself; returns where the new code's log lines start (None: refused)."""
    # Lambda stops invoking the old code: its invocations under way end uncommitted to the
    # checkpoints, as a killed runner's do. Every token the emulator sees met from here on is met
    # by the new code, whose reducer has no fault after its writes: each one is the old code's.
    lifecycle.stop_runner(run.paths)
    run.tokens_before = transaction_figures(_endpoint(run.paths))
    log_offset = run.paths.runner_log.stat().st_size if run.paths.runner_log.exists() else 0
    try:
        deployment = lifecycle.up(
            run.paths,
            environment=_new_environment(run),
            cdk_out=new_assembly,
            report=_quiet,
            drained=run.settings.drained,
        )
    except deployer.DeploymentError as refused:
        run.figures.refusal = str(refused)
        run.console.print(f"  the deploy refused the upgrade: {refused}")
        return None
    cloudformation = deployer.aws_client("cloudformation", deployment.endpoint_url, deployment.region)
    stack = cloudformation.describe_stacks(StackName=deployment.stack_name)["Stacks"][0]
    run.figures.stack_status = str(stack["StackStatus"])
    return log_offset


def _upgrade_drained(run: _Run, new_assembly: Path) -> int | None:
    """The migration: the producer has stopped; the old release drains; then the upgrade and the second part."""
    run.console.rule("[bold]2. drained[/]: the producer stopped, the old release drains")
    sent_by = time.time()
    wait_until(
        lambda: is_drained(read_stats(run.paths.runner_stats) or {}, since=sent_by),
        "the drain",
        run.settings.drain_timeout_seconds,
    )
    run.figures.old_unacknowledged_commits = {stage: 0 for stage in STAGES}
    run.console.rule("[bold]3. upgrade[/]: this checkout deployed in place, nothing in flight")
    log_offset = _deploy_the_new_release(run, new_assembly)
    if log_offset is not None:
        run.figures.sent.append(run.send(1))
    return log_offset


def _wait_for_the_drain(run: _Run) -> None:
    """The drain; should it stall, once more after the old code's tokens have expired (a stall on
    a token the new code cannot prove applied ends then: `tokens_expired_to_drain`)."""
    sent_by = time.time()  # every part sent: a read that started before may have missed its last records
    drained = lambda: is_drained(read_stats(run.paths.runner_stats) or {}, since=sent_by)  # noqa: E731
    try:
        wait_until(drained, "the drain", run.settings.drain_timeout_seconds)
    except UpgradeError:
        run.console.print(
            f"  stalled: the compat clock moves on {CLIENT_REQUEST_TOKEN_WINDOW_SECONDS:.0f} s (the old tokens expire)"
        )
        advance_clock(_endpoint(run.paths), CLIENT_REQUEST_TOKEN_WINDOW_SECONDS)
        run.figures.tokens_expired_to_drain = True
        wait_until(drained, "the drain (after the old tokens expired)", run.settings.drain_timeout_seconds)


def _endpoint(paths: LocalPaths) -> str:
    return str(json.loads(paths.outputs.read_text())["endpoint_url"])


def _new_environment(run: _Run) -> dict[str, str]:
    """The demo's faults, but none after reduce's writes (`_upgrade_mid_stream` says why)."""
    environment = {**run.base, **DEMO_FAULT_RATES, REDUCE_AFTER_WRITE: "0"}
    if run.settings.negative_control:
        environment["REDUCE_IDEMPOTENCY"] = UNSAFE_ADD
    return environment


def _finish_and_verify(run: _Run, log_offset: int) -> None:
    """Phases 4 and 5: a last part to the new code, the drain, the verdict and the figures."""
    assert run.target is not None
    run.console.rule(f"[bold]4. more[/]: {run.parts[2]:,} messages to the new code, then the drain")
    run.figures.sent.append(run.send(2))
    _wait_for_the_drain(run)
    run.console.rule("[bold]5. verify[/]")
    run.figures.verification = verify_pipeline(run.target, run.paths.ledger, timeout=60.0, settle_seconds=3.0)
    run.figures.reconcile_exit_code, run.figures.reconcile_report = _reconcile(run.paths, _new_environment(run))
    with run.paths.runner_log.open(errors="replace") as log_file:
        log_file.seek(log_offset)
        run.figures.new_markers_found, run.figures.new_units_already_applied = new_code_log_figures(
            log_file.read().splitlines()
        )
    tokens_after = transaction_figures(_endpoint(run.paths))
    run.figures.new_token_replays = tokens_after["token_replays"] - run.tokens_before["token_replays"]
    run.figures.new_token_mismatches = tokens_after["token_mismatches"] - run.tokens_before["token_mismatches"]
    run.figures.pre_slice_node_items, run.figures.sliced_node_items = count_node_items(run.target)


def run_upgrade(paths: LocalPaths, console: Console, settings: UpgradeSettings) -> UpgradeFigures:
    """The scenario of the module docstring, on a fresh runtime; `down` at the end unless `keep_running`."""
    started = time.monotonic()
    release = settings.release
    figures = UpgradeFigures(
        release=release, negative_control=settings.negative_control, expects_refusal=settings.expects_refusal
    )
    console.print(f"synthesizing release {release.name} ({release.commit}) from its own tree, and this checkout")
    old_assembly = release_assembly(release.commit, context=settings.context)
    new_assembly = checkout_assembly(settings.context)
    figures.old_template_sha256 = deployer.read_cloud_assembly(old_assembly).template_sha256
    figures.new_template_sha256 = deployer.read_cloud_assembly(new_assembly).template_sha256
    base = {key: value for key, value in os.environ.items() if not key.startswith("FAILURE_")}
    base.pop("REDUCE_IDEMPOTENCY", None)
    run = _Run(paths, console, settings, figures, base, part_counts(settings.count))
    lifecycle.down(paths, report=_quiet)
    try:
        _run_old_release(run, old_assembly)
        log_offset = _upgrade_mid_stream(run, old_assembly, new_assembly)
        if log_offset is not None:
            _finish_and_verify(run, log_offset)
    finally:
        if not settings.keep_running:
            lifecycle.down(paths, report=_quiet)
    figures.elapsed_seconds = time.monotonic() - started
    return figures


def figures_table(figures: UpgradeFigures) -> Table:
    table = Table(title=f"upgrade from {figures.release.name} ({figures.release.commit}) to this checkout")
    table.add_column("figure")
    table.add_column("value", justify="right")
    report = figures.verification
    rows = [
        ("messages sent: before / across / after the upgrade", " / ".join(f"{n:,}" for n in figures.sent)),
        ("deploy refused the upgrade", "yes" if figures.refusal is not None else "no"),
        ("stack status after the upgrade", figures.stack_status or "-"),
        (
            "template changed by the upgrade",
            "yes" if figures.old_template_sha256 != figures.new_template_sha256 else "no (same template)",
        ),
        (
            "old code's commits left unacknowledged (state, map, reduce, archive)",
            ", ".join(str(figures.old_unacknowledged_commits.get(s, 0)) for s in ("state", "map", "reduce", "archive")),
        ),
        (
            "old tokens met by the new reducer: same request (answered) / other request (refused)",
            f"{figures.new_token_replays} / {figures.new_token_mismatches}",
        ),
        ("old markers found by the new reducer after a refused token", str(figures.new_markers_found)),
        ("new reducer: units found applied by their markers", str(figures.new_units_already_applied)),
        (
            "node items of the layout before slices / sliced",
            f"{figures.pre_slice_node_items} / {figures.sliced_node_items}",
        ),
        (
            "nodes matching the ledger",
            f"{report.aggregates.matching_nodes} of {report.aggregates.expected_nodes}" if report else "-",
        ),
        ("trades mismatching", str(len(report.trade_mismatches)) if report else "-"),
        ("drained only after the old tokens expired (stalled)", "yes" if figures.tokens_expired_to_drain else "no"),
        ("producer verify", "-" if report is None else "EXACT" if figures.exact else "NOT EXACT"),
        ("audit reconcile exit code", "-" if figures.reconcile_exit_code is None else str(figures.reconcile_exit_code)),
        ("wall time", f"{figures.elapsed_seconds:.0f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def report_upgrade(figures: UpgradeFigures, console: Console) -> int:
    """The figures and the verdict; 0 when the run passed (the control: when it was caught)."""
    console.print(figures_table(figures))
    if figures.refusal is not None or figures.expects_refusal:
        verdict = f"the deploy refused it, as it must: {figures.refusal}" if figures.passed else "NOT refused"
    elif figures.negative_control:
        verdict = (
            "caught: NOT EXACT, as an upgrade without markers and tokens must be" if figures.passed else "NOT caught"
        )
    elif figures.passed:
        verdict = "EXACT, and the archive reconciles"
    else:
        verdict = "NOT EXACT" if not figures.exact else "exact, but audit reconcile failed"
        if figures.reconcile_exit_code:
            console.print(figures.reconcile_report, markup=False, highlight=False)
    colour = "green" if figures.passed else "red"
    console.print(
        f"[bold {colour}]{'PASS' if figures.passed else 'FAIL'}[/]: upgrade from {figures.release.name}: {verdict}"
    )
    return 0 if figures.passed else 1


def run_upgrades(paths: LocalPaths, console: Console, runs: list[UpgradeSettings]) -> int:
    """Each run in turn (fresh runtime each); 0 only if every one passed."""
    failed = 0
    for settings in runs:
        label = "negative control" if settings.negative_control else "upgrade"
        console.rule(
            f"[bold]{label} from {settings.release.name}[/] ({settings.release.commit}): {settings.release.why}"
        )
        failed += report_upgrade(run_upgrade(paths, console, settings), console)
    return 1 if failed else 0
