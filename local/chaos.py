"""`make chaos`: every failure the pipeline must survive at once, the figures, and a negative control that must fail.

One run = a fresh local runtime (`lifecycle.up`) with, all at the same time:

- function faults (`FAILURE_*_PCT`, docs/design.md) before and after the write, in every stage,
  at several times the original demo's rates;
- AWS-side faults the emulator injects (`local.injected_faults`): the response of an applied
  write lost at every DynamoDB write site (state `UpdateItem`: HTTP 500; map `PutItem`:
  connection closed; reduce `TransactWriteItems`: held past the SDK's read timeout), with the
  SDK's own retries active, and throttling of reads and writes (DynamoDB, DynamoDB Streams,
  Kinesis);
- a cancelled reduce transaction's ClientRequestToken kept taken by the emulator (a retry with
  other parameters would be refused: `cancelled_token_kept`), with throttled transactions
  cancelled for it to bite on;
- failed map and reduce batches re-delivered in other boundaries by the runner: grown, shrunk
  or shifted back (`local.runner.redelivery`), as Lambda does not promise identical retries;
- the response of every S3 PutObject of the archive lost at the same rate (its objects and
  its registry writes; connection closed): the SDK's resend of a conditional PUT gets 412;
- the runner SIGKILLed mid-batch (its whole process group: the runner and the functions'
  workers, found from the pid `up` recorded, never by name) and restarted from its checkpoints;
- bad input from the producer: duplicates, out-of-order versions, malformed records of every
  kind (non-UTF-8, numbers beyond 38 digits, ~1 MB records...), conflicting duplicates.

Then the faults are cleared, the aggregates are compared exactly with the producer's ledger
(`producer.verify_pipeline`), the quarantine table is counted and `python -m audit reconcile`
checks the S3 archive. The control repeats the run with the reduce function in
`REDUCE_IDEMPOTENCY=unsafe-add` (plain ADD, no token, no marker): the verifier must catch the
over-count, or the chaos suite proves nothing. Exit 0 only when the real run is exact, the
archive agrees, and the control is caught.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from local import lifecycle
from local.demo import is_idle
from local.injected_faults import CANCELLED_TOKEN_KEPT, LOST_RESPONSE, THROTTLE, clear_faults, configure_faults
from local.paths import REPO_ROOT, LocalPaths
from local.runner.redelivery import SHAPES, RedeliveryPolicy
from local.runner.stats import read_stats
from producer.ledger import LedgerCounts
from producer.sender import SendOptions, SendSummary, send_messages
from producer.verifier import NodeMismatch, TradeMismatch, VerificationReport, verify_pipeline
from toolkit.pipeline import PipelineTarget, target_from_outputs

STAGES = ("state", "map", "reduce", "archive")
ORIGINAL_FUNCTION_FAULT_PCT: Mapping[str, float] = {"state": 1.0, "map": 2.0, "reduce": 2.0, "archive": 2.0}
"""The original design's demo rates; `make demo` uses them."""
DEFAULT_FAULT_MULTIPLIER = 4.0
DEFAULT_MESSAGE_COUNT = 20_000
DEFAULT_LOST_RESPONSE_PCT = 2.0
"""Per write request at each site. Each one costs an SDK retry, the reduce one a held
connection of 11 s (its variant is `timeout`): measured to keep the default run in budget."""
DEFAULT_THROTTLE_PCT = 2.0
DEFAULT_RUNNER_KILLS = 2
DEFAULT_CONTROL_COUNT = 5_000
"""The control only has to show the over-count; a quarter of the real run keeps `make chaos` short."""
DEFAULT_WORKER_KILLS = 4
WORKER_MODULE = "local.execution_environment"
DEFAULT_DRAIN_TIMEOUT_SECONDS = 600.0
IDLE_SECONDS_THAT_MEAN_DRAINED = 4.0
RUNNER_WARM_SECONDS = 5.0
"""A restarted runner counts as idle only after this long: it first has to read its shards."""
KILL_WAIT_FOR_BATCH_SECONDS = 20.0
UNSAFE_REDUCE_MODE = "unsafe-add"
WRITE_SITES: tuple[tuple[str, str, str, str], ...] = (
    ("state", "UpdateItem", "state_table", "error"),
    ("map", "PutItem", "delta_table", "close"),
    ("reduce", "TransactWriteItems", "aggregate_table", "timeout"),
)
"""(stage, DynamoDB operation, outputs key of its table, lost-response variant)."""
S3_WRITE_SITES: tuple[tuple[str, str, str, str], ...] = (("archive", "PutObject", "archive_bucket", "close"),)
"""(stage, S3 operation, outputs key of its bucket, lost-response variant)."""
READ_OPERATIONS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems", "GetRecords"})
READ_OPERATIONS_ALSO = frozenset({"GetShardIterator"})

