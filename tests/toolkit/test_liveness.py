"""A stopped pipeline told from a wrong one (issue 38, item 2): the views and `producer send --watch`.

After the runner was killed and a send went in, the dashboard showed "draining: 0 of 99 nodes match"
for ever, then "109 nodes differ", and `send --watch` ended with exit 0 and "messages applied 0".
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import producer.__main__ as producer_cli
from frontend.snapshot import LedgerState, SnapshotBuilder, TableReading
from frontend.target import WatchedPipeline, resolve_target
from producer.ledger import LedgerCounts
from producer.sender import SendSummary
from producer.watch import Figures
from toolkit.ledger import NodeTotals
from toolkit.liveness import Liveness, StackInvocations, local_runner, pipeline_liveness
from toolkit.pipeline import PipelineTarget

GONE_PID = 2**22 + 17  # above the kernel's pid_max default: no such process


def outputs_with_runner(tmp_path: Path, pid: int | None) -> Path:
    outputs = tmp_path / "outputs.json"
    names = {"endpoint_url": "http://127.0.0.1:9", "aggregate_table": "A", "stream_name": "S", "state_table": "T"}
    outputs.write_text(json.dumps(names))
    if pid is not None:
        (tmp_path / "runner.pid").write_text(str(pid))
    return outputs


def test_the_local_runner_is_its_pid_file(tmp_path: Path) -> None:
    assert local_runner(tmp_path).running is None  # no pid file: cannot tell
    (tmp_path / "runner.pid").write_text(str(GONE_PID))
    gone = local_runner(tmp_path)
    assert gone.running is False and f"pid {GONE_PID}" in gone.reason
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "local.runner"])
    try:
        (tmp_path / "runner.pid").write_text(str(runner.pid))
        assert local_runner(tmp_path) == Liveness(True)
    finally:
        runner.kill()
        runner.wait()
    assert local_runner(tmp_path).running is False
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the pid reused by another
    try:
        (tmp_path / "runner.pid").write_text(str(other.pid))
        assert local_runner(tmp_path).running is False
    finally:
        other.kill()
        other.wait()


def test_the_dashboard_says_the_pipeline_is_not_running_rather_than_that_nodes_differ(tmp_path: Path) -> None:
    outputs = outputs_with_runner(tmp_path, GONE_PID)
    pipeline = WatchedPipeline(
        lambda: resolve_target(table_name=None, stack_name=None, outputs_path=outputs, region=None), outputs
    )
    ledger = LedgerState("ledger.json", {"R:D": NodeTotals(Decimal("1.5"), 1), "R:E": NodeTotals(Decimal(2), 1)})
    clock = iter(range(0, 10_000, 30))  # every build long after the last change: idle
    builder = SnapshotBuilder(
        "A",
        lambda: TableReading({"R:D": NodeTotals(Decimal("1.5"), 1)}, None),
        lambda: ledger,
        liveness=pipeline.liveness,
        clock=lambda: float(next(clock)),
    )
    builder.build()
    verification = builder.build().verification
    assert verification.status == "stopped"
    assert verification.label.startswith(f"the pipeline is not running (its runner (pid {GONE_PID}) is gone")
    assert verification.label.endswith("1 of 2 nodes match so far")
    exact = SnapshotBuilder("A", lambda: TableReading(dict(ledger.nodes or {}), None), lambda: ledger)
    assert exact.build().verification.status == "exact"


class FakeStack:
    """CloudFormation and CloudWatch as `StackInvocations` reads them."""

    def __init__(self, invocations: list[float]) -> None:
        self.invocations = invocations
        self.calls = 0

    def get_paginator(self, operation: str) -> Any:
        stack = self

        class Pages:
            def paginate(self, **request: Any) -> list[dict[str, Any]]:
                stack.calls += 1
                if operation == "list_stack_resources":
                    resources = [
                        {"ResourceType": "AWS::Lambda::Function", "PhysicalResourceId": "Stack-State-1"},
                        {"ResourceType": "AWS::Lambda::Function", "PhysicalResourceId": "Stack-Reduce-2"},
                        {"ResourceType": "AWS::DynamoDB::Table", "PhysicalResourceId": "Table"},
                    ]
                    return [{"StackResourceSummaries": resources}]
                assert [
                    query["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for query in request["MetricDataQueries"]
                ] == [
                    "Stack-State-1",
                    "Stack-Reduce-2",
                ]
                return [{"MetricDataResults": [{"Values": stack.invocations}, {"Values": []}]}]

        return Pages()


def test_on_aws_no_invocation_of_the_stacks_functions_is_a_stopped_pipeline() -> None:
    clock = [0.0]
    now = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    idle = FakeStack([])
    check = StackInvocations(idle, idle, "Stack", clock=lambda: clock[0], now=lambda: now)
    answer = check()
    assert answer.running is False and "none of stack Stack's functions ran in the last 5 minutes" in answer.reason
    calls = idle.calls
    clock[0] = 30.0
    assert check() == answer and idle.calls == calls, "asked again within a minute"
    busy = FakeStack([0.0, 12.0])
    assert StackInvocations(busy, busy, "Stack", clock=lambda: 0.0, now=lambda: now)() == Liveness(True)


def test_send_watch_says_the_pipeline_is_not_running_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = outputs_with_runner(tmp_path, GONE_PID)
    sent = SendSummary(7, LedgerCounts(), 10, 1000, 1, 0, 0, 0, 0.1, 0, None, 10, 3, 10)

    class Reader:
        interval, settle = 0.01, 0.05

        def sample(self) -> Figures:
            return Figures(0, None, None, None, None)

        def summary(self) -> Figures:
            return Figures(0, None, None, None, None)

    monkeypatch.setattr(producer_cli, "send_messages", lambda *_arguments, **_options: sent)
    monkeypatch.setattr(producer_cli, "pipeline_reader", lambda _target: Reader())
    arguments = ["send", "--outputs", str(outputs), "--ledger", str(tmp_path / "l.json"), "--count", "10"]
    status = producer_cli.main([*arguments, "--watch", "1", "--no-progress"])
    error = capsys.readouterr().err
    assert status == 1, error
    assert f"producer: the pipeline is not running: its runner (pid {GONE_PID}) is gone" in error
    assert "Traceback" not in error


def test_a_stack_in_the_emulator_or_a_file_without_a_pid_cannot_tell(tmp_path: Path) -> None:
    assert pipeline_liveness(PipelineTarget(source=str(outputs_with_runner(tmp_path, None))))().running is None
    emulated = PipelineTarget(source="stack S", endpoint_url="http://127.0.0.1:9")
    assert pipeline_liveness(emulated)().running is None
