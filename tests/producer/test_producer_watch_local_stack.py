"""`producer send` against a local stack reads back what the pipeline applied, as it runs and at the end.

The figures come from the stack (the `#stats` items reduce writes), so the summary's count must be
the pipeline's own count of the run, and its latency percentiles those of a histogram holding one
measurement per applied message.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aggregation.aggregate_items import combined_stats
from aggregation.latency import histogram_of
from local.paths import LocalPaths
from tests.producer.local_stack import run_tool
from toolkit.pipeline import target_from_outputs

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def milliseconds(text: str) -> float:
    match = re.fullmatch(r"([\d,]+) ms|([\d.,]+) s", text.strip())
    assert match is not None, text
    return float(match[1].replace(",", "")) if match[1] else float(match[2].replace(",", "")) * 1000


def test_send_prints_the_applied_rate_and_latency_as_it_runs_and_p50_p99_at_the_end(
    local_stack: LocalPaths, tmp_path: Path
) -> None:
    sent = run_tool(
        "producer",
        "send",
        "--outputs",
        str(local_stack.outputs),
        "--ledger",
        str(tmp_path / "ledger.json"),
        "--count",
        "400",
        "--rate",
        "50",
        "--seed",
        "5",
        "--watch",
        "120",
    )
    assert sent.returncode == 0, sent.stderr

    live = re.findall(r"^pipeline: ([\d,]+) applied", sent.stderr, flags=re.MULTILINE)
    assert len(live) >= 2, sent.stderr  # a line every 5 s while the 8-s run sends and drains
    assert any(int(count.replace(",", "")) > 0 for count in live), sent.stderr
    assert "latency p50" in sent.stderr

    rows = dict(re.findall(r"│ ([a-z0-9 -]+?) +│ +(.+?) │", sent.stdout))
    assert "still applying" not in rows["messages applied"], sent.stdout
    target = target_from_outputs(local_stack.outputs)
    items = target.session().resource("dynamodb", endpoint_url=target.endpoint_url).Table(target.aggregate_table)
    stats = combined_stats(items.scan()["Items"])
    assert stats is not None
    assert int(rows["messages applied"].replace(",", "")) == stats["MessagesApplied"] > 0
    assert sum(histogram_of(stats).values()) == stats["MessagesApplied"], "one latency per applied message"
    p50, p99, most = (milliseconds(rows[f"end-to-end latency {name}"]) for name in ("p50", "p99", "max"))
    assert 0 < p50 <= p99 <= most < 120_000
    assert rows["applied rate"].endswith("msg/s")
    assert "dashboard" not in rows, "no console URL for the emulator"
