"""`make demo`: the whole pipeline, locally, under injected faults, proven exact.

1. `up` with the fault rates of the original design's demo (each overridable from the
   caller's environment): some invocations fail before writing, some after.
2. `python -m producer send`: a few thousand messages with duplicates, out-of-order
   versions, modifications and some malformed records (a subprocess: the producer is
   an independent client of the pipeline, as in AWS). Without its read-back (`--watch 0`):
   that waits until the applied count has stood still for 5 s, idle time the drain's own
   rule does not need.
3. Wait for the drain, showing progress from the runner's statistics, until every mapping's
   checkpoint is at its stream's end with nothing in flight (`is_drained`); then what the
   pipeline applied and its end-to-end latency, read back from its `#stats` items as
   `producer send` reads them (`producer.watch`).
4. `python -m producer verify`: compares the aggregates with the ledger, exactly.
5. `down`, unless `--keep-running`. Exit 0 only when verify says exact.

A runtime the user already runs (`make up`) is left alone: the demo then runs beside it, in
its own state directory (`demo/` under the runtime's) with its own emulator on its own port
(`demo_paths`), and its `down` stops only what it started.

Size: 3000 messages. The whole demo took 19-20 s on this 2-core machine at a load average of
about 2 (2026-11-28; 24 s before the send's settle went and the functions warmed at once), inside
issue 22's bound of 25 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from local.deploy import lifecycle
from local.emulator.control import iam_report
from local.paths import REPO_ROOT, LocalPaths
from local.runner.stats import read_stats
from producer.display import render_pipeline_summary
from producer.watch import PipelineReader, pipeline_reader
from toolkit.pipeline import target_from_outputs

DEFAULT_MESSAGE_COUNT = 3000
DEFAULT_DRAIN_TIMEOUT_SECONDS = 240.0
DRAIN_POLL_SECONDS = 0.25

DEMO_FAULT_RATES: Mapping[str, str] = {
    "FAILURE_STATE_LAMBDA_PCT": "1",
    "FAILURE_MAP_LAMBDA_PCT": "2",
    "FAILURE_REDUCE_LAMBDA_PCT": "2",
    "FAILURE_ARCHIVE_LAMBDA_PCT": "2",
    "FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT": "1",
    "FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT": "2",
    "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT": "2",
    "FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT": "2",
}
"""Percentages of invocations that fail (docs/design.md, "Fault injection"); the caller's env wins."""

PRODUCER_MIX = (
    "--duplicates-pct",
    "10",
    "--out-of-order-pct",
    "10",
    "--modifications-pct",
    "20",
    "--malformed-pct",
    "2",
)


class DemoError(RuntimeError):
    """The demo could not run (not: the aggregates were wrong, which is exit code 1)."""


def demo_environment(caller: Mapping[str, str]) -> dict[str, str]:
    return {**DEMO_FAULT_RATES, **caller}


def _producer(arguments: list[str], environment: Mapping[str, str]) -> int:
    return subprocess.run(
        [sys.executable, "-m", "producer", *arguments],
        cwd=REPO_ROOT,
        env=dict(environment),
        check=False,
    ).returncode


def kinesis_records_done(stats: Mapping[str, Any]) -> int:
    """Records the state function has finished (read from Kinesis and checkpointed)."""
    return sum(
        shard["records_read"] - shard["records_pending"]
        for shard in stats.get("shards", [])
        if shard["source"] == "kinesis"
    )


def is_idle(stats: Mapping[str, Any], idle_seconds: float) -> bool:
    """Nothing in flight or pending, and no invocation for `idle_seconds` (the chaos scenario's
    test: there a killed worker's last request may land after the kill, which `is_drained` rules out)."""
    busy = any(f["in_flight"] for f in stats.get("functions", {}).values()) or any(
        s["records_pending"] for s in stats.get("shards", [])
    )
    return not busy and time.time() - float(stats.get("last_invocation_at", 0)) >= idle_seconds


def is_drained(stats: Mapping[str, Any], *, since: float = 0.0) -> bool:
    """Every mapping's checkpoint is at its stream's end, and nothing can add to any stream.

    No invocation is in flight, no shard has records read but not finished, and every shard's
    last empty read (`caught_up_at`) started after the last invocation ended and after `since`
    (epoch seconds, when the producer had finished): whatever any function or the producer
    wrote had been written by then, and was not there to read. Without `since` a read that
    started before the last send found nothing and passes (the caller counts the records
    instead, as `wait_for_drain` does); only functions write to the other streams.
    """
    shards = stats.get("shards", [])
    if not shards or any(f["in_flight"] for f in stats.get("functions", {}).values()):
        return False
    written_before = max(float(stats.get("last_invocation_at", 0)), since)
    return all(
        s["records_pending"] == 0 and s.get("caught_up_at", 0) > 0 and s["caught_up_at"] >= written_before
        for s in shards
    )


