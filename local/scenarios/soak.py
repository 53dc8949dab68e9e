"""`make soak`: a long steady load, proven exact, with the local runtime's memory measured.

1. `up` with the demo's fault rates.
2. `python -m producer send --duration S --rate R` (a subprocess), while a sampler reads
   the resident memory of the emulator, the runner and each of the runner's workers
   every few seconds (``/proc``), through the drain and the verification.
3. Wait for the drain (the runner's checkpoints, as `make demo` waits: the send's own read-back
   is off, and what the pipeline applied is read back after the drain); `python -m producer
   verify` compares the aggregates with the ledger.
4. `down`; print each process's memory at the start, its peak and its end, the total's
   peak, and the emulator's growth per message.

Exit 0 only when verify says exact and the total's peak stayed within the memory budget
(default 1 GB): a long load test must neither lose exactness nor grow without bound, and
issue 22 found the emulator alone growing by 23 KB per message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from local.deploy import lifecycle
from local.paths import REPO_ROOT, LocalPaths
from local.runner.stats import read_stats
from local.scenarios import demo
from producer.watch import pipeline_reader
from toolkit.pipeline import target_from_outputs

DEFAULT_MEMORY_BUDGET_MB = 1024.0
DEFAULT_SAMPLE_SECONDS = 5.0
DRAIN_TIMEOUT_SECONDS = 600.0
EMULATOR, RUNNER = "emulator", "runner"


def resident_mb(pid: int) -> float | None:
    """A process's resident set in MB (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children_of(pid: int) -> list[int]:
    """The direct children of a process (the runner's workers), from ``/proc``."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@dataclass
class MemorySamples:
    """Resident MB per process name over time, and the total of each sample."""

    by_process: dict[str, list[float]] = field(default_factory=dict)
    totals: list[float] = field(default_factory=list)

    def add(self, sample: dict[str, float]) -> None:
        for name, megabytes in sample.items():
            self.by_process.setdefault(name, []).append(megabytes)
        self.totals.append(sum(sample.values()))

    @property
    def peak_total_mb(self) -> float:
        return max(self.totals, default=0.0)


def sample_once(emulator_pid: int, runner_pid: int) -> dict[str, float]:
    """Resident MB of the emulator, the runner and each worker (named ``worker <pid>``) now."""
    sample: dict[str, float] = {}
    for name, pid in ((EMULATOR, emulator_pid), (RUNNER, runner_pid)):
        if (megabytes := resident_mb(pid)) is not None:
            sample[name] = megabytes
    for child in children_of(runner_pid):
        if (megabytes := resident_mb(child)) is not None:
            sample[f"worker {child}"] = megabytes
    return sample


class Sampler:
    """Samples memory every `interval` seconds on a thread until stopped."""

    def __init__(self, emulator_pid: int, runner_pid: int, interval: float) -> None:
        self.samples = MemorySamples()
        self._pids = (emulator_pid, runner_pid)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-memory", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.add(sample_once(*self._pids))

    def _run(self) -> None:
        while True:
            self.samples.add(sample_once(*self._pids))
            if self._stop.wait(self._interval):
                return


def messages_sent(ledger: Path) -> int:
    """Messages the ledger counts so far (0 before the first run)."""
    try:
        return int(json.loads(ledger.read_text())["counts"]["messages_sent"])
    except (OSError, ValueError, KeyError):
        return 0


def pid_of(path: Path) -> int:
    return int(path.read_text().strip())


def verdict(exact: bool, peak_total_mb: float, budget_mb: float) -> tuple[int, str]:
    """Exit code and its reason: 0 only when exact and within the memory budget."""
    problems = [] if exact else ["NOT EXACT"]
    if peak_total_mb > budget_mb:
        problems.append(f"memory {peak_total_mb:.0f} MB over the budget of {budget_mb:.0f} MB")
    if problems:
        return 1, "; ".join(problems)
    return 0, f"EXACT, memory peak {peak_total_mb:.0f} MB within {budget_mb:.0f} MB"


def memory_table(samples: MemorySamples, sent: int) -> Table:
    table = Table(title="resident memory (MB)")
    for column in ("process", "start", "peak", "end", "growth per message"):
        table.add_column(column, justify="left" if column == "process" else "right")
    for name, series in samples.by_process.items():
        growth = (series[-1] - series[0]) * 1024 / sent if sent and name == EMULATOR else None
        per_message = f"{growth:.1f} KB" if growth is not None else ""
        table.add_row(name, f"{series[0]:.0f}", f"{max(series):.0f}", f"{series[-1]:.0f}", per_message)
    table.add_row("total", f"{samples.totals[0]:.0f}", f"{samples.peak_total_mb:.0f}", f"{samples.totals[-1]:.0f}", "")
    return table


def run_soak(
    paths: LocalPaths,
    console: Console,
    *,
    duration_seconds: float,
    rate: float,
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
    sample_seconds: float = DEFAULT_SAMPLE_SECONDS,
    seed: int = 7,
) -> int:
    environment = demo.demo_environment(os.environ)
    console.rule("[bold]1. up[/]")
    lifecycle.up(paths, environment=environment, report=console.print)
    try:
        before = demo.kinesis_records_done(read_stats(paths.runner_stats) or {})
        sent_before = messages_sent(paths.ledger)
        where = ["--outputs", str(paths.outputs), "--ledger", str(paths.ledger)]
        send = ["send", "--duration", str(duration_seconds), "--rate", str(rate), "--seed", str(seed), "--watch", "0"]
        applied = pipeline_reader(target_from_outputs(paths.outputs))
        sending = time.monotonic()
        with Sampler(pid_of(paths.emulator_pid), pid_of(paths.runner_pid), sample_seconds) as sampler:
            console.rule(f"[bold]2. send[/] {rate:g} messages/s for {duration_seconds:g} s")
            code = subprocess.run(
                [sys.executable, "-m", "producer", *send, *demo.PRODUCER_MIX, "--no-progress", *where],
                cwd=REPO_ROOT,
                env=environment,
                check=False,
            ).returncode
            if code != 0:
                raise demo.DemoError("the producer failed to send (see above)")
            sent = messages_sent(paths.ledger) - sent_before
            console.rule(f"[bold]3. drain[/] and verify {sent} messages")
            drained = demo.wait_for_drain(paths, console, before + sent, DRAIN_TIMEOUT_SECONDS)
            demo.show_read_back(applied, console, time.monotonic() - sending, drained)
            if not drained:
                console.print(f"[yellow]not drained after {DRAIN_TIMEOUT_SECONDS:.0f} s; verifying anyway[/]")
            verify = ["verify", "--timeout", "120", "--settle", "3", "--no-progress", *where]
            exact = demo._producer(verify, environment) == 0
    finally:
        console.rule("[bold]4. down[/]")
        lifecycle.down(paths, report=console.print)
    console.print(memory_table(sampler.samples, sent))
    code, reason = verdict(exact, sampler.samples.peak_total_mb, memory_budget_mb)
    console.print(f"[bold {'green' if code == 0 else 'red'}]{reason}[/]")
    return code
