"""`producer clear` on a `make up`-style local stack: send, clear, send, verify is exact.

Clear deletes the state items and lets the pipeline take their trades out of the totals
(REMOVE records, mapped into subtractions and reduced). Emptying the AggregateTable instead
left those subtractions to land on the next run: negative totals. The second verify starts
while the second run is still draining, and the S3 archive must still reconcile with the
table and the ledger afterwards.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from local.paths import LocalPaths
from tests.producer.local_stack import run_tool

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def test_send_clear_send_verify_is_exact(local_stack: LocalPaths, tmp_path: Path) -> None:
    where = ("--outputs", str(local_stack.outputs), "--ledger", str(tmp_path / "ledger.json"))
    mix = ("--count", "300", "--malformed-pct", "0", "--no-progress")

    first = run_tool("producer", "send", *where, *mix, "--seed", "31")
    assert first.returncode == 0, first.stderr
    # Clear's contract is an idle pipeline: records still on the Kinesis stream are out of its
    # sight (it cannot tell them from none) and would land after it. So the first run drains first.
    drained = run_tool("producer", "verify", *where, "--timeout", "300", "--no-progress")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    cleared = run_tool("producer", "clear", *where, "--timeout", "300", "--no-progress")
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert "every aggregate node is back at zero" in cleared.stdout

    second = run_tool("producer", "send", *where, *mix, "--seed", "32")
    assert second.returncode == 0, second.stderr
    verified = run_tool("producer", "verify", *where, "--timeout", "300", "--settle", "30", "--no-progress")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "EXACT" in verified.stdout

    # The archive consumes the DeltaTable stream beside reduce and may trail it a moment.
    deadline = time.monotonic() + 120
    while True:
        reconciled = run_tool("audit", "reconcile", "--outputs", str(local_stack.outputs), "--ledger", where[3])
        if reconciled.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