def wait_for_drain(paths: LocalPaths, console: Console, sent: int, timeout_seconds: float) -> bool:
    """Show progress until every sent record went through and the runner has drained (`is_drained`)."""
    deadline = time.monotonic() + timeout_seconds
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("draining", total=sent, detail="")
        while time.monotonic() < deadline:
            stats = read_stats(paths.runner_stats) or {}
            done = kinesis_records_done(stats)
            functions = stats.get("functions", {}).values()
            errors = sum(f["errors"] for f in functions)
            retries = sum(f["retries"] for f in functions)
            progress.update(task, completed=min(done, sent), detail=f"errors {errors}, retries {retries}")
            if done >= sent and is_drained(stats):
                return True
            time.sleep(DRAIN_POLL_SECONDS)
    return False


def iam_line(report: dict[str, Any]) -> str:
    """One line on the emulator's IAM check (`local.emulator.iam_check`), and any call it denied."""
    if report.get("mode") != "enforce":
        return "IAM: not enforced (EMULATOR_IAM=off)"
    line = f"IAM: {report['requests_checked']:,} requests of the functions' roles checked, {report['denied']:,} denied"
    return "\n".join([line, *(f"  {count} x {message}" for message, count in report["denials"].items())])


def show_read_back(reader: PipelineReader, console: Console, seconds: float, drained: bool) -> None:
    """What the pipeline applied since `reader` was made, and its latency (`producer send`'s read-back
    table); the rate over `seconds`, from the start of the send to the end of the drain."""
    figures = reader.summary()
    rate = figures.applied / seconds if figures.applied and seconds > 0 else None
    render_pipeline_summary(replace(figures, rate=rate), drained, "", seconds, console)


def demo_paths(paths: LocalPaths, name: str = "demo") -> tuple[LocalPaths, bool]:
    """Where a scenario runs, and whether that is beside a runtime already running in ``paths``
    (then in its own directory ``name`` under the runtime's).

    The demo (and `upgrade`) clears the data it verifies, injects faults and stops everything at
    the end: done in a runtime the user started, it would take over their emulator, data and runner.
    """
    state = lifecycle.running_state(paths)
    if state.emulator is None and state.runner_pid is None:
        return paths, False
    return LocalPaths(paths.state_dir / name), True


def run_demo(
    paths: LocalPaths,
    console: Console,
    *,
    count: int = DEFAULT_MESSAGE_COUNT,
    seed: int = 7,
    keep_running: bool = False,
    drain_timeout_seconds: float = DEFAULT_DRAIN_TIMEOUT_SECONDS,
) -> int:
    started = time.monotonic()
    environment = demo_environment(os.environ)
    users = paths
    paths, beside = demo_paths(paths)
    if beside:
        console.print(
            f"a runtime is already running in {users.state_dir} (`make up`): the demo leaves it alone and runs "
            f"beside it in {paths.state_dir}, on its own port"
        )
    console.rule("[bold]1. up[/] (emulator, deploy, runner)")
    deployment = lifecycle.up(paths, environment=environment, report=console.print)
    try:
        before = kinesis_records_done(read_stats(paths.runner_stats) or {})
        console.rule(f"[bold]2. send[/] {count} messages")
        state = f"LOCAL_STATE_DIR={paths.state_dir} " if beside else ""
        outputs = f" --outputs {paths.outputs} --ledger {paths.ledger}" if beside else ""
        console.print(
            f"watch it from another shell: [bold]{state}.venv/bin/python -m local status[/] (counters, lag) or "
            f"[bold].venv/bin/python -m frontend{outputs}[/] (the aggregates live, http://127.0.0.1:8000)",
        )
        where = ["--outputs", str(paths.outputs), "--ledger", str(paths.ledger)]
        send = ["send", "--count", str(count), "--seed", str(seed), *PRODUCER_MIX, "--watch", "0", *where]
        applied = pipeline_reader(target_from_outputs(paths.outputs))  # what #stats says before the send
        sending = time.monotonic()
        if _producer(send, environment) != 0:
            raise DemoError("the producer failed to send (see above)")
        console.rule("[bold]3. drain[/]")
        drained = wait_for_drain(paths, console, before + count, drain_timeout_seconds)
        show_read_back(applied, console, time.monotonic() - sending, drained)
        if not drained:
            console.print(f"[yellow]not drained after {drain_timeout_seconds:.0f} s; verifying anyway[/]")
        console.rule("[bold]4. verify[/]")
        verdict = _producer(["verify", "--timeout", "120", "--settle", "3", "--no-progress", *where], environment)
        console.print(iam_line(iam_report(deployment.endpoint_url)), markup=False, highlight=False)
    finally:
        if not keep_running:
            console.rule("[bold]5. down[/]")
            lifecycle.down(paths, report=console.print)
    elapsed = time.monotonic() - started
    if verdict == 0:
        console.print(f"[bold green]EXACT[/]: the aggregates match the ground truth ({elapsed:.0f} s)")
        return 0
    console.print(f"[bold red]NOT EXACT[/] (verify exit code {verdict}, {elapsed:.0f} s)")
    return 1
