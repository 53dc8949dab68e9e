"""reconcile and rebuild against a pipeline run with injected faults (real handlers, emulator).

state -> map -> reduce and the archive run through the `pipeline` fixture of tests/lambdas,
every stage failing now and then before and after its writes and retried with the identical
batch, as Lambda does. The totals the archive must agree with are computed independently
(`expected_totals`), not by the pipeline's code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import pytest

from aggregation.archive import batch_of, delta_from_document, encode_batch_document, encode_receipt
from archive_function import handler as archive_handler
from audit.aggregate_table import read_aggregate_table
from audit.archive_reader import read_archive
from audit.cli import main as audit_main
from audit.rebuild import rebuild
from audit.reconcile import IDENTICAL_COPIES, LEDGER, MESSAGES, RECEIPTS, TABLE, VALID, reconcile, reconcile_contents
from audit.targets import AuditError, AuditTarget
from function_support.faults import InjectedFailure
from local.emulator.control import advance_clock
from local.runner.inprocess import LambdaContextStub, Pipeline, expected_totals
from state_function import handler as state_handler
from tests.environment import repository_root
from tests.lambdas.archive_function.archive_helpers import WireRecorder, archive_bucket_environment, delta_keys
from tests.lambdas.test_pipeline_chain import random_workload

FAULTS = {
    "FAILURE_STATE_LAMBDA_PCT": "10",
    "FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT": "30",
    "FAILURE_MAP_LAMBDA_PCT": "10",
    "FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT": "30",
    "FAILURE_REDUCE_LAMBDA_PCT": "10",
    "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT": "30",
    "FAILURE_ARCHIVE_LAMBDA_PCT": "10",
    "FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT": "40",
}


def until_success(invoke: Callable[[], Any], attempts: list[int]) -> None:
    """Lambda's stream semantics: retry the identical batch until the function succeeds."""
    for attempt in range(1, 200):
        try:
            invoke()
        except InjectedFailure:
            continue
        attempts.append(attempt)
        return
    raise AssertionError("the batch never succeeded")


class FaultedRun:
    """One seeded workload through every stage, with faults; what the ground truth says."""

    def __init__(self, stages: Pipeline, recorder: WireRecorder, endpoint_url: str) -> None:
        self.pipeline = stages
        self.recorder = recorder
        self.target = AuditTarget(stages.names["aggregate"], recorder.bucket, "us-east-1", endpoint_url)
        self.delta_records: list[dict[str, Any]] = []
        self.attempts: list[int] = []

    def run(self, seed: int) -> dict[str, tuple[Decimal, int]]:
        payloads, final_states, _ids = random_workload(seed)
        for start in range(0, len(payloads), 17):
            batch = payloads[start : start + 17]
            kinesis_event = self.pipeline.kinesis_event(batch)  # one event, retried unchanged
            until_success(partial(state_handler.lambda_handler, kinesis_event, LambdaContextStub()), self.attempts)
            state_changes = self.pipeline.new_stream_records("state")
            if state_changes:
                until_success(partial(self.pipeline.run_map, state_changes), self.attempts)
            deltas = [r for r in self.pipeline.new_stream_records("delta") if r["eventName"] == "INSERT"]
            if deltas:
                self.delta_records.extend(deltas)
                until_success(partial(self.pipeline.run_reduce, deltas), self.attempts)
                until_success(partial(archive, deltas), self.attempts)
        return expected_totals(final_states)


def archive(records: list[dict[str, Any]]) -> None:
    archive_handler.lambda_handler({"Records": records}, LambdaContextStub())


@pytest.fixture
def faulted_run(
    pipeline: Pipeline,
    aws_environment: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[FaultedRun, dict[str, tuple[Decimal, int]]]]:
    with archive_bucket_environment(monkeypatch) as recorder:
        for name, value in FAULTS.items():
            monkeypatch.setenv(name, value)
        random.seed(20240101)
        run = FaultedRun(pipeline, recorder, aws_environment)
        expected = run.run(seed=3)
        for name in FAULTS:
            monkeypatch.setenv(name, "0")
        assert any(attempt > 1 for attempt in run.attempts), "no fault fired: the run proved nothing"
        yield run, expected


def aggregate_nodes(run: FaultedRun) -> dict[str, tuple[Decimal, int]]:
    return {
        key: (node.value, node.trade_count)
        for key, node in read_aggregate_table(run.target.dynamodb(), run.target.aggregate_table).nodes.items()
    }


