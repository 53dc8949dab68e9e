"""The command line (as a user runs it, in a subprocess), clearing, and finding the pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from aggregation.names import LEGACY_METRICS_NAMESPACE
from producer.cleanup import RESTART_AFTER_CLEAR, ClearStatus, ClearTimeout, clear_pipeline, nonzero_nodes
from producer.ledger import Ledger
from producer.targets import resolve_target
from tests.toolkit.test_liveness import GONE_PID
from toolkit.pipeline import PipelineTarget, TargetError

REPOSITORY = Path(__file__).resolve().parents[2]
FillTables = Callable[[PipelineTarget, Ledger], None]


def run_cli(*arguments: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AWS_ENDPOINT")}
    environment.update(
        {"PYTHONPATH": str(REPOSITORY), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    )
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "producer", *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write_outputs(target: PipelineTarget, directory: Path) -> Path:
    path = directory / ".local" / "outputs.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    outputs = {
        "endpoint_url": target.endpoint_url,
        "region": target.region,
        "stream_name": target.stream_name,
        "state_table": target.state_table,
        "delta_table": target.delta_table,
        "aggregate_table": target.aggregate_table,
        "quarantine": target.quarantine,
    }
    path.write_text(json.dumps(outputs))
    return path


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ((), "required"),
        (("send", "--count", "0"), "--count"),
        (("send", "--processes", "0"), "--processes"),
        (("send", "--count", "5", "--duration", "3"), "not allowed with"),
        (("send", "--duplicates-pct", "60", "--modifications-pct", "60"), "exceed 100"),
        (("send", "--hierarchy-levels", "RiskType,,Region"), "hierarchy levels"),
        (("verify", "--timeout", "soon"), "--timeout"),
        (("verify",), "no pipeline found"),
    ],
)
def test_misuse_is_one_line_and_non_zero(arguments: tuple[str, ...], expected: str, tmp_path: Path) -> None:
    result = run_cli(*arguments, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_aws_error_is_one_line(pipeline: PipelineTarget, tmp_path: Path) -> None:
    write_outputs(
        PipelineTarget("no-such-stream", "s", "a", region=pipeline.region, endpoint_url=pipeline.endpoint_url), tmp_path
    )
    result = run_cli("send", "--count", "10", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "ResourceNotFoundException" in result.stderr, result.stderr


def test_send_verify_clear_from_the_command_line(
    pipeline: PipelineTarget, tmp_path: Path, fill_tables: FillTables
) -> None:
    write_outputs(pipeline, tmp_path)
    # No pipeline runs here, so nothing to read back (`--watch 0`: no wait for one).
    sent = run_cli("send", "--count", "300", "--seed", "4", "--no-progress", "--watch", "0", cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert "messages sent" in sent.stdout and "300" in sent.stdout
    ledger_path = tmp_path / ".local" / "ledger.json"
    ledger = Ledger.load(ledger_path)
    assert ledger.counts.messages_sent == 300

    # Nothing processed the stream here: the verifier must say so and exit 1.
    mismatch = run_cli("verify", "--timeout", "5", "--settle", "0.5", "--poll", "0.2", cwd=tmp_path)
    assert mismatch.returncode == 1, mismatch.stderr
    assert "MISMATCH" in mismatch.stdout
    assert "not running" not in mismatch.stderr  # no runner.pid: nothing says whether it runs

    # A runner that `make up` started and that is gone: the mismatch is a stopped pipeline, and
    # the operator is told so in one line instead of being left to hunt for a defect.
    (tmp_path / ".local" / "runner.pid").write_text(str(GONE_PID))
    stopped = run_cli("verify", "--timeout", "5", "--settle", "0.5", "--poll", "0.2", "--no-progress", cwd=tmp_path)
    assert stopped.returncode == 1, stopped.stderr
    assert "MISMATCH" in stopped.stdout
    assert stopped.stderr.count("\n") == 1 and "the pipeline is not running" in stopped.stderr, stopped.stderr
    assert f"pid {GONE_PID}" in stopped.stderr and "verify again once it runs" in stopped.stderr
    (tmp_path / ".local" / "runner.pid").unlink()

    fill_tables(pipeline, ledger)
    exact = run_cli("verify", "--timeout", "5", "--settle", "0.5", cwd=tmp_path)
    assert exact.returncode == 0, exact.stdout + exact.stderr
    assert "EXACT" in exact.stdout

    # No pipeline runs here to take the deleted trades out of the totals: clear gives up after
    # its timeout, in one line naming what is left, and leaves the totals to the pipeline.
    aggregate_items = client_items(pipeline, pipeline.aggregate_table)
    cleared = run_cli("clear", "--timeout", "1", "--poll", "0.2", "--no-progress", cwd=tmp_path)
    assert cleared.returncode == 1, cleared.stdout + cleared.stderr
    assert cleared.stderr.count("\n") == 1 and "nodes not at zero" in cleared.stderr, cleared.stderr
    assert "Traceback" not in cleared.stderr
    assert not ledger_path.exists(), "the ledger described state items that are gone"
    assert pipeline.dynamodb().scan(TableName=pipeline.state_table)["Count"] == 0
    assert client_items(pipeline, pipeline.aggregate_table) == aggregate_items


def client_items(target: PipelineTarget, table: str) -> list[dict[str, object]]:
    """Every item of a table, sorted by its text, for before/after comparisons."""
    items = target.dynamodb().scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted((dict(item) for item in items), key=repr)


def bookkeeping_items(target: PipelineTarget) -> list[dict[str, object]]:
    """The AggregateTable's `#` items (`#stats`, markers)."""
    items = target.dynamodb().scan(TableName=target.aggregate_table, ConsistentRead=True)["Items"]
    return sorted((dict(item) for item in items if item["AggregateKey"]["S"].startswith("#")), key=repr)