Report = Callable[[str], None]


class ChaosError(RuntimeError):
    """The chaos run could not be carried out (not: it found a mismatch, which is exit code 1)."""


# ------------------------------------------------------------------ settings


@dataclass(frozen=True)
class ChaosSettings:
    """What one `make chaos` does; every field is a command-line option."""

    count: int = DEFAULT_MESSAGE_COUNT
    seed: int = 7
    fault_multiplier: float = DEFAULT_FAULT_MULTIPLIER
    """Function faults = the original rates times this, before and after the write."""
    lost_response_pct: float = DEFAULT_LOST_RESPONSE_PCT
    throttle_pct: float = DEFAULT_THROTTLE_PCT
    runner_kills: int = DEFAULT_RUNNER_KILLS
    worker_kills: int = DEFAULT_WORKER_KILLS
    duplicates_pct: float = 10.0
    out_of_order_pct: float = 10.0
    modifications_pct: float = 20.0
    malformed_pct: float = 2.0
    conflicting_pct: float = 1.0
    oversized_records: int = 3
    reshaped_retries: tuple[str, ...] = ("map", "reduce", "archive")
    """Stages whose failed batches the runner re-delivers in other boundaries."""
    kept_tokens: bool = True
    """The emulator keeps the tokens of cancelled reduce transactions taken."""
    control: bool = True
    control_count: int | None = None
    """Messages of the control run (default: `count`, the same run)."""
    drain_timeout_seconds: float = DEFAULT_DRAIN_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ChaosError("--count must be at least 1")
        if self.control_count is not None and self.control_count < 1:
            raise ChaosError("--control-count must be at least 1")
        if self.fault_multiplier < 0 or max(ORIGINAL_FUNCTION_FAULT_PCT.values()) * self.fault_multiplier > 50:
            raise ChaosError("--fault-multiplier must keep every function fault rate between 0 and 50 %")
        for name, pct in (("--lost-response-pct", self.lost_response_pct), ("--throttle-pct", self.throttle_pct)):
            if not 0 <= pct <= 50:
                raise ChaosError(f"{name} must be between 0 and 50")
        if self.runner_kills < 0 or self.worker_kills < 0:
            raise ChaosError("--runner-kills and --worker-kills cannot be negative")
        if self.drain_timeout_seconds <= 0:
            raise ChaosError("--drain-timeout must be positive")
        if unknown := set(self.reshaped_retries) - set(STAGES):
            raise ChaosError(
                f"--reshaped-retries names no stage {', '.join(sorted(unknown))} (stages: {', '.join(STAGES)})"
            )
        try:
            self.send_options(self.count).generator_config(self.seed)
        except ValueError as error:
            raise ChaosError(str(error)) from None

    def function_fault_pct(self, stage: str) -> float:
        return ORIGINAL_FUNCTION_FAULT_PCT[stage] * self.fault_multiplier

    def function_fault_environment(self) -> dict[str, str]:
        """The `FAILURE_*_PCT` of docs/design.md for every stage, before and after the write."""
        environment: dict[str, str] = {}
        for stage in STAGES:
            pct = f"{self.function_fault_pct(stage):g}"
            environment[f"FAILURE_{stage.upper()}_LAMBDA_PCT"] = pct
            environment[f"FAILURE_{stage.upper()}_LAMBDA_AFTER_WRITE_PCT"] = pct
        return environment

    def runner_environment(self) -> dict[str, str]:
        """The runner's redelivery policy (`local.runner.redelivery`) for `reshaped_retries`."""
        if not self.reshaped_retries:
            return {}
        return RedeliveryPolicy(frozenset(self.reshaped_retries), self.seed).as_environment()

    def send_options(self, count: int, ledger: Any = None) -> SendOptions:
        return SendOptions(
            count=count,
            seed=self.seed,
            duplicates_pct=self.duplicates_pct,
            out_of_order_pct=self.out_of_order_pct,
            modifications_pct=self.modifications_pct,
            malformed_pct=self.malformed_pct,
            conflicting_pct=self.conflicting_pct,
            oversized_records=min(self.oversized_records, count // 2),
            ledger_path=ledger,
        )


def emulator_fault_config(settings: ChaosSettings, outputs: Mapping[str, str], seed: int) -> dict[str, Any]:
    """The `/_compat/faults` configuration: lost responses per write site, then throttling."""
    rules: list[dict[str, Any]] = []
    if settings.lost_response_pct:
        for _stage, operation, table_key, variant in WRITE_SITES:
            rules.append(
                {
                    "kind": LOST_RESPONSE,
                    "service": "dynamodb",
                    "percent": settings.lost_response_pct,
                    "operations": [operation],
                    "table": outputs[table_key],
                    "variant": variant,
                }
            )
        for _stage, operation, bucket_key, variant in S3_WRITE_SITES:
            rules.append(
                {
                    "kind": LOST_RESPONSE,
                    "service": "s3",
                    "percent": settings.lost_response_pct,
                    "operations": [operation],
                    "table": f"{outputs[bucket_key]}/",
                    "variant": variant,
                }
            )
    if settings.throttle_pct:
        rules.append(  # reduce transactions cancelled by throttling, as DynamoDB reports it
            {
                "kind": THROTTLE,
                "service": "dynamodb",
                "percent": settings.throttle_pct,
                "operations": ["TransactWriteItems"],
                "table": outputs["aggregate_table"],
                "error": "TransactionCanceledException",
            }
        )
        for service in ("dynamodb", "dynamodbstreams", "kinesis"):
            rules.append({"kind": THROTTLE, "service": service, "percent": settings.throttle_pct})
    if settings.kept_tokens:
        rules.append(
            {"kind": CANCELLED_TOKEN_KEPT, "service": "dynamodb", "percent": 100, "table": outputs["aggregate_table"]}
        )
    return {"seed": seed, "rules": rules}


# ----------------------------------------------------- lost and double-counted


@dataclass(frozen=True)
class Discrepancies:
    """How far the aggregates are from the ledger, split into what is missing and what is extra.

    Per node: missing = expected - actual where positive, double-counted = actual - expected
    where positive, in value and in trade count; summed over nodes. A value over-count of a
    negative amount shows as missing value: both must be zero for the totals to be exact.
    """

    nodes_compared: int = 0
    nodes_wrong: int = 0
    value_missing: Decimal = Decimal(0)
    value_double_counted: Decimal = Decimal(0)
    trades_missing_from_nodes: int = 0
    trades_double_counted_in_nodes: int = 0
    trades_missing: int = 0
    """Trades absent from the state table."""
    trades_at_wrong_version: int = 0
    """Trades stored with another version, value or hierarchy than the ledger's final one."""

    @property
    def lost(self) -> bool:
        return bool(self.value_missing or self.trades_missing_from_nodes or self.trades_missing)

    @property
    def double_counted(self) -> bool:
        return bool(self.value_double_counted or self.trades_double_counted_in_nodes)

    @property
    def exact(self) -> bool:
        return not (self.lost or self.double_counted or self.trades_at_wrong_version or self.nodes_wrong)


def discrepancies(
    mismatches: Iterable[NodeMismatch], trade_mismatches: Iterable[TradeMismatch], nodes_compared: int = 0
) -> Discrepancies:
    """Sum the verifier's node and trade mismatches into missing and double-counted amounts."""
    value_missing = value_extra = Decimal(0)
    count_missing = count_extra = nodes_wrong = 0
    for mismatch in mismatches:
        nodes_wrong += 1
        value, count = mismatch.value_difference, mismatch.count_difference
        value_extra += max(value, Decimal(0))
        value_missing += max(-value, Decimal(0))
        count_extra += max(count, 0)
        count_missing += max(-count, 0)
    problems = [mismatch.problem for mismatch in trade_mismatches]
    return Discrepancies(
        nodes_compared=nodes_compared,
        nodes_wrong=nodes_wrong,
        value_missing=value_missing,
        value_double_counted=value_extra,
        trades_missing_from_nodes=count_missing,
        trades_double_counted_in_nodes=count_extra,
        trades_missing=problems.count("missing"),
        trades_at_wrong_version=len(problems) - problems.count("missing"),
    )


def report_discrepancies(report: VerificationReport) -> Discrepancies:
    comparison = report.aggregates
    return discrepancies(
        comparison.mismatches, report.trade_mismatches, max(comparison.expected_nodes, comparison.actual_nodes)
    )


# ------------------------------------------------------------- counters


FUNCTION_COUNTERS = ("invocations", "errors", "retries", "timeouts", "records_processed")


def add_function_counters(total: dict[str, dict[str, Any]], stats: Mapping[str, Any] | None) -> None:
    """Add one runner life's per-function counters (`runner-stats.json`) into `total`.

    A restarted runner starts its counters at zero, so each life is added once, from its last
    snapshot (written every second: a kill may lose the last second's counts, never add any).
    """
    for name, counters in (stats or {}).get("functions", {}).items():
        into = total.setdefault(name, {key: 0 for key in FUNCTION_COUNTERS} | {"injected": {}})
        for key in FUNCTION_COUNTERS:
            into[key] += int(counters.get(key, 0))
        for point, count in counters.get("injected_failures", {}).items():
            into["injected"][point] = into["injected"].get(point, 0) + int(count)
        reshaped = into.setdefault("reshaped", {})
        for shape, count in counters.get("reshaped_retries", {}).items():
            reshaped[shape] = reshaped.get(shape, 0) + int(count)


def stage_of(function_name: str) -> str | None:
    """`ExactlyOnceAggregation-StateFunction…` -> `state` (the physical names embed the stage)."""
    lowered = function_name.lower()
    return next((stage for stage in STAGES if stage in lowered), None)


def emulator_fault_figures(report: Mapping[str, Any]) -> dict[str, int]:
    """`GET /_compat/faults` counters as figure rows: lost responses per write site, throttles by side."""
    injected = report.get("injected", {})
    figures: dict[str, int] = {}
    lost = injected.get(LOST_RESPONSE, {})
    for stage, operation, _table, variant in WRITE_SITES:
        figures[f"lost response, {stage} {operation} ({variant})"] = int(lost.get(f"dynamodb:{operation}", 0))
    for stage, operation, _bucket, variant in S3_WRITE_SITES:
        figures[f"lost response, {stage} {operation} ({variant})"] = int(lost.get(f"s3:{operation}", 0))
    reads = writes = 0
    for key, count in injected.get(THROTTLE, {}).items():
        operation = key.partition(":")[2]
        if operation in READ_OPERATIONS or operation in READ_OPERATIONS_ALSO:
            reads += int(count)
        else:
            writes += int(count)
    figures["throttled reads (DynamoDB, Streams, Kinesis)"] = reads
    figures["throttled writes (DynamoDB, Kinesis)"] = writes
    kept = injected.get(CANCELLED_TOKEN_KEPT, {})
    figures[KEPT_TOKENS_FIGURE] = int(kept.get("dynamodb:TransactWriteItems", 0))
    return figures


KEPT_TOKENS_FIGURE = "cancelled reduce transactions whose token stayed taken"


@dataclass(frozen=True)
class QuarantineFigures:
    records: int = 0
    conflicting_duplicates: int = 0
    truncated: int = 0
    stored_as_binary: int = 0


def count_quarantine(target: PipelineTarget) -> QuarantineFigures:
    """Scan the quarantine table: every record with its reason (conflicts are reported there too)."""
    client = target.dynamodb()
    records = conflicts = truncated = binary = 0
    for page in client.get_paginator("scan").paginate(
        TableName=target.quarantine,
        ProjectionExpression="#r, PayloadTruncated, PayloadBinary",
        ExpressionAttributeNames={"#r": "Reason"},
    ):
        for item in page.get("Items", []):
            records += 1
            conflicts += item.get("Reason", {}).get("S", "").startswith("conflicting duplicate")
            truncated += bool(item.get("PayloadTruncated", {}).get("BOOL"))
            binary += "PayloadBinary" in item
    return QuarantineFigures(records, conflicts, truncated, binary)


# ------------------------------------------------------------------ one run


@dataclass
class RunFigures:
    """Everything one run measured, for the figures table."""

    label: str
    reduce_mode: str
    sent: SendSummary | None = None
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)
    emulator_faults: dict[str, int] = field(default_factory=dict)
    runner_restarts: int = 0
    killed_mid_batch: int = 0
    workers_killed: dict[str, int] = field(default_factory=dict)
    """Stage -> function workers SIGKILLed inside an invocation (the runner starts a new one)."""
    quarantine: QuarantineFigures = field(default_factory=QuarantineFigures)
    discrepancies: Discrepancies = field(default_factory=Discrepancies)
    verified_exact: bool = False
    reconcile_exit_code: int | None = None
    reconcile_report: str = ""
    """What `audit reconcile` printed: shown when the chaos run's archive disagrees."""
    elapsed_seconds: float = 0.0

    @property
    def counts(self) -> LedgerCounts:
        return self.sent.counts if self.sent else LedgerCounts()