def nonzero(nodes: dict[str, tuple[Decimal, int]]) -> dict[str, tuple[Decimal, int]]:
    return {key: value for key, value in nodes.items() if value != (Decimal(0), 0)}


def marker_expiries(run: FaultedRun) -> dict[str, int]:
    """Every reduce marker in the table, with its `ExpiresAt`."""
    return {
        item["AggregateKey"]: int(item["ExpiresAt"])
        for item in run.pipeline.scan("aggregate")
        if item["AggregateKey"].startswith("#applied#")
    }


def write_outputs(tmp_path: Path, run: FaultedRun) -> Path:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(
        json.dumps(
            {
                "endpoint_url": run.target.endpoint_url,
                "region": "us-east-1",
                "aggregate_table": run.target.aggregate_table,
                "archive_bucket": run.target.archive_bucket,
            }
        )
    )
    return outputs


def write_ledger(tmp_path: Path, expected: dict[str, tuple[Decimal, int]]) -> Path:
    """A ledger in the producer's format (only the part reconcile reads)."""
    ledger = tmp_path / "ledger.json"
    aggregates = {key: {"Value": str(value), "TradeCount": count} for key, (value, count) in expected.items()}
    ledger.write_text(json.dumps({"format": "exactly-once-ledger/1", "aggregates": aggregates}))
    return ledger


