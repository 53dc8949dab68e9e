"""`python -m benchmarks.capacity` piped into another program: no jsii banner, no table cut to 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import REPOSITORY_ROOT


def test_piped_output_has_no_node_banner_and_whole_tables() -> None:
    environment = {name: value for name, value in os.environ.items() if not name.startswith("JSII_")}
    environment["PYTHONPATH"] = str(REPOSITORY_ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.capacity", "--rate", "50000"],
        cwd=REPOSITORY_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "b'" not in output  # jsii's Node.js banner, one bytes literal per line
    assert "end-of-life" not in output
    assert "…" not in result.stdout  # nothing cut, neither figures nor names
    assert "provisioned WCU / RCU (target)" in result.stdout
    assert "AggregateTable " in result.stdout
    assert "hottest aggregate item WCU/s (limit 1,000)" in result.stdout
    assert "archive objects/s (delta items each), S3 PUTs/msg" in result.stdout