class RunnerRestarts:
    """Kill the runner mid-batch and restart it, keeping its counters across lives."""

    def __init__(self, paths: LocalPaths, environment: Mapping[str, str], figures: RunFigures) -> None:
        self.paths = paths
        self.environment = environment
        self.figures = figures
        self.pid = lifecycle.running_runner_pid(paths)
        self.life_started = time.monotonic()
        self.last_stats: dict[str, Any] | None = None

    def stats(self) -> dict[str, Any]:
        """This life's counters (a stale file of a previous life reads as empty)."""
        stats = read_stats(self.paths.runner_stats)
        if stats and stats.get("pid") == self.pid:
            self.last_stats = stats
            return stats
        return {}

    def kill_runner_and_restart(self) -> list[str]:
        """SIGKILL the runner's process group (runner + workers), preferably inside a batch.

        Returns the stages that were inside an invocation. Found by this command, when the map
        stage was still keyed by the hash of its batch: a runner killed after the map function
        wrote its delta item re-read the shard from the checkpoint and formed a *different*
        batch, which was mapped again. The runner since re-delivers exactly the interrupted
        batch after a restart, and the map stage is idempotent per stream position, so either
        alone is enough.
        """
        deadline = time.monotonic() + KILL_WAIT_FOR_BATCH_SECONDS
        busy: list[str] = []
        while time.monotonic() < deadline and not busy:
            functions = self.stats().get("functions", {})
            busy = [stage_of(name) or name for name, c in functions.items() if c.get("in_flight")]
            if not busy:
                time.sleep(0.05)
        pid = lifecycle.running_runner_pid(self.paths)
        if pid is None or pid != self.pid:
            raise ChaosError(f"the runner recorded in {self.paths.runner_pid} is not running (pid {self.pid})")
        self.stats()
        add_function_counters(self.figures.functions, self.last_stats)
        os.killpg(pid, signal.SIGKILL)  # `up` starts the runner in its own session: its group is its own
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        deadline = time.monotonic() + 10
        while lifecycle.process_command_line(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.pid = lifecycle.start_runner(self.paths, self.environment)
        lifecycle.wait_for_runner_ready(self.paths, self.pid)
        self.life_started = time.monotonic()
        self.last_stats = None
        self.figures.runner_restarts += 1
        self.figures.killed_mid_batch += bool(busy)
        return busy

    def kill_worker(self, stage: str) -> bool:
        """SIGKILL one worker of `stage`'s function while it runs an invocation.

        The worker is a child of the recorded runner pid (its command line names the
        function's handler module); nothing is looked up by name system-wide. The runner sees
        the invocation fail (`Runtime.ExitError`), retries the identical batch and starts a
        fresh execution environment: a Lambda sandbox crash.
        """
        deadline = time.monotonic() + KILL_WAIT_FOR_BATCH_SECONDS
        while time.monotonic() < deadline:
            functions = self.stats().get("functions", {})
            busy = any(c.get("in_flight") for name, c in functions.items() if stage_of(name) == stage)
            workers = worker_pids(self.pid, f"{stage}_function") if busy and self.pid else []
            if workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(workers[0], signal.SIGKILL)
                    self.figures.workers_killed[stage] = self.figures.workers_killed.get(stage, 0) + 1
                    return True
            time.sleep(0.01)
        return False

    def finish(self) -> None:
        self.stats()
        add_function_counters(self.figures.functions, self.last_stats)

    def drained(self) -> bool:
        return time.monotonic() - self.life_started >= RUNNER_WARM_SECONDS and is_idle(
            self.stats(), IDLE_SECONDS_THAT_MEAN_DRAINED
        )


def child_pids(parent_pid: int) -> list[int]:
    """Live processes whose parent is `parent_pid` (from /proc/<pid>/stat, not by name)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "pid (command)": state, ppid, ...
        if len(fields) > 1 and fields[1] == str(parent_pid):
            children.append(int(entry.name))
    return children


def worker_pids(runner_pid: int, handler_package: str) -> list[int]:
    """Pids of the runner's function workers whose handler is in `handler_package` (`map_function`)."""
    found = []
    for child in child_pids(runner_pid):
        command_line = lifecycle.process_command_line(child) or ""
        if WORKER_MODULE in command_line and f" {handler_package}." in command_line:
            found.append(child)
    return found


def state_records_processed(functions: Mapping[str, Mapping[str, Any]]) -> int:
    """Kinesis records the state function completed (replays after a failure or a kill included)."""
    return sum(int(c.get("records_processed", 0)) for name, c in functions.items() if stage_of(name) == "state")


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
    figures = RunFigures(label=label, reduce_mode=reduce_mode or "crt+marker (deployed default)")
    environment = {**os.environ, **settings.function_fault_environment(), **settings.runner_environment()}
    environment.pop("REDUCE_IDEMPOTENCY", None)
    if reduce_mode is not None:
        environment["REDUCE_IDEMPOTENCY"] = reduce_mode
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


def kill_plan(settings: ChaosSettings) -> list[str]:
    """What to kill, in order: workers of each stage in turn (map and reduce first), runner kills spread in."""
    order = ("map", "reduce", "archive", "state")
    plan = [order[index % len(order)] for index in range(settings.worker_kills)]
    for index in range(settings.runner_kills):
        plan.insert(min(len(plan), 2 * index + 1), "runner")
    return plan


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
    kill_points = [count * (index + 1) / (len(kills) + 1) for index in range(len(kills))]
    deadline = time.monotonic() + settings.drain_timeout_seconds
    last_line = 0.0
    while True:
        stats = restarts.stats()
        processed = state_records_processed(figures.functions) + state_records_processed(stats.get("functions", {}))
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
        if time.monotonic() > deadline:
            raise ChaosError(f"the pipeline did not drain within {settings.drain_timeout_seconds:.0f} s")
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


# ------------------------------------------------------------------ figures


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
                f"{stage} retries re-delivered {' / '.join(SHAPES)}",
                " / ".join(f"{reshaped.get(shape, 0):,}" for shape in SHAPES),
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
        ("trades missing / at wrong version", f"{found.trades_missing:,} / {found.trades_at_wrong_version:,}"),
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
    return settings.lost_response_pct if name.startswith("lost response") else settings.throttle_pct


def quarantine_matches(figures: RunFigures) -> bool:
    counts = figures.counts
    return figures.quarantine.records == counts.malformed + counts.conflicting_duplicates and (
        figures.quarantine.conflicting_duplicates == counts.conflicting_duplicates
    )


def run_passed(figures: RunFigures) -> bool:
    """The real run: exact, the archive agrees, every bad record quarantined once."""
    return (
        figures.verified_exact
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


def run_chaos(paths: LocalPaths, console: Console, settings: ChaosSettings) -> int:
    """The chaos run, then the control; the figures table; 0 only if exact and the control is caught."""
    started = time.monotonic()
    console.rule(f"[bold]chaos run[/]: {settings.count:,} messages, every failure at once")
    real = run_pipeline(paths, console, settings, label="chaos run", reduce_mode=None, count=settings.count)
    control: RunFigures | None = None
    if settings.control:
        control_count = settings.control_count or min(settings.count, DEFAULT_CONTROL_COUNT)
        console.rule(f"[bold]negative control[/]: the same run, reduce {UNSAFE_REDUCE_MODE}")
        control = run_pipeline(
            paths, console, settings, label="negative control", reduce_mode=UNSAFE_REDUCE_MODE, count=control_count
        )
    console.print(figures_table(real, control, settings))
    console.print(f"total wall time {time.monotonic() - started:.0f} s")
    failures: list[str] = []
    if not run_passed(real):
        failures.append("the chaos run is NOT exact (see the table)")
        if real.reconcile_exit_code != 0:
            console.rule("audit reconcile of the chaos run")
            console.print(real.reconcile_report, markup=False, highlight=False)
    if control is not None and not control_caught(control):
        failures.append("the negative control was NOT caught: the verifier cannot see an over-count")
    for failure in failures:
        console.print(f"[bold red]FAIL[/]: {failure}")
    if not failures:
        caught = " and the unsafe control was caught" if control is not None else ""
        console.print(f"[bold green]PASS[/]: exactly once under every failure{caught}")
    return 1 if failures else 0