def test_reconcile_matches_after_a_faulted_run(
    faulted_run: tuple[FaultedRun, dict[str, tuple[Decimal, int]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, expected = faulted_run
    assert nonzero(aggregate_nodes(run)) == expected  # the pipeline itself stayed exact

    report = reconcile(run.target, write_ledger(tmp_path, expected))
    assert report.ok, report.checks
    assert report.items == len({r["dynamodb"]["NewImage"]["BatchHash"]["S"] for r in run.delta_records})
    assert report.objects == len(delta_keys(run.recorder.bucket)) <= report.items, "one object an invocation"

    status = audit_main(["reconcile", "--outputs", str(write_outputs(tmp_path, run))])
    assert status == 0
    assert "MATCH" in capsys.readouterr().out


def test_reconcile_fails_on_a_deleted_object(
    faulted_run: tuple[FaultedRun, dict[str, tuple[Decimal, int]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _expected = faulted_run
    s3 = boto3.client("s3")
    key = s3.list_objects_v2(Bucket=run.recorder.bucket, Prefix="deltas/")["Contents"][0]["Key"]
    s3.delete_object(Bucket=run.recorder.bucket, Key=key)

    report = reconcile_contents(
        read_archive(s3, run.recorder.bucket), read_aggregate_table(run.target.dynamodb(), run.target.aggregate_table)
    )
    assert report.failed() == {TABLE, MESSAGES, RECEIPTS}
    assert "1 receipt(s) name an object that is missing" in str(report.checks)
    assert report.differences

    status = audit_main(["reconcile", "--outputs", str(write_outputs(tmp_path, run))])
    output = capsys.readouterr().out
    assert status == 1 and "MISMATCH" in output and "nodes that differ" in output


def _altered_value(document: dict[str, Any]) -> None:
    node = next(iter(document["Items"][0]["Deltas"].values()))
    node["Value"] = str(Decimal(node["Value"]) + Decimal("0.01"))


def _fabricated_item(document: dict[str, Any]) -> None:
    forged = json.loads(json.dumps(document["Items"][0]))
    forged["BatchHash"] = hashlib.sha256(b"never produced").hexdigest()
    document["Items"] = sorted([*document["Items"], forged], key=lambda item: item["BatchHash"])


@pytest.mark.parametrize(
    ("wrong", "failed"),
    [
        pytest.param("an item's value altered in its object", {TABLE, LEDGER}, id="altered"),
        pytest.param("an item dropped from its object", {VALID, TABLE, MESSAGES, LEDGER, RECEIPTS}, id="dropped"),
        pytest.param(
            "an object added, with its receipt, holding an item never produced",
            {TABLE, MESSAGES, LEDGER},
            id="fabricated",
        ),
        pytest.param(
            "an object added, without a receipt, holding an item never produced",
            {TABLE, MESSAGES, LEDGER, RECEIPTS},
            id="fabricated-unrecorded",
        ),
        pytest.param("a second copy of an item, altered", {IDENTICAL_COPIES}, id="conflicting-copy"),
        pytest.param("a receipt that lists another item", {VALID, RECEIPTS}, id="receipt"),
    ],
)
def test_reconcile_catches_an_archive_made_wrong_on_purpose(
    faulted_run: tuple[FaultedRun, dict[str, tuple[Decimal, int]]], tmp_path: Path, wrong: str, failed: set[str]
) -> None:
    """Each wrong is what a principal with write access could do (unconditional puts, the bucket policy
    aside: the emulator does not enforce it); reconcile must fail exactly the checks that see it."""
    run, expected = faulted_run
    s3 = boto3.client("s3")
    bucket = run.recorder.bucket
    archive = read_archive(s3, bucket)
    batch = max(archive.batches.values(), key=lambda batch: len(batch.items))
    document = json.loads(encode_batch_document(batch))
    if wrong.startswith("an item's value altered"):
        _altered_value(document)
        s3.put_object(Bucket=bucket, Key=batch.key, Body=json.dumps(document).encode())
    elif wrong.startswith("an item dropped"):
        document["Items"].pop()
        s3.put_object(Bucket=bucket, Key=batch.key, Body=json.dumps(document).encode())
    elif wrong.startswith("an object added"):
        _fabricated_item(document)
        forged = batch_of(delta_from_document(item) for item in document["Items"])
        s3.put_object(Bucket=bucket, Key=forged.key, Body=encode_batch_document(forged))
        if "with its receipt" in wrong:
            s3.put_object(Bucket=bucket, Key=forged.receipt.key, Body=encode_receipt(forged.receipt))
    elif wrong.startswith("a second copy"):
        _altered_value(document)
        other = next(item for each in archive.batches.values() for item in each.items if each is not batch)
        copy = batch_of([delta_from_document(document["Items"][0]), other])  # another set: another object
        s3.put_object(Bucket=bucket, Key=copy.key, Body=encode_batch_document(copy))
        s3.put_object(Bucket=bucket, Key=copy.receipt.key, Body=encode_receipt(copy.receipt))
    else:
        receipt = json.loads(encode_receipt(batch.receipt))
        receipt["Items"][hashlib.sha256(b"never produced").hexdigest()] = 1
        s3.put_object(Bucket=bucket, Key=batch.receipt.key, Body=json.dumps(receipt).encode())

    report = reconcile(run.target, write_ledger(tmp_path, expected))
    # Of two differing copies either may be read first: the totals may or may not differ too.
    may_also_fail = {TABLE, LEDGER} if IDENTICAL_COPIES in failed else set()
    assert failed <= report.failed() <= failed | may_also_fail, report.checks


def test_rebuild_restores_a_wiped_table_exactly_and_idempotently(
    faulted_run: tuple[FaultedRun, dict[str, tuple[Decimal, int]]], aws_environment: str
) -> None:
    run, expected = faulted_run
    before = run.pipeline.stats()["MessagesApplied"]
    reduce_markers = marker_expiries(run)
    dynamodb = boto3.client("dynamodb")
    for item in run.pipeline.scan("aggregate"):
        dynamodb.delete_item(TableName=run.target.aggregate_table, Key={"AggregateKey": {"S": item["AggregateKey"]}})
    dynamodb.put_item(  # a node no archived delta ever touched: rebuild removes it
        TableName=run.target.aggregate_table,
        Item={"AggregateKey": {"S": "Bogus"}, "Value": {"N": "1"}, "TradeCount": {"N": "1"}},
    )

    plan = rebuild(run.target)
    assert plan.stale_items == ["Bogus"]
    assert nonzero(aggregate_nodes(run)) == expected
    assert run.pipeline.stats()["MessagesApplied"] == before
    # Each marker expires 7 days (the default TTL) after its delta item's CreatedAt, exactly
    # when the one the reduce stage wrote did.
    created_at = {
        image["BatchHash"]["S"]: int(image["CreatedAt"]["N"])
        for image in (record["dynamodb"]["NewImage"] for record in run.delta_records)
    }
    rebuilt_markers = marker_expiries(run)
    assert rebuilt_markers == {
        key: created_at[key.removeprefix("#applied#").split("/")[0]] + 7 * 86_400 for key in rebuilt_markers
    }
    assert rebuilt_markers == reduce_markers
    first = sorted(run.pipeline.scan("aggregate"), key=lambda item: item["AggregateKey"])

    rebuild(run.target)  # again: the same table
    again = sorted(run.pipeline.scan("aggregate"), key=lambda item: item["AggregateKey"])
    assert [(i["AggregateKey"], i.get("Value"), i.get("TradeCount")) for i in again] == [
        (i["AggregateKey"], i.get("Value"), i.get("TradeCount")) for i in first
    ]

    # The stream may still replay deltas after a rebuild: the restored markers make it a no-op,
    # even past the 10-minute ClientRequestToken window.
    advance_clock(aws_environment, 11 * 60)
    run.pipeline.run_reduce(run.delta_records)
    assert nonzero(aggregate_nodes(run)) == expected
    assert reconcile(run.target).ok


def test_rebuild_refuses_while_the_archive_lags_behind_reduce(
    faulted_run: tuple[FaultedRun, dict[str, tuple[Decimal, int]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deltas reduce applied but the archive lacks would be left out for good (their markers stay)."""
    run, expected = faulted_run
    s3 = boto3.client("s3")
    bucket = run.recorder.bucket
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    batch = next(iter(read_archive(s3, bucket).batches.values()))
    for key in (batch.key, batch.receipt.key):  # the archive lags: an invocation's deltas are not there yet
        s3.delete_object(Bucket=bucket, Key=key)
    outputs = str(write_outputs(tmp_path, run))

    def refused(reason: str) -> None:
        table = sorted(run.pipeline.scan("aggregate"), key=lambda item: item["AggregateKey"])
        for arguments in (["rebuild", "--outputs", outputs], ["rebuild", "--outputs", outputs, "--dry-run"]):
            status = audit_main(arguments)
            lines = capsys.readouterr().err.strip().splitlines()
            assert status == 2 and len(lines) == 1, lines
            assert "refusing to rebuild: the archive lags behind reduce" in lines[0] and reason in lines[0], lines
        assert sorted(run.pipeline.scan("aggregate"), key=lambda item: item["AggregateKey"]) == table, "wrote"

    refused(f"{len(batch.items)} batch(es) the reduce markers name are not archived")

    # Mode `crt` writes no markers: `#stats` MessagesApplied still shows the lag.
    dynamodb = boto3.client("dynamodb")
    for marker in marker_expiries(run):
        dynamodb.delete_item(TableName=run.target.aggregate_table, Key={"AggregateKey": {"S": marker}})
    refused("#stats MessagesApplied is")

    # Only the object missing, its receipt there: a damaged archive, refused as such.
    restore(s3, bucket, batch.receipt.key)
    with pytest.raises(AuditError, match="1 receipt\\(s\\) name a batch object that is missing; refusing"):
        rebuild(run.target)

    # Restored as the README says (delete the delete marker), the archive is whole again.
    restore(s3, bucket, batch.key)
    rebuild(run.target)
    assert nonzero(aggregate_nodes(run)) == expected
    assert reconcile(run.target).ok


def restore(s3: Any, bucket: str, key: str) -> None:
    """Undo a deletion in a versioned bucket: delete the delete marker."""
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)
    (delete_marker,) = [marker for marker in versions["DeleteMarkers"] if marker["IsLatest"]]
    s3.delete_object(Bucket=bucket, Key=key, VersionId=delete_marker["VersionId"])


@pytest.mark.parametrize(
    "arguments",
    [
        [],
        ["reconcile", "--outputs", "missing.json"],
        ["rebuild", "--marker-ttl-days", "1"],
        ["reconcile", "--outputs", "x", "--stack-name", "y"],
        ["reconcile", "--ledger"],
    ],
)
def test_cli_misuse_is_one_line(arguments: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with contextlib.chdir(tmp_path):
        try:
            status = audit_main(arguments)
        except SystemExit as exit_:
            status = int(exit_.code or 0)
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(lines) == 1 and lines[0].startswith("error: "), lines


def test_python_m_audit_reports_a_missing_target_without_traceback(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "audit", "reconcile", "--outputs", str(tmp_path / "missing.json")],
        cwd=repository_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.startswith("error: ") and len(completed.stderr.strip().splitlines()) == 1
    assert "Traceback" not in completed.stderr
