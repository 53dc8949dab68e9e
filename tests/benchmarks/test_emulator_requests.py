"""The per-request benchmark sends the shapes it names, and they do what the pipeline's do.

Each test runs the benchmark in a child interpreter: it installs `moto_compat` and the speedups
into the moto it imports, and those must not reach later tests of this process
(tests/local/emulator/test_speedups.py compares the speedups with moto's own functions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from benchmarks.emulator_requests import MARKER_PREFIX, NODES, NODES_PER_TRANSACTION, REQUESTS


def in_a_child_process(code: str) -> Any:
    """What `code` prints last, as JSON, run by a fresh interpreter on this one's import path."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    finished = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment, timeout=300
    )
    return json.loads(finished.stdout.strip().splitlines()[-1])


def test_the_scans_find_the_markers_and_the_nodes_the_transactions_wrote() -> None:
    markers, nodes = in_a_child_process(
        "import json\n"
        "from benchmarks.emulator_requests import drain_scan, marker_scan, prepared_emulator\n"
        "emulator = prepared_emulator(transactions=3)\n"
        "markers = [item['AggregateKey']['S'] for item in marker_scan(emulator)['Items']]\n"
        "nodes = {item['AggregateKey']['S']: item for item in drain_scan(emulator)['Items']}\n"
        "print(json.dumps([markers, nodes]))\n"
    )
    assert len(markers) == 6 and all(marker.startswith(MARKER_PREFIX) for marker in markers)
    assert set(nodes) == {*NODES, "#stats"}
    assert nodes["#stats"]["MessagesApplied"] == {"N": "300"}
    assert nodes[NODES[0]]["TradeCount"] == {"N": "9"}  # 3 ADDs of 3
    assert nodes[NODES[NODES_PER_TRANSACTION]]["TradeCount"] == {"N": "1"}  # put, never in a transaction


def test_every_request_is_measured_and_rendered() -> None:
    requests, cpu_ms, lines = in_a_child_process(
        "import json\n"
        "from benchmarks.emulator_requests import markdown, run_emulator_requests\n"
        "costs = run_emulator_requests(scale=0.05)\n"
        "print(json.dumps([[c.request for c in costs], [c.cpu_ms for c in costs], markdown(costs).count(chr(10))]))\n"
    )
    assert requests == [name for name, _, _ in REQUESTS]
    assert all(ms > 0 for ms in cpu_ms)
    assert lines == len(REQUESTS) + 1
