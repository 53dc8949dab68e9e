"""`make soak`: the verdict, the memory sampling, and a tiny run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from local.paths import LocalPaths
from local.scenarios import soak


def test_only_exact_within_the_budget_passes() -> None:
    assert soak.verdict(True, 900.0, 1024.0)[0] == 0
    assert soak.verdict(False, 900.0, 1024.0) == (1, "NOT EXACT")
    assert soak.verdict(True, 1100.0, 1024.0) == (1, "memory 1100 MB over the budget of 1024 MB")
    assert soak.verdict(False, 1100.0, 1024.0)[1] == "NOT EXACT; memory 1100 MB over the budget of 1024 MB"


def test_samples_name_the_emulator_the_runner_and_each_worker() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sample = soak.sample_once(emulator_pid=os.getpid(), runner_pid=os.getpid())
    finally:
        child.kill()
        child.wait()
    assert sample[soak.EMULATOR] == sample[soak.RUNNER] > 10
    assert sample[f"worker {child.pid}"] > 0
    gone = soak.sample_once(emulator_pid=child.pid, runner_pid=child.pid)
    assert gone == {}, "a process that has exited is not counted"


def test_peak_total_and_growth_per_message() -> None:
    samples = soak.MemorySamples()
    samples.add({soak.EMULATOR: 200.0, soak.RUNNER: 60.0})
    samples.add({soak.EMULATOR: 300.0, soak.RUNNER: 60.0, "worker 7": 50.0})
    samples.add({soak.EMULATOR: 250.0, soak.RUNNER: 60.0})
    assert samples.peak_total_mb == 410.0
    console = Console(width=200, record=True)
    console.print(soak.memory_table(samples, sent=1024))
    text = console.export_text()
    assert "50.0 KB" in text  # (250 - 200) MB over 1,024 messages
    assert "410" in text


def test_messages_sent_reads_the_ledger_and_is_zero_without_one(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    assert soak.messages_sent(ledger) == 0
    ledger.write_text(json.dumps({"counts": {"messages_sent": 42}}))
    assert soak.messages_sent(ledger) == 42


@pytest.mark.emulator
@pytest.mark.slow
def test_a_tiny_soak_is_exact_and_reports_memory(tmp_path: Path) -> None:
    paths = LocalPaths(tmp_path / ".local")
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    code = soak.run_soak(paths, console, duration_seconds=4, rate=10, sample_seconds=1)
    text = console.export_text()
    assert code == 0, text
    assert "EXACT, memory peak" in text and "emulator" in text and "runner" in text and "KB" in text
    code = soak.run_soak(paths, console, duration_seconds=2, rate=10, memory_budget_mb=10, sample_seconds=1)
    assert code == 1 and "over the budget of 10 MB" in console.export_text()
