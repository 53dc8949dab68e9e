"""The event-source runner against small purpose-built stacks deployed into the emulator.

Each test deploys its own stack (the `recorder` function, a Kinesis stream, sometimes a
table stream) through the real deployer, runs the runner in-process (or, for the SIGKILL
test, as the background process `make up` starts) and checks one Lambda semantic the
exactly-once design depends on.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local.deploy.deployer import Deployment, aws_client, deploy
from local.deploy.status import alarms
from local.emulator.control import EmulatorProcess
from local.paths import REPO_ROOT, LocalPaths
from local.runner.expiry import OnFailureDestination
from local.runner.runner import Runner
from tests.local.runner.runner_harness import (
    read_invocations,
    stream_stack_template,
    wait_for,
    write_cloud_assembly,
)

Deployer = Callable[..., tuple[Deployment, Path, LocalPaths]]


@pytest.fixture
def deploy_recorder(module_emulator: EmulatorProcess, tmp_path: Path, request: pytest.FixtureRequest) -> Deployer:
    """Deploy a recorder stack with the given template options; returns (deployment, log, paths)."""

    def _deploy(**options: Any) -> tuple[Deployment, Path, LocalPaths]:
        record_log = tmp_path / "invocations.jsonl"
        stack_name = "Runner" + "".join(part.title() for part in request.node.name.split("_"))[:100]
        template = stream_stack_template(record_log=record_log, **options)
        assembly = write_cloud_assembly(tmp_path / "cdk.out", stack_name, template)
        deployment = deploy(assembly, module_emulator.endpoint_url, stack_name=stack_name)
        return deployment, record_log, LocalPaths(tmp_path / "state")

    return _deploy


@pytest.fixture
def run() -> Iterator[Callable[[Deployment, LocalPaths], Runner]]:
    """Start a runner in-process; every runner started is stopped after the test."""
    started: list[Runner] = []

    def _run(deployment: Deployment, paths: LocalPaths, **options: Any) -> Runner:
        runner = Runner(deployment, paths, **{"poll_interval_seconds": 0.05, "caller_environment": {}, **options})
        runner.start()
        started.append(runner)
        return runner

    yield _run
    for runner in started:
        runner.stop()


def put(deployment: Deployment, payloads: list[Any], partition_key: str | None = None) -> list[str]:
    """Put JSON payloads (one put_records call); returns their sequence numbers."""
    kinesis = aws_client("kinesis", deployment.endpoint_url)
    response = kinesis.put_records(
        StreamName=deployment.outputs["StreamName"],
        Records=[
            {
                "Data": p if isinstance(p, bytes) else json.dumps(p).encode(),
                "PartitionKey": partition_key or str(i),
            }
            for i, p in enumerate(payloads)
        ],
    )
    return [r["SequenceNumber"] for r in response["Records"]]


def delivered_ids(record_log: Path) -> list[str]:
    return [event_id for invocation in read_invocations(record_log) for event_id in invocation["ids"]]


def test_delivers_every_record_in_shard_order_in_the_lambda_kinesis_format(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(shard_count=2)
    run(deployment, paths)
    sequence_numbers = []
    for start in range(0, 60, 20):
        sequence_numbers += put(deployment, [{"n": n} for n in range(start, start + 20)])
    wait_for(lambda: len(delivered_ids(record_log)) >= 60, what="60 records")

    invocations = read_invocations(record_log)
    assert len(delivered_ids(record_log)) == 60, "each record exactly once when nothing fails"
    assert sorted(i.split(":")[1] for i in delivered_ids(record_log)) == sorted(sequence_numbers)
    assert all(len(i["ids"]) <= 10 for i in invocations), "BatchSize 10"
    per_shard: dict[str, list[int]] = {}
    for event_id in delivered_ids(record_log):
        shard_id, sequence_number = event_id.split(":")
        per_shard.setdefault(shard_id, []).append(int(sequence_number))
    assert len(per_shard) == 2
    for sequence in per_shard.values():
        assert sequence == sorted(sequence), "records of a shard arrive in sequence order"

    record = invocations[0]["event"]["Records"][0]
    assert set(record) == {
        "kinesis",
        "eventSource",
        "eventVersion",
        "eventID",
        "eventName",
        "invokeIdentityArn",
        "awsRegion",
        "eventSourceARN",
    }
    assert record["eventSource"] == "aws:kinesis"
    assert record["eventSourceARN"].endswith("/" + deployment.outputs["StreamName"])
    assert record["eventID"] == f"{record['eventID'].split(':')[0]}:{record['kinesis']['sequenceNumber']}"
    assert set(record["kinesis"]) == {
        "kinesisSchemaVersion",
        "partitionKey",
        "sequenceNumber",
        "data",
        "approximateArrivalTimestamp",
    }
    assert "n" in json.loads(base64.b64decode(record["kinesis"]["data"]))
    assert isinstance(record["kinesis"]["approximateArrivalTimestamp"], float)
    assert invocations[0]["env"]["AWS_ENDPOINT_URL"] == deployment.endpoint_url
    assert invocations[0]["function"] == deployment.physical_id("Recorder")
    assert 0 < invocations[0]["remaining_ms"] <= 10_000


def test_a_failed_batch_is_retried_identically_until_it_succeeds(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(function_environment={"FAIL_FIRST_N": "2"})
    runner = run(deployment, paths)
    put(deployment, [{"n": n} for n in range(5)], partition_key="same")
    wait_for(lambda: len(read_invocations(record_log)) >= 3, what="two failures and a success")
    time.sleep(0.3)

    invocations = read_invocations(record_log)
    assert len(invocations) == 3
    assert invocations[0]["event"] == invocations[1]["event"] == invocations[2]["event"], "the identical batch"
    counters = runner.stats.function(deployment.physical_id("Recorder"))
    assert (counters.invocations, counters.errors, counters.retries, counters.records_processed) == (3, 2, 2, 5)
    assert "injected failure" in counters.last_error


def test_an_invocation_over_its_timeout_is_killed_counted_and_retried_in_a_fresh_environment(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(
        timeout_seconds=1,
        function_environment={"SLEEP_FIRST_N": "1", "SLEEP_FIRST_N_SECONDS": "30"},
    )
    runner = run(deployment, paths)
    started = time.monotonic()
    put(deployment, [{"n": n} for n in range(3)], partition_key="same")
    wait_for(lambda: len(read_invocations(record_log)) >= 2, what="the retry after the timeout")

    assert time.monotonic() - started < 10, "killed at its 1 s timeout, not after its 30 s sleep"
    first, second = read_invocations(record_log)[:2]
    assert first["ids"] == second["ids"]
    assert first["pid"] != second["pid"], "the timed-out environment was replaced (cold start)"
    wait_for(lambda: runner.stats.function(deployment.physical_id("Recorder")).records_processed == 3)
    counters = runner.stats.function(deployment.physical_id("Recorder"))
    assert (counters.timeouts, counters.errors, counters.retries) == (1, 1, 1)
    assert counters.cold_starts == 1, "warm_up started the first environment, the retry a fresh one"
    with pytest.raises(ProcessLookupError):
        os.kill(first["pid"], 0)


def test_filter_criteria_drop_records_and_an_all_filtered_batch_is_not_invoked(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    pattern = {"data": {"kind": ["keep"], "size": [{"numeric": [">", 2]}]}}
    deployment, record_log, paths = deploy_recorder(
        mapping={"FilterCriteria": {"Filters": [{"Pattern": json.dumps(pattern)}]}}
    )
    runner = run(deployment, paths)
    put(
        deployment,
        [
            {"kind": "keep", "size": 3, "n": 1},
            {"kind": "drop", "size": 3},
            {"kind": "keep", "size": 1},
            b"not json",
            {"kind": "keep", "size": 9, "n": 2},
        ],
        partition_key="same",
    )
    wait_for(lambda: len(delivered_ids(record_log)) >= 2, what="the matching records")
    kept = [
        json.loads(base64.b64decode(r["kinesis"]["data"]))["n"]
        for invocation in read_invocations(record_log)
        for r in invocation["event"]["Records"]
    ]
    assert kept == [1, 2]

    last = put(deployment, [{"kind": "drop"}, {"kind": "drop"}], partition_key="same")[-1]
    function = deployment.physical_id("Recorder")
    wait_for(lambda: runner.stats.function(function).records_filtered == 5, what="the filtered records")
    wait_for(lambda: any(s.checkpoint == last for s in runner.stats.shards.values()), what="checkpoint")
    assert len(read_invocations(record_log)) == 1, "a batch with no matching record is not invoked"


def test_report_batch_item_failures_checkpoints_before_the_first_failed_item_and_retries_from_it(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(
        mapping={"FunctionResponseTypes": ["ReportBatchItemFailures"]},
        function_environment={"FAIL_ITEMS_CONTAINING": "bad"},
    )
    run(deployment, paths)
    put(deployment, [{"n": "a"}, {"n": "b"}, {"n": "bad"}, {"n": "c"}], partition_key="same")
    wait_for(lambda: len(read_invocations(record_log)) >= 2, what="the retry of the failed tail")
    first, second = read_invocations(record_log)[:2]
    assert len(first["ids"]) == 4
    assert second["ids"] == first["ids"][2:]


def test_bisect_on_function_error_splits_the_failing_batch(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(
        mapping={"BisectBatchOnFunctionError": True}, function_environment={"FAIL_FIRST_N": "1"}
    )
    run(deployment, paths)
    put(deployment, [{"n": n} for n in range(4)], partition_key="same")
    wait_for(lambda: len(read_invocations(record_log)) >= 3, what="the two halves")
    first, left, right = read_invocations(record_log)[:3]
    assert left["ids"] == first["ids"][:2]
    assert right["ids"] == first["ids"][2:]


def test_a_batch_is_skipped_loudly_once_maximum_retry_attempts_are_spent(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(
        mapping={"MaximumRetryAttempts": 1}, function_environment={"FAIL_FIRST_N": "2"}
    )
    runner = run(deployment, paths)
    put(deployment, [{"n": 1}], partition_key="same")
    function = deployment.physical_id("Recorder")
    wait_for(lambda: runner.stats.function(function).batches_skipped == 1, what="the skip")
    put(deployment, [{"n": 2}], partition_key="same")
    wait_for(lambda: runner.stats.function(function).records_processed == 1, what="the next batch")
    invocations = read_invocations(record_log)
    assert len(invocations) == 3, "one attempt and one retry, then the next batch"
    assert invocations[0]["ids"] == invocations[1]["ids"] != invocations[2]["ids"]


def test_a_batch_that_always_fails_expires_and_the_operator_is_told(
    deploy_recorder: Deployer, run: Callable[..., Runner], caplog: pytest.LogCaptureFixture
) -> None:
    """MaximumRecordAgeInSeconds (2 s here; Lambda accepts 60 or more) and an SQS on-failure
    destination, read from the deployed mapping: a batch that always fails is retried until its
    records are older than that, then discarded, not retried for ever. The operator is told: one
    `LOST` line, the invocation record in the queue, `make status`'s alarm; the shard goes on."""
    deployment, record_log, paths = deploy_recorder(
        mapping={
            "MaximumRecordAgeInSeconds": 2,
            "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": ["FailedBatches", "Arn"]}}},
        },
        function_environment={"FAIL_FIRST_N": "1000"},
        extra_resources={"FailedBatches": {"Type": "AWS::SQS::Queue", "Properties": {}}},
    )
    function = deployment.physical_id("Recorder")
    with caplog.at_level(logging.ERROR, logger="local.runner.expiry"):
        runner = run(deployment, paths)
        [mapping] = runner.mappings
        destination = mapping.on_failure_destination or ""
        assert (mapping.maximum_record_age_seconds, destination.split(":")[2]) == (2, "sqs")
        sources = mapping.field_sources
        assert sources["DestinationConfig"] == sources["MaximumRecordAgeInSeconds"] == "emulator", "as deployed"
        sequence_numbers = put(deployment, [{"n": n} for n in range(3)], partition_key="same")
        wait_for(lambda: runner.stats.function(function).records_dropped == 3, timeout_seconds=20, what="the expiry")
        [later] = put(deployment, [{"n": 3}], partition_key="same")
        wait_for(lambda: any(later in i for i in delivered_ids(record_log)), what="the next record, after the discard")
        runner.stop()  # before the next record expires too (it fails as well)

    attempts = [i["ids"] for i in read_invocations(record_log) if later not in "".join(i["ids"])]
    assert len(attempts) >= 2 and all(ids == attempts[0] for ids in attempts), "retried, identically, until expired"
    assert [event_id.split(":")[1] for event_id in attempts[0]] == sequence_numbers

    sqs = aws_client("sqs", deployment.endpoint_url)
    queue_url = sqs.get_queue_url(QueueName=destination.rsplit(":", 1)[1])["QueueUrl"]
    [message] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
    sent = json.loads(message["Body"])
    assert sent["requestContext"]["condition"] == "RecordAgeExceeded"
    assert sent["requestContext"]["approximateInvokeCount"] == len(attempts)
    assert sent["requestContext"]["functionArn"].endswith(f":function:{function}")
    assert sent["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}
    info = sent["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequence_numbers[0],
        sequence_numbers[-1],
        3,
    )
    assert (info["streamArn"], info["shardId"]) == (mapping.event_source_arn, attempts[0][0].split(":")[0])

    [lost] = [m for m in caplog.messages if "LOST" in m]
    assert f"LOST 3 record(s) {sequence_numbers[0]}..{sequence_numbers[-1]} (RecordAgeExceeded" in lost
    assert f"invocation record sent to {destination}" in lost
    [alarm] = alarms(runner.stats.snapshot())
    assert str(alarm).startswith("ALARM ") and "3 record(s) dropped" in str(alarm)
    counters = runner.stats.function(function)
    assert (counters.batches_expired, counters.destination_deliveries, counters.destination_delivery_failures) == (
        1,
        1,
        0,
    )


def test_an_sns_or_s3_on_failure_destination_gets_the_invocation_record(
    aws_client: Callable[[str], Any],
) -> None:
    """SNS: the record is the message; S3: the record with `payload`, under Lambda's key."""
    record = {"requestContext": {"condition": "RecordAgeExceeded"}, "version": "1.0"}
    event = {"Records": [{"eventID": "shardId-000000000000:1"}]}
    sns, sqs, s3 = aws_client("sns"), aws_client("sqs"), aws_client("s3")
    topic = sns.create_topic(Name="failed-batches")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="failed-batches-copy")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    s3.create_bucket(Bucket="failed-batches")
    for arn in (topic, "arn:aws:s3:::failed-batches"):
        OnFailureDestination(arn, aws_client).send(
            record, event=event, mapping_uuid="uuid-1", shard_id="shardId-000000000000", at=1_573_691_886.0
        )
    [message] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
    assert json.loads(message["Body"]) == record
    [stored] = s3.list_objects_v2(Bucket="failed-batches")["Contents"]
    assert stored["Key"].startswith("aws/lambda/uuid-1/shardId-000000000000/2019/11/14/2019-11-14T00.38.06-")
    body = json.loads(s3.get_object(Bucket="failed-batches", Key=stored["Key"])["Body"].read())
    assert body == {**record, "payload": event}
    with pytest.raises(ValueError, match="SQS, SNS or S3 only"):
        OnFailureDestination("arn:aws:lambda:us-east-1:123456789012:function:f", aws_client)


