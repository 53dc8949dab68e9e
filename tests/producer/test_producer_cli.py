"""The command line (as a user runs it, in a subprocess), clearing, and finding the pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from producer.cleanup import RESTART_AFTER_CLEAR, clear_pipeline
from producer.ledger import Ledger
from producer.targets import resolve_target
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
    sent = run_cli("send", "--count", "300", "--seed", "4", "--no-progress", cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert "messages sent" in sent.stdout and "300" in sent.stdout
    ledger_path = tmp_path / ".local" / "ledger.json"
    ledger = Ledger.load(ledger_path)
    assert ledger.counts.messages_sent == 300

    # Nothing processed the stream here: the verifier must say so and exit 1.
    mismatch = run_cli("verify", "--timeout", "5", "--settle", "0.5", "--poll", "0.2", cwd=tmp_path)
    assert mismatch.returncode == 1, mismatch.stderr
    assert "MISMATCH" in mismatch.stdout

    fill_tables(pipeline, ledger)
    exact = run_cli("verify", "--timeout", "5", "--settle", "0.5", cwd=tmp_path)
    assert exact.returncode == 0, exact.stdout + exact.stderr
    assert "EXACT" in exact.stdout

    cleared = run_cli("clear", cwd=tmp_path)
    assert cleared.returncode == 0, cleared.stderr
    assert not ledger_path.exists()
    client = pipeline.dynamodb()
    for table in (pipeline.state_table, pipeline.aggregate_table):
        assert client.scan(TableName=table)["Count"] == 0


def test_clear_empties_every_table_and_the_ledger(pipeline: PipelineTarget, tmp_path: Path) -> None:
    client = pipeline.dynamodb()
    keys = {
        pipeline.state_table: "TradeID",
        pipeline.aggregate_table: "AggregateKey",
        pipeline.delta_table: "StreamShard",
        pipeline.quarantine: "RecordId",
    }
    for table, key in keys.items():
        for start in range(0, 130, 25):
            client.batch_write_item(
                RequestItems={
                    table: [
                        # The DeltaTable's sort key too: clear reads each table's key schema.
                        {"PutRequest": {"Item": {key: {"S": f"item-{n}"}, "FirstSequenceNumber": {"S": str(n)}}}}
                        for n in range(start, min(start + 25, 130))
                    ]
                }
            )
    ledger_path = tmp_path / "ledger.json"
    Ledger().save(ledger_path)
    summary = clear_pipeline(pipeline, ledger_path)
    assert sorted(summary.deleted_items.values()) == [130, 130, 130, 130]
    assert summary.notes == [RESTART_AFTER_CLEAR], "the state items are gone, not the versions warm functions saw"
    assert summary.ledger_deleted == ledger_path and not ledger_path.exists()
    for table in keys:
        assert client.scan(TableName=table)["Count"] == 0


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
    template = {
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