class PipelineStandIn:
    """What the map and reduce stages do after clear deletes state items, as clear's `sleep`.

    Each call is one pause of clear's wait: the first ``rounds_before_zero`` pauses change
    nothing (the REMOVE deltas are still flowing), then every node slice goes to zero (they
    were applied). ``reappear`` puts state items back on the first pause: a send in flight.
    """

    def __init__(self, target: PipelineTarget, rounds_before_zero: int, reappear: int = 0) -> None:
        self.target = target
        self.rounds_before_zero = rounds_before_zero
        self.reappear = reappear
        self.pauses = 0

    def __call__(self, _seconds: float) -> None:
        self.pauses += 1
        client = self.target.dynamodb()
        if self.pauses == 1 and self.reappear:
            for n in range(self.reappear):
                client.put_item(
                    TableName=self.target.state_table,
                    Item={"TradeID": {"S": f"late-{n}"}, "Version": {"N": "1"}},
                )
        if self.pauses == self.rounds_before_zero:
            for item in client.scan(TableName=self.target.aggregate_table)["Items"]:
                if item["AggregateKey"]["S"].startswith("node#"):
                    client.update_item(
                        TableName=self.target.aggregate_table,
                        Key={"AggregateKey": item["AggregateKey"]},
                        UpdateExpression="SET #value = :zero, TradeCount = :zero",
                        ExpressionAttributeNames={"#value": "Value"},
                        ExpressionAttributeValues={":zero": {"N": "0"}},
                    )


class RecordedProgress:
    def __init__(self) -> None:
        self.statuses: list[ClearStatus] = []

    def update(self, status: ClearStatus) -> None:
        self.statuses.append(status)