def test_reserved_concurrency_one_serialises_invocations_across_shards(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(
        shard_count=2, reserved_concurrency=1, function_environment={"SLEEP_SECONDS": "0.2"}
    )
    run(deployment, paths)
    put(deployment, [{"n": n} for n in range(40)])
    wait_for(lambda: len(delivered_ids(record_log)) >= 40, what="40 records")
    invocations = read_invocations(record_log)
    assert len({i["ids"][0].split(":")[0] for i in invocations}) == 2, "both shards delivered"
    assert len({i["pid"] for i in invocations}) == 1, "one execution environment: never two at once"


def test_dynamodb_stream_records_arrive_in_the_lambda_format_and_filters_apply(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    # The stack's own kind of pattern: records whose new image holds the key (no REMOVE).
    pattern = {"dynamodb": {"NewImage": {"pk": {"S": [{"exists": True}]}}}}
    filters = {"Filters": [{"Pattern": json.dumps(pattern)}]}
    deployment, record_log, paths = deploy_recorder(table_mapping={"FilterCriteria": filters})
    runner = run(deployment, paths)
    dynamodb = aws_client("dynamodb", deployment.endpoint_url)
    table = deployment.outputs["StateTableName"]
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}, "b": {"B": b"\x00\x01"}})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "2"}})
    dynamodb.delete_item(TableName=table, Key={"pk": {"S": "a"}})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "b"}, "v": {"N": "3"}})
    wait_for(lambda: len(delivered_ids(record_log)) >= 3, what="the two INSERTs and the MODIFY")
    time.sleep(0.5)
    records = [r for i in read_invocations(record_log) for r in i["event"]["Records"]]
    assert [r["eventName"] for r in records] == ["INSERT", "MODIFY", "INSERT"], "the REMOVE was filtered out"
    function = deployment.physical_id("Recorder")
    wait_for(lambda: runner.stats.function(function).records_filtered == 1, what="the filtered REMOVE")
    record = records[0]
    assert set(record) == {
        "eventID",
        "eventName",
        "eventVersion",
        "eventSource",
        "awsRegion",
        "dynamodb",
        "eventSourceARN",
    }
    assert record["eventSource"] == "aws:dynamodb"
    assert "/stream/" in record["eventSourceARN"]
    change = record["dynamodb"]
    assert change["Keys"] == {"pk": {"S": "a"}}
    assert change["NewImage"]["b"] == {"B": base64.b64encode(b"\x00\x01").decode()}
    assert change["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    assert isinstance(change["ApproximateCreationDateTime"], float)
    assert isinstance(change["SequenceNumber"], str) and isinstance(change["SizeBytes"], int)


def test_an_invocation_wakes_the_pollers_of_the_tables_its_function_names(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    """The recorder writes to the table its environment names: that table's stream is read at
    once, not after the idle pause (a minute here, longer than the test waits)."""
    deployment, record_log, paths = deploy_recorder(
        function_environment={"PUT_ITEM_TABLE": {"Ref": "Table"}}, table_mapping={}
    )
    [sequence_number] = put(deployment, [{"n": 1}])  # before the start: the first read finds it
    run(deployment, paths, poll_interval_seconds=60.0)
    wait_for(lambda: len(read_invocations(record_log)) >= 2, timeout_seconds=20, what="the table stream's delivery")
    sources = [[r["eventSource"] for r in i["event"]["Records"]] for i in read_invocations(record_log)]
    assert sources == [["aws:kinesis"], ["aws:dynamodb"]]
    [table_record] = read_invocations(record_log)[1]["event"]["Records"]
    assert table_record["dynamodb"]["Keys"]["pk"]["S"].endswith(sequence_number)


def test_fault_injection_variables_from_the_caller_override_the_function_environment(
    deploy_recorder: Deployer, run: Callable[..., Runner]
) -> None:
    deployment, record_log, paths = deploy_recorder(function_environment={"FAILURE_STATE_LAMBDA_PCT": "0"})
    runner = Runner(
        deployment,
        paths,
        poll_interval_seconds=0.05,
        caller_environment={"FAILURE_STATE_LAMBDA_PCT": "7", "UNRELATED": "x"},
    )
    runner.start()
    try:
        put(deployment, [{"n": 1}])
        wait_for(lambda: len(read_invocations(record_log)) >= 1)
    finally:
        runner.stop()
    assert read_invocations(record_log)[0]["env"]["FAILURE_STATE_LAMBDA_PCT"] == "7"


def test_a_runner_killed_mid_batch_resumes_from_its_checkpoint_and_redelivers_the_batch(
    deploy_recorder: Deployer,
) -> None:
    deployment, record_log, paths = deploy_recorder(
        mapping={"BatchSize": 2}, function_environment={"SLEEP_SECONDS": "0.5"}
    )
    paths.ensure()
    paths.deployment.write_text(json.dumps(deployment.to_json()))

    def start_runner() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "local.runner", "--state-dir", str(paths.state_dir), "--poll-interval", "0.05"],
            cwd=REPO_ROOT,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=(paths.state_dir / "runner.log").open("ab"),
        )

    runner = start_runner()
    try:
        sequence_numbers = put(deployment, [{"n": n} for n in range(10)], partition_key="same")
        wait_for(lambda: len(read_invocations(record_log)) >= 2, what="a second batch in flight")
        os.killpg(runner.pid, signal.SIGKILL)  # the runner and its execution environments
        runner.wait()
        in_flight = read_invocations(record_log)[-1]["ids"]
        saved = json.loads(paths.checkpoints.read_text())
        committed = saved["committed"]
        assert list(committed.values()) == [read_invocations(record_log)[-2]["ids"][-1].split(":")[1]]
        assert list(saved["in_flight"].values()) == [in_flight[-1].split(":")[1]], "the batch's end was recorded"

        runner = start_runner()
        wait_for(
            lambda: set(delivered_ids(record_log)) >= {f"{in_flight[0].split(':')[0]}:{s}" for s in sequence_numbers},
            timeout_seconds=60,
            what="every record after the restart",
        )
        wait_for(
            lambda: sequence_numbers[-1] in json.loads(paths.checkpoints.read_text())["committed"].values(),
            what="the last batch committed",
        )
    finally:
        if runner.poll() is None:
            runner.send_signal(signal.SIGTERM)
            runner.wait(20)

    invocations = read_invocations(record_log)
    batches = [i["ids"] for i in invocations]
    assert batches.count(in_flight) == 2, "the in-flight batch is delivered again after the restart"
    flat = [event_id.split(":")[1] for event_id in delivered_ids(record_log)]
    deduplicated = list(dict.fromkeys(flat))
    assert deduplicated == sequence_numbers, "nothing skipped, order kept"
    assert list(json.loads(paths.checkpoints.read_text())["committed"]) == list(committed), "one shard, one checkpoint"