def test_clear_goes_through_the_pipeline_and_leaves_its_bookkeeping(
    pipeline: PipelineTarget, tmp_path: Path, sent_ledger: tuple[Path, Ledger], fill_tables: FillTables
) -> None:
    """Only state items are deleted; clear waits for the pipeline to bring every node to zero."""
    _path, ledger = sent_ledger
    fill_tables(pipeline, ledger)
    client = pipeline.dynamodb()
    client.put_item(
        TableName=pipeline.delta_table,
        Item={"StreamShard": {"S": "label/shard-1"}, "FirstSequenceNumber": {"S": "1".zfill(40)}},
    )
    client.put_item(TableName=pipeline.quarantine, Item={"RecordId": {"S": "shardId-1:1"}})
    bookkeeping = bookkeeping_items(pipeline)
    assert bookkeeping, "#stats and a marker"
    ledger_path = tmp_path / "ledger.json"
    Ledger().save(ledger_path)
    stand_in = PipelineStandIn(pipeline, rounds_before_zero=3, reappear=2)
    progress = RecordedProgress()

    summary = clear_pipeline(pipeline, ledger_path, progress=progress, sleep=stand_in)

    assert summary.deleted_items == {
        f"quarantine table {pipeline.quarantine}": 1,
        f"state table {pipeline.state_table}": len(ledger.trades) + 2,  # the late ones deleted again
    }
    assert summary.notes == [RESTART_AFTER_CLEAR], "the state items are gone, not the versions warm functions saw"
    assert summary.ledger_deleted == ledger_path and not ledger_path.exists()
    assert [status.nonzero_nodes > 0 for status in progress.statuses] == [True, True, True]
    assert client.scan(TableName=pipeline.state_table)["Count"] == 0
    assert client.scan(TableName=pipeline.quarantine)["Count"] == 0
    assert client.scan(TableName=pipeline.delta_table)["Count"] == 1, "delta items are the pipeline's, kept"
    assert bookkeeping_items(pipeline) == bookkeeping, "#stats and the markers are the pipeline's, kept"
    assert not nonzero_nodes(client, pipeline.aggregate_table)


def test_clear_gives_up_after_its_timeout_saying_what_is_left(
    pipeline: PipelineTarget, tmp_path: Path, sent_ledger: tuple[Path, Ledger], fill_tables: FillTables
) -> None:
    _path, ledger = sent_ledger
    fill_tables(pipeline, ledger)
    now = [0.0]

    def clock() -> float:
        return now[0]

    def sleep(seconds: float) -> None:
        now[0] += max(seconds, 0.5)

    with pytest.raises(ClearTimeout, match=r"within 5 s: \d+ nodes not at zero \(.*\) left"):
        clear_pipeline(pipeline, tmp_path / "absent.json", timeout=5, clock=clock, sleep=sleep)


def test_target_from_outputs_file_and_environment(
    pipeline: PipelineTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_outputs(pipeline, tmp_path)
    target = resolve_target(outputs_path=path)
    assert (target.stream_name, target.aggregate_table, target.endpoint_url) == (
        pipeline.stream_name,
        pipeline.aggregate_table,
        pipeline.endpoint_url,
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    assert resolve_target(outputs_path=path).endpoint_url == "http://127.0.0.1:1"
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    with pytest.raises(TargetError, match="no pipeline found"):
        resolve_target(outputs_path=tmp_path / "absent.json")


def test_target_from_stack_outputs(pipeline: PipelineTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pipeline.endpoint_url is not None
    template: dict[str, dict[str, Any]] = {
        "Resources": {"Stream": {"Type": "AWS::Kinesis::Stream", "Properties": {"ShardCount": 1}}},
        "Outputs": {
            "StreamName": {"Value": {"Ref": "Stream"}},
            "StateTableName": {"Value": pipeline.state_table},
            "DeltaTableName": {"Value": pipeline.delta_table},
            "AggregateTableName": {"Value": pipeline.aggregate_table},
            "QuarantineTableName": {"Value": pipeline.quarantine},
        },
    }
    stack_name = f"stack-{pipeline.stream_name}"
    cloudformation = boto3.client("cloudformation", region_name=pipeline.region, endpoint_url=pipeline.endpoint_url)
    cloudformation.create_stack(StackName=stack_name, TemplateBody=json.dumps(template))
    monkeypatch.setenv("AWS_ENDPOINT_URL", pipeline.endpoint_url)
    target = resolve_target(stack_name, outputs_path=Path("/nonexistent/outputs.json"))
    assert target.stream_name and target.aggregate_table == pipeline.aggregate_table
    assert target.quarantine == pipeline.quarantine and target.source == f"stack {stack_name}"
    # Deployed before each stack had its own namespace: its functions emit into the shared one.
    assert target.metrics_namespace == LEGACY_METRICS_NAMESPACE

    template["Outputs"]["MetricsNamespace"] = {"Value": "ExactlyOnceAggregation/Staging"}
    cloudformation.create_stack(StackName=f"{stack_name}-own", TemplateBody=json.dumps(template))
    own = resolve_target(f"{stack_name}-own", outputs_path=Path("/nonexistent/outputs.json"))
    assert own.metrics_namespace == "ExactlyOnceAggregation/Staging"
