"""Injected AWS-side faults (`local.emulator.injected_faults`): on the wire, then what they prove.

Part 1 shows each fault as a client sees it from a real emulator process: a lost response
after an applied write (HTTP 500, a closed connection, a read timeout), throttling before
anything is applied, targeting, configuration and counters.

Part 2 is the point: the real state, map and reduce handlers, with the SDK's own standard
retry mode, driven through several batches while responses of their writes are lost or
their calls throttled at high rates, end with aggregates equal to totals computed
independently. A harness retries a whole batch whenever a handler raises, as Lambda
does. A negative control (a plain ``ADD`` with no token and no marker, through the same
faults and the same SDK retries) over-counts, so the faults demonstrably bite. Every test
checks the emulator's counters, so none can pass with no fault injected.

SDK backoff delays are scaled down (`fast_sdk_backoff`) to keep the suite fast; which errors
the SDK retries, how many attempts it makes and its retry quota are untouched.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError
from botocore.retries.standard import ExponentialBackoff

from function_support import aws
from local.emulator.control import EmulatorError, EmulatorProcess, start_emulator
from local.emulator.injected_faults import (
    CANCELLED_TOKEN_KEPT,
    ENVIRONMENT_VARIABLE,
    LOST_RESPONSE,
    STATEMENT_COUNTER_SUFFIX,
    STATEMENT_ERRORS,
    STATEMENTS,
    THROTTLE,
    FaultInjector,
    RequestInfo,
    fault_report,
    injected,
    parse_config,
)
from local.runner.inprocess import (
    LambdaContextStub,
    Pipeline,
    expected_totals,
    trade_message,
)
from map_function import handler as map_handler
from state_function import handler as state_handler
from state_function import resends
from tests.environment import DUMMY_CREDENTIALS
from tests.local.emulator.fault_control import FaultControl

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import BatchStatementRequestTypeDef, TransactWriteItemTypeDef
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_s3 import S3Client

# A handler that raises mid-batch (the SDK gave up) flushes no metrics; Powertools warns.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

AwsClientFactory = Callable[[str], Any]
T = TypeVar("T")
RETRYING = Config(retries={"mode": "standard", "max_attempts": 8}, connect_timeout=5, read_timeout=10)
"""What the functions use (`function_support.aws.SDK_CONFIG`): the SDK's own retries."""


@pytest.fixture
def aws_environment(module_emulator: EmulatorProcess, monkeypatch: pytest.MonkeyPatch) -> str:
    """Overrides tests/conftest.py's: the `pipeline` fixture runs against this module's emulator."""
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", module_emulator.endpoint_url)
    return module_emulator.endpoint_url


@pytest.fixture(autouse=True)
def fast_sdk_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff of the standard retry mode 50x shorter (1 s → 20 ms base for throttles)."""
    defaults: dict[str, float] = vars(ExponentialBackoff)["_DEFAULT_BACKOFF_CONFIG"]
    per_service: dict[str, dict[str, float]] = vars(ExponentialBackoff)["_SERVICE_BACKOFF_CONFIG"]
    monkeypatch.setitem(defaults, "throttling_base_scale", 0.02)
    monkeypatch.setitem(defaults, "non_throttling_base_scale", 0.001)
    for service in ("dynamodb", "dynamodb-streams"):
        monkeypatch.setitem(per_service, service, {"non_throttling_base_scale": 0.001})


def new_table(dynamodb: DynamoDBClient, key: str = "pk", name: str | None = None) -> str:
    name = name or f"faults-{uuid.uuid4().hex[:12]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def item_exists(dynamodb: DynamoDBClient, table: str, key: str) -> bool:
    return "Item" in dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True)


def error_of(raised: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = raised.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture
def dynamodb(aws_client: AwsClientFactory) -> DynamoDBClient:
    """No retries: the test sees each response the emulator gives."""
    client: DynamoDBClient = aws_client("dynamodb")
    return client


def lost(service: str, *operations: str, percent: float = 100, **options: Any) -> dict[str, Any]:
    return {"kind": LOST_RESPONSE, "service": service, "operations": list(operations), "percent": percent, **options}


def throttle(service: str, *operations: str, percent: float = 100, **options: Any) -> dict[str, Any]:
    return {"kind": THROTTLE, "service": service, "operations": list(operations), "percent": percent, **options}


# ============================================================== part 1: on the wire


def test_lost_response_error_variant_applies_the_write_then_answers_500(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    emulator_faults.configure(lost("dynamodb", "PutItem", "UpdateItem", table=table))

    with pytest.raises(ClientError) as put:
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}})
    with pytest.raises(ClientError) as update:
        dynamodb.update_item(TableName=table, Key={"pk": {"S": "b"}}, UpdateExpression="SET x = :x",
                             ExpressionAttributeValues={":x": {"N": "1"}})  # fmt: skip

    assert error_of(put) == error_of(update) == ("InternalServerError", 500)
    assert item_exists(dynamodb, table, "a") and item_exists(dynamodb, table, "b"), "applied all the same"
    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "PutItem") == 1
    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "UpdateItem") == 1


def test_lost_response_close_variant_applies_the_write_then_drops_the_connection(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    emulator_faults.configure(lost("dynamodb", "PutItem", table=table, variant="close"))

    with pytest.raises(ConnectionClosedError):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}})

    assert item_exists(dynamodb, table, "a")
    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "PutItem") == 1


def test_lost_response_timeout_variant_holds_the_connection_past_the_read_timeout(
    emulator_endpoint: str, dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    impatient: DynamoDBClient = boto3.client(
        "dynamodb",
        endpoint_url=emulator_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}, read_timeout=0.3),
    )
    emulator_faults.configure(lost("dynamodb", "TransactWriteItems", table=table, variant="timeout", hold_seconds=1))

    with pytest.raises(ReadTimeoutError):
        impatient.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": {"pk": {"S": "a"}}}}])

    assert item_exists(dynamodb, table, "a")
    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "TransactWriteItems") == 1


def test_a_failed_write_is_not_lost_its_error_goes_through_uncounted(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}})
    emulator_faults.configure(lost("dynamodb", "PutItem", table=table))

    with pytest.raises(ClientError) as raised:
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")

    assert error_of(raised) == ("ConditionalCheckFailedException", 400)
    report = emulator_faults.report()
    assert report["total_injected"] == 0 and report["considered"][LOST_RESPONSE]["dynamodb:PutItem"] == 1


def test_min_injections_faults_the_first_requests_without_a_draw_and_a_write_not_applied_does_not_count(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    """A chaos site that sees a handful of requests is still exercised: the minimum is met first, then 0 %."""
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "taken"}})
    emulator_faults.configure(lost("dynamodb", "PutItem", table=table, percent=0, min_injections=2))

    with pytest.raises(ClientError) as refused:  # not applied: its reservation is given back
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "taken"}}, ConditionExpression="attribute_not_exists(pk)")
    answers = []
    for key in ("a", "b", "c"):
        try:
            dynamodb.put_item(TableName=table, Item={"pk": {"S": key}})
            answers.append("ok")
        except ClientError as error:
            answers.append(error.response["Error"]["Code"])

    assert error_of(refused) == ("ConditionalCheckFailedException", 400)
    assert answers == ["InternalServerError", "InternalServerError", "ok"]
    assert all(item_exists(dynamodb, table, key) for key in ("a", "b", "c"))
    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "PutItem") == 2
    with pytest.raises(ValueError, match="no greater than max_injections"):
        parse_config({"rules": [lost("dynamodb", "PutItem", min_injections=3, max_injections=2)]})


def new_bucket(aws_client: AwsClientFactory) -> str:
    bucket = f"faults-{uuid.uuid4().hex[:12]}"
    aws_client("s3").create_bucket(Bucket=bucket)
    return bucket


@pytest.mark.parametrize(
    ("variant", "raised"), [("error", ClientError), ("close", ConnectionClosedError), ("timeout", ReadTimeoutError)]
)
def test_lost_s3_put_object_response_applies_the_conditional_write_in_every_variant(
    aws_environment: str,
    aws_client: AwsClientFactory,
    emulator_faults: FaultControl,
    variant: str,
    raised: type[Exception],
) -> None:
    bucket = new_bucket(aws_client)
    once: S3Client = boto3.client("s3", config=Config(retries={"total_max_attempts": 1}, read_timeout=0.3))
    emulator_faults.configure(lost("s3", table=bucket, variant=variant, hold_seconds=1))  # default: PutObject

    with pytest.raises(raised) as failure:
        once.put_object(Bucket=bucket, Key="deltas/a.json", Body=b"{}", IfNoneMatch="*", Metadata={"claim": "7"})

    if isinstance(failure.value, ClientError):
        response = failure.value.response
        assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == ("InternalError", 500)
    written = aws_client("s3").head_object(Bucket=bucket, Key="deltas/a.json")
    assert written["Metadata"] == {"claim": "7"}, "applied, with its metadata, though the caller saw a failure"
    assert emulator_faults.injected(LOST_RESPONSE, "s3", "PutObject") == 1


def test_the_sdk_retry_of_a_conditional_put_whose_response_was_lost_gets_412(
    aws_environment: str, aws_client: AwsClientFactory, emulator_faults: FaultControl
) -> None:
    """The archive's case: the SDK resends the PUT it wrote, and S3 refuses the resend."""
    bucket = new_bucket(aws_client)
    retrying: S3Client = boto3.client("s3", config=RETRYING)
    created = aws_client("s3").put_object(Bucket=bucket, Key="metastore/registry.json", Body=b"1", IfNoneMatch="*")
    emulator_faults.configure(lost("s3", table=bucket, max_injections=2))

    with pytest.raises(ClientError) as create:
        retrying.put_object(Bucket=bucket, Key="deltas/a.json", Body=b"{}", IfNoneMatch="*")
    with pytest.raises(ClientError) as update:
        retrying.put_object(Bucket=bucket, Key="metastore/registry.json", Body=b"2", IfMatch=created["ETag"])

    assert error_of(create) == error_of(update) == ("PreconditionFailed", 412)
    assert create.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    s3 = aws_client("s3")
    assert s3.get_object(Bucket=bucket, Key="deltas/a.json")["Body"].read() == b"{}"
    assert s3.get_object(Bucket=bucket, Key="metastore/registry.json")["Body"].read() == b"2", "the update applied"
    assert emulator_faults.injected(LOST_RESPONSE, "s3", "PutObject") == 2


def test_s3_lost_responses_reach_only_put_object_on_the_targeted_keys(
    aws_client: AwsClientFactory, emulator_faults: FaultControl
) -> None:
    bucket, other_bucket = new_bucket(aws_client), new_bucket(aws_client)
    s3: S3Client = aws_client("s3")
    s3.put_object(Bucket=bucket, Key="deltas/source.json", Body=b"{}")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="metastore/parts")
    emulator_faults.configure(lost("s3", table=f"{bucket}/deltas/"))

    s3.put_object(Bucket=bucket, Key="metastore/registry.json", Body=b"{}", IfNoneMatch="*")  # other prefix
    s3.put_object(Bucket=other_bucket, Key="deltas/a.json", Body=b"{}")  # other bucket
    s3.copy_object(Bucket=bucket, Key="deltas/copy.json", CopySource={"Bucket": bucket, "Key": "deltas/source.json"})
    s3.put_object_tagging(Bucket=bucket, Key="deltas/source.json", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})
    s3.upload_part(Bucket=bucket, Key="metastore/parts", UploadId=upload["UploadId"], PartNumber=1, Body=b"x")
    s3.head_object(Bucket=bucket, Key="deltas/source.json")
    s3.create_bucket(Bucket=f"faults-{uuid.uuid4().hex[:12]}")
    assert emulator_faults.report()["total_injected"] == 0
    with pytest.raises(ClientError) as lost_put:
        s3.put_object(Bucket=bucket, Key="deltas/b.json", Body=b"{}")
    assert error_of(lost_put) == ("InternalError", 500)
    # Only that PUT was even considered: the copy, the tagging, the part and the other keys are not targets.
    assert emulator_faults.report()["considered"][LOST_RESPONSE] == {"s3:PutObject": 1}


@pytest.mark.parametrize(
    ("operation", "error", "expected"),
    [
        ("PutItem", None, "ProvisionedThroughputExceededException"),
        ("PutItem", "ThrottlingException", "ThrottlingException"),
        ("TransactWriteItems", "TransactionCanceledException", "TransactionCanceledException"),
        ("BatchWriteItem", None, "ProvisionedThroughputExceededException"),
    ],
)
def test_throttled_dynamodb_write_is_rejected_with_400_before_anything_is_applied(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl, operation: str, error: str | None, expected: str
) -> None:
    table = new_table(dynamodb)
    rule = throttle("dynamodb", operation, table=table)
    if error is not None:
        rule["error"] = error
    emulator_faults.configure(rule)
    calls: dict[str, Callable[[], object]] = {
        "PutItem": lambda: dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}}),
        "TransactWriteItems": lambda: dynamodb.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": {"pk": {"S": key}}}} for key in ("a", "b")]
        ),
        "BatchWriteItem": lambda: dynamodb.batch_write_item(
            RequestItems={table: [{"PutRequest": {"Item": {"pk": {"S": "a"}}}}]}
        ),
    }

    with pytest.raises(ClientError) as raised:
        calls[operation]()

    assert error_of(raised) == (expected, 400)
    if expected == "TransactionCanceledException":
        cancellation: dict[str, Any] = dict(raised.value.response)
        reasons = [reason["Code"] for reason in cancellation["CancellationReasons"]]
        assert reasons == ["ThrottlingError", "None"]
    assert not item_exists(dynamodb, table, "a")
    assert emulator_faults.injected(THROTTLE, "dynamodb", operation) == 1


def insert_statements(table: str, *keys: str) -> list[BatchStatementRequestTypeDef]:
    """One PartiQL INSERT per key, as the state function writes (the table quoted, values as parameters)."""
    return [{"Statement": f"INSERT INTO \"{table}\" VALUE {{'pk': ?}}", "Parameters": [{"S": key}]} for key in keys]


def test_partiql_writes_are_faulted_by_default_and_a_lost_batch_response_applied_every_statement(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    emulator_faults.configure(
        {"kind": LOST_RESPONSE, "service": "dynamodb", "percent": 100, "table": table}  # default operations
    )

    with pytest.raises(ClientError) as batch:
        dynamodb.batch_execute_statement(Statements=insert_statements(table, "a", "b", "c"))
    with pytest.raises(ClientError) as single:
        dynamodb.execute_statement(**insert_statements(table, "d")[0])

    assert error_of(batch) == error_of(single) == ("InternalServerError", 500)
    assert all(item_exists(dynamodb, table, key) for key in "abcd"), "every statement applied all the same"
    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "BatchExecuteStatement") == 1
    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "ExecuteStatement") == 1


def test_a_throttled_partiql_call_applies_no_statement_and_answers_an_error_its_operation_documents(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    """BatchExecuteStatement documents ThrottlingException, RequestLimitExceeded and InternalServerError
    (no ProvisionedThroughputExceededException); ExecuteStatement documents them all."""
    table, other = new_table(dynamodb), new_table(dynamodb)
    emulator_faults.configure(throttle("dynamodb", table=table))  # default operations

    codes = []
    for call in (
        lambda: dynamodb.batch_execute_statement(Statements=insert_statements(table, "a", "b")),
        lambda: dynamodb.execute_statement(**insert_statements(table, "c")[0]),
    ):
        with pytest.raises(ClientError) as raised:
            call()
        codes.append(error_of(raised))
    dynamodb.batch_execute_statement(Statements=insert_statements(other, "a"))  # another table: not targeted
    report = emulator_faults.clear()  # the reads below are not throttled

    assert codes == [("ThrottlingException", 400), ("ProvisionedThroughputExceededException", 400)]
    assert not any(item_exists(dynamodb, table, key) for key in "abc"), "nothing applied"
    assert item_exists(dynamodb, other, "a")
    assert injected(report, THROTTLE, "dynamodb", "BatchExecuteStatement") == 1
    assert injected(report, THROTTLE, "dynamodb", "ExecuteStatement") == 1
    emulator_faults.configure(throttle("dynamodb", "BatchExecuteStatement", error="RequestLimitExceeded"))
    with pytest.raises(ClientError) as limited:
        dynamodb.batch_execute_statement(Statements=insert_statements(table, "a"))
    assert error_of(limited) == ("RequestLimitExceeded", 400)


def statements_throttle(percent: float = 100, **options: Any) -> dict[str, Any]:
    """Single statements of a BatchExecuteStatement refused (`injected_faults.STATEMENTS`)."""
    return {"kind": THROTTLE, "service": "dynamodb", "percent": percent, "variant": STATEMENTS, **options}


STATEMENT_COUNTER = "BatchExecuteStatement" + STATEMENT_COUNTER_SUFFIX


def test_a_statements_throttle_refuses_the_drawn_statements_and_runs_the_others_answered_in_order(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k3"}})  # its INSERT fails on its own: DuplicateItem
    keys = [f"k{number}" for number in range(12)]
    rule = statements_throttle(percent=40, table=table)
    config = {"seed": 8, "rules": [rule]}
    emulator_faults.configure(rule, seed=8)
    request = RequestInfo("dynamodb", "BatchExecuteStatement", (table,), 0, (table,) * len(keys))
    expected = FaultInjector(parse_config(config)).decide(request)  # the emulator draws the same from the seed
    assert expected is not None and 0 < len(expected.statements) < len(keys) - 1 and 3 not in dict(expected.statements)

    responses = dynamodb.batch_execute_statement(Statements=insert_statements(table, *keys))["Responses"]

    refused = dict(expected.statements)
    assert [response.get("Error", {}).get("Code") for response in responses] == [
        refused.get(number, "DuplicateItem" if number == 3 else None) for number in range(len(keys))
    ], "one answer per statement, in order: the refused ones' codes, k3's own failure, successes"
    assert all(response["TableName"] == table for response in responses)
    assert set(refused.values()) <= set(STATEMENT_ERRORS)
    report = emulator_faults.clear()
    applied = [key for key in keys if item_exists(dynamodb, table, key)]
    assert applied == [key for number, key in enumerate(keys) if number not in refused], "exactly the others"
    assert injected(report, THROTTLE, "dynamodb", STATEMENT_COUNTER) == len(refused) == report["rules"][0]["injected"]
    assert injected(report, THROTTLE, "dynamodb", "BatchExecuteStatement") == 0, "the call itself answered 200"


def test_a_statements_throttle_refuses_only_statements_on_its_table_up_to_max_injections(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table, other = new_table(dynamodb), new_table(dynamodb)
    emulator_faults.configure(statements_throttle(table=table, error="TransactionConflict", max_injections=2))
    batch = [*insert_statements(table, "a"), *insert_statements(other, "a"), *insert_statements(table, "b", "c")]

    responses = dynamodb.batch_execute_statement(Statements=batch)["Responses"]
    again = dynamodb.batch_execute_statement(Statements=insert_statements(table, "d"))["Responses"]

    assert [(response["TableName"], response.get("Error", {}).get("Code")) for response in responses] == [
        (table, "TransactionConflict"),
        (other, None),
        (table, "TransactionConflict"),
        (table, None),
    ]
    assert "Error" not in again[0], "max_injections counts refused statements"
    assert [item_exists(dynamodb, table, key) for key in "abcd"] == [False, False, True, True]
    assert item_exists(dynamodb, other, "a")
    assert emulator_faults.injected(THROTTLE, "dynamodb", STATEMENT_COUNTER) == 2


def test_a_statements_lost_response_applies_the_drawn_statements_and_answers_them_internal_server_error(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k1"}})  # its INSERT fails on its own: DuplicateItem
    emulator_faults.configure({"kind": LOST_RESPONSE, "service": "dynamodb", "percent": 100,
                               "variant": STATEMENTS, "table": table})  # fmt: skip
    keys = [f"k{number}" for number in range(5)]

    responses = dynamodb.batch_execute_statement(Statements=insert_statements(table, *keys))["Responses"]

    codes = [response["Error"]["Code"] for response in responses]
    assert codes == ["InternalServerError", "DuplicateItem", *["InternalServerError"] * 3], "a failure keeps its own"
    report = emulator_faults.clear()
    assert all(item_exists(dynamodb, table, key) for key in keys), "applied, though answered with an error"
    assert injected(report, LOST_RESPONSE, "dynamodb", STATEMENT_COUNTER) == report["rules"][0]["injected"] == 4


def test_a_batch_refused_whole_refuses_no_statement_and_counts_none(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    emulator_faults.configure(statements_throttle(table=table, max_injections=2))

    with pytest.raises(ClientError) as duplicates:  # two statements on one item: the batch is invalid
        dynamodb.batch_execute_statement(Statements=insert_statements(table, "a", "a"))
    malformed: BatchStatementRequestTypeDef = {"Statement": f"INSERT INTO \"{table}\" VALUE {{'pk': ?}}"}
    responses = dynamodb.batch_execute_statement(Statements=[malformed, *insert_statements(table, "c")])["Responses"]

    assert error_of(duplicates)[0] == "ValidationException"
    codes = [response["Error"]["Code"] for response in responses]
    assert set(codes) <= set(STATEMENT_ERRORS), "the released reservations refuse these (unvalidated) statements"
    report = emulator_faults.report()
    assert injected(report, THROTTLE, "dynamodb", STATEMENT_COUNTER) == report["rules"][0]["injected"] == 2


def test_throttled_reads_on_dynamodb_streams_and_kinesis(
    aws_client: AwsClientFactory, dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    dynamodb.update_table(TableName=table, StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"})
    kinesis: KinesisClient = aws_client("kinesis")
    stream = f"faults-{uuid.uuid4().hex[:12]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    emulator_faults.configure(
        throttle("dynamodb", "GetItem", "Query", "Scan", table=table),
        throttle("dynamodbstreams", table=table),  # default operations: GetRecords, GetShardIterator
        throttle("kinesis", table=stream),  # default: GetRecords, GetShardIterator, PutRecords, PutRecord
    )
    streams = aws_client("dynamodbstreams")
    stream_arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"][0]["ShardId"]
    kinesis_shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]

    expected: dict[str, Callable[[], object]] = {
        "dynamodb GetItem": lambda: dynamodb.get_item(TableName=table, Key={"pk": {"S": "a"}}),
        "dynamodb Scan": lambda: dynamodb.scan(TableName=table),
        "streams GetShardIterator": lambda: streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        ),
        "kinesis PutRecords": lambda: kinesis.put_records(
            StreamName=stream, Records=[{"Data": b"x", "PartitionKey": "k"}]
        ),
        "kinesis GetShardIterator": lambda: kinesis.get_shard_iterator(
            StreamName=stream, ShardId=kinesis_shard, ShardIteratorType="TRIM_HORIZON"
        ),
    }
    codes: dict[str, str] = {}
    for name, call in expected.items():
        with pytest.raises(ClientError) as raised:
            call()
        codes[name] = error_of(raised)[0]
    assert codes == {
        "dynamodb GetItem": "ProvisionedThroughputExceededException",
        "dynamodb Scan": "ProvisionedThroughputExceededException",
        "streams GetShardIterator": "ThrottlingException",
        "kinesis PutRecords": "ProvisionedThroughputExceededException",
        "kinesis GetShardIterator": "ProvisionedThroughputExceededException",
    }

    # GetRecords, whose iterators were taken before the throttling started.
    emulator_faults.clear()
    stream_iterator = streams.get_shard_iterator(StreamArn=stream_arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    kinesis_iterator = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=kinesis_shard, ShardIteratorType="TRIM_HORIZON"
    )
    emulator_faults.configure(throttle("dynamodbstreams", table=table), throttle("kinesis", table=stream))
    with pytest.raises(ClientError) as stream_read:
        streams.get_records(ShardIterator=stream_iterator["ShardIterator"])
    with pytest.raises(ClientError) as kinesis_read:
        kinesis.get_records(ShardIterator=kinesis_iterator["ShardIterator"])
    assert error_of(stream_read) == ("ThrottlingException", 400)
    assert error_of(kinesis_read) == ("ProvisionedThroughputExceededException", 400)
    assert emulator_faults.injected(THROTTLE, "dynamodbstreams", "GetRecords") == 1
    assert emulator_faults.injected(THROTTLE, "kinesis", "GetRecords") == 1


def test_the_sdk_standard_retry_mode_retries_each_fault_and_a_lost_write_is_applied_twice(
    emulator_endpoint: str, dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    retrying: DynamoDBClient = boto3.client(
        "dynamodb",
        endpoint_url=emulator_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=RETRYING,
    )
    emulator_faults.configure(
        throttle("dynamodb", "GetItem", table=table, max_injections=2),
        lost("dynamodb", "UpdateItem", table=table, max_injections=1),
        lost("dynamodb", "UpdateItem", table=table, max_injections=1, variant="close"),
    )

    read = retrying.get_item(TableName=table, Key={"pk": {"S": "a"}})
    add = retrying.update_item(
        TableName=table,
        Key={"pk": {"S": "a"}},
        UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="UPDATED_NEW",
    )

    assert read["ResponseMetadata"]["RetryAttempts"] == 2
    assert add["ResponseMetadata"]["RetryAttempts"] == 2
    assert add["Attributes"]["n"] == {"N": "3"}, "one ADD call, applied three times: retries are not idempotent"
    report = emulator_faults.report()
    assert [rule["injected"] for rule in report["rules"]] == [2, 1, 1]
    assert report["total_injected"] == 4


def kept_token(percent: float = 100, **options: Any) -> dict[str, Any]:
    return {"kind": CANCELLED_TOKEN_KEPT, "service": "dynamodb", "percent": percent, **options}


def put_transaction(table: str, key: str) -> list[TransactWriteItemTypeDef]:
    """One Put of `key`, only if it is absent."""
    return [
        {"Put": {"TableName": table, "Item": {"pk": {"S": key}}, "ConditionExpression": "attribute_not_exists(pk)"}}
    ]


def test_a_kept_cancelled_token_refuses_other_parameters_and_runs_the_same_ones(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}})
    emulator_faults.configure(kept_token())
    with pytest.raises(ClientError) as cancelled:
        dynamodb.transact_write_items(TransactItems=put_transaction(table, "a"), ClientRequestToken="t-1")
    assert error_of(cancelled)[0] == "TransactionCanceledException"

    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(TransactItems=put_transaction(table, "b"), ClientRequestToken="t-1")
    assert error_of(refused) == ("IdempotentParameterMismatchException", 400)
    assert not item_exists(dynamodb, table, "b"), "nothing applied"

    dynamodb.delete_item(TableName=table, Key={"pk": {"S": "a"}})
    dynamodb.transact_write_items(TransactItems=put_transaction(table, "a"), ClientRequestToken="t-1")
    assert item_exists(dynamodb, table, "a"), "the identical request is executed"
    assert emulator_faults.injected(CANCELLED_TOKEN_KEPT, "dynamodb", "TransactWriteItems") == 1


def test_a_throttled_transaction_keeps_its_token_too(dynamodb: DynamoDBClient, emulator_faults: FaultControl) -> None:
    table = new_table(dynamodb)
    emulator_faults.configure(
        throttle("dynamodb", "TransactWriteItems", error="TransactionCanceledException", max_injections=1), kept_token()
    )
    with pytest.raises(ClientError) as throttled:
        dynamodb.transact_write_items(TransactItems=put_transaction(table, "a"), ClientRequestToken="t-2")
    assert error_of(throttled)[0] == "TransactionCanceledException"
    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(TransactItems=put_transaction(table, "b"), ClientRequestToken="t-2")
    assert error_of(refused)[0] == "IdempotentParameterMismatchException"
    dynamodb.transact_write_items(TransactItems=put_transaction(table, "a"), ClientRequestToken="t-2")
    assert item_exists(dynamodb, table, "a") and not item_exists(dynamodb, table, "b")


def test_without_the_fault_a_cancelled_token_is_free_again(
    dynamodb: DynamoDBClient, emulator_faults: FaultControl
) -> None:
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}})
    emulator_faults.configure(throttle("dynamodb", "GetItem", percent=0))  # faults on, no kept token
    with pytest.raises(ClientError):
        dynamodb.transact_write_items(TransactItems=put_transaction(table, "a"), ClientRequestToken="t-3")
    dynamodb.transact_write_items(TransactItems=put_transaction(table, "b"), ClientRequestToken="t-3")
    assert item_exists(dynamodb, table, "b")


def test_faults_reach_only_targeted_services_operations_and_tables(
    aws_client: AwsClientFactory, dynamodb: DynamoDBClient, emulator_faults: FaultControl, emulator_endpoint: str
) -> None:
    targeted, other = new_table(dynamodb), new_table(dynamodb)
    emulator_faults.configure(throttle("dynamodb", "*", table=targeted), throttle("dynamodb"), lost("kinesis"))

    dynamodb.describe_table(TableName=other)  # control plane: not in the default operations
    new_table(dynamodb)
    aws_client("s3").create_bucket(Bucket=f"faults-{uuid.uuid4().hex[:12]}")
    aws_client("ssm").put_parameter(Name=f"/faults/{uuid.uuid4().hex}", Value="v", Type="String")
    aws_client("sqs").create_queue(QueueName=f"faults-{uuid.uuid4().hex[:12]}")
    assert fault_report(emulator_endpoint)["rules"], "the control endpoint itself is never faulted"
    with pytest.raises(ClientError):
        dynamodb.describe_table(TableName=targeted)  # "*": every operation on the named table
    assert emulator_faults.report()["total_injected"] == 1

    # Other services only when a rule names their operations (JSON and query protocols).
    emulator_faults.configure(
        throttle("ssm", "PutParameter", error="ThrottlingException"),
        throttle("cloudformation", "ListStacks", error="ThrottlingException"),
    )
    with pytest.raises(ClientError) as ssm:
        aws_client("ssm").put_parameter(Name=f"/faults/{uuid.uuid4().hex}", Value="v", Type="String")
    with pytest.raises(ClientError) as cloudformation:
        aws_client("cloudformation").list_stacks()
    assert error_of(ssm) == error_of(cloudformation) == ("ThrottlingException", 400)
    aws_client("ssm").get_parameters_by_path(Path="/faults")
    assert emulator_faults.report()["total_injected"] == 2


def test_control_endpoint_validates_reports_and_clears(emulator_endpoint: str, emulator_faults: FaultControl) -> None:
    invalid: list[dict[str, Any]] = [
        {"rules": [{"kind": "explode", "service": "dynamodb", "percent": 1}]},
        {"rules": [{"kind": "throttle", "service": "dynamodb", "percent": 101}]},
        {"rules": [{"kind": "throttle", "service": "s3", "percent": 5}]},  # other services: name operations
        {"rules": [{"kind": "lost_response", "service": "dynamodb", "percent": 5, "variant": "maybe"}]},
        {"rules": [{"kind": "throttle", "service": "dynamodb", "percent": 5, "error": "Nope"}]},
        {"rules": [{"kind": "throttle", "service": "dynamodb", "percent": 5, "tabel": "x"}]},
        {"seed": "x"},
    ]
    for config in invalid:
        request = urllib_request(emulator_endpoint, "PUT", config)
        assert request[0] == 400, config
    report = emulator_faults.configure(lost("dynamodb", "PutItem", percent=12.5, table="t"), seed=3)
    assert report["seed"] == 3 and report["total_injected"] == 0
    assert report["rules"][0] | {"injected": 0} == {
        "kind": "lost_response",
        "service": "dynamodb",
        "percent": 12.5,
        "operations": ["PutItem"],
        "table": "t",
        "variant": "error",
        "hold_seconds": 11.0,
        "error": None,
        "max_injections": None,
        "min_injections": 0,
        "injected": 0,
    }
    assert emulator_faults.report()["rules"] == report["rules"]
    assert emulator_faults.clear()["rules"] == report["rules"], "DELETE returns the last report"
    assert emulator_faults.report()["rules"] == []
    assert urllib_request(emulator_endpoint, "POST", {})[0] == 405


def urllib_request(endpoint_url: str, method: str, body: object) -> tuple[int, Any]:
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    request = urllib.request.Request(endpoint_url + "/_compat/faults", data=json.dumps(body).encode(), method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_same_seed_makes_the_same_decisions() -> None:
    config = {"seed": 11, "rules": [{"kind": "throttle", "service": "dynamodb", "percent": 30}]}
    request = RequestInfo("dynamodb", "PutItem")

    def decisions(injector: FaultInjector) -> list[bool]:
        return [injector.decide(request) is not None for _ in range(300)]

    first = decisions(FaultInjector(parse_config(config)))
    assert first == decisions(FaultInjector(parse_config(config)))
    assert first != decisions(FaultInjector(parse_config(config | {"seed": 12})))
    assert 60 <= sum(first) <= 120


def test_statement_refusals_follow_the_seed_and_a_batch_refusing_none_goes_to_the_next_rule() -> None:
    rules = [statements_throttle(percent=30), throttle("dynamodb", "BatchExecuteStatement", percent=100)]
    request = RequestInfo("dynamodb", "BatchExecuteStatement", ("T",), 0, ("T",) * 25)

    def decisions(seed: int) -> list[tuple[tuple[int, str], ...] | None]:
        injector = FaultInjector(parse_config({"seed": seed, "rules": rules}))
        return [None if (fault := injector.decide(request)) is None else fault.statements for _ in range(40)]

    first = decisions(3)
    assert first == decisions(3) and first != decisions(4)
    refused = [len(refusals) for refusals in first if refusals]
    assert 5 <= sum(refused) / len(refused) <= 10, "about 30 % of 25 statements"
    assert {code for refusals in first if refusals for _, code in refusals} == set(STATEMENT_ERRORS)
    whole = FaultInjector(parse_config({"rules": [statements_throttle(percent=0), rules[1]]})).decide(request)
    assert whole is not None and whole.statements == () and whole.index == 1, "no statement refused: the call is"


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"kind": "latency"}, "variant of throttles and lost responses"),
        ({"kind": LOST_RESPONSE, "operations": ["PutItem"]}, "BatchExecuteStatement only"),
        ({"operations": ["PutItem"]}, "BatchExecuteStatement only"),
        ({"service": "kinesis"}, "BatchExecuteStatement only"),
        ({"error": "ThrottlingException"}, "error must be one of"),
    ],
)
def test_a_statements_throttle_names_batch_statements_and_a_statement_error(rule: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_config({"rules": [statements_throttle() | rule]})
    assert parse_config({"rules": [statements_throttle()]}).rules[0].operations == ("BatchExecuteStatement",)


@pytest.mark.emulator
def test_the_emulator_reads_its_faults_from_the_environment_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"seed": 5, "rules": [lost("kinesis", "PutRecords", percent=7)]}
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, json.dumps(config))
    emulator = start_emulator(tmp_path / "emulator.log")
    try:
        report = fault_report(emulator.endpoint_url)
    finally:
        emulator.stop()
    assert report["seed"] == 5 and report["rules"][0]["percent"] == 7 and report["rules"][0]["service"] == "kinesis"

    monkeypatch.setenv(ENVIRONMENT_VARIABLE, '{"rules": [{"kind": "lost_response"}]}')
    with pytest.raises(EmulatorError, match="exited during start-up"):
        start_emulator(tmp_path / "invalid.log", startup_timeout_seconds=20)
    assert "service must be" in (tmp_path / "invalid.log").read_text()


# =================================================== part 2: exactly once, proven

PATHS = [
    (risk, desk, region) for risk in ("Delta", "Vega") for desk in ("FXSpot", "Rates") for region in ("AMER", "EMEA")
]
INVALID = [b"not json", b'{"TradeID": "bad", "Version": "1"}', b"\xff\xfe"]


@dataclass
class Workload:
    """Batches of messages (duplicates, out of order, moves, invalid) and each trade's final state."""

    batches: list[list[bytes]]
    final: dict[str, tuple[Decimal, tuple[str, ...]]]

    def expected(self) -> dict[str, tuple[Decimal, int]]:
        return expected_totals(self.final)


def workload(seed: int, trades: int = 30, batch_size: int = 16) -> Workload:
    rng = random.Random(seed)
    messages: list[tuple[str, int, str, tuple[str, ...]]] = []
    for index in range(trades):
        trade_id = f"trade-{seed}-{index}"
        versions = [
            (trade_id, version, f"{rng.randint(-(10**6), 10**6)}.{rng.randint(0, 99):02d}", rng.choice(PATHS))
            for version in range(rng.randint(1, 3))
        ]
        messages.extend(versions)
        messages.append(rng.choice(versions))  # a duplicate
    rng.shuffle(messages)  # out of order
    final: dict[str, tuple[int, Decimal, tuple[str, ...]]] = {}
    for trade_id, version, value, path in messages:
        if trade_id not in final or version > final[trade_id][0]:
            final[trade_id] = (version, Decimal(value), path)
    payloads = [trade_message(t, v, value, path) for t, v, value, path in messages]
    for number, invalid in enumerate(INVALID):
        payloads.insert((number + 1) * len(payloads) // (len(INVALID) + 1), invalid)
    batches = [payloads[start : start + batch_size] for start in range(0, len(payloads), batch_size)]
    return Workload(batches, {t: (value, path) for t, (_, value, path) in final.items()})


class Harness:
    """Drives the handlers as Lambda's event source mappings do: a batch that raises is retried whole.

    The handlers raise when the SDK gives up (its attempts or retry quota exhausted, or a
    TransactionCanceledException for throttling, which the SDK does not retry); Lambda then
    retries the identical batch, and so does `until_success`.
    """

    def __init__(self, tables: Pipeline) -> None:
        self.pipeline = tables
        tables.dynamodb = boto3.client("dynamodb", config=RETRYING)  # the test's own reads retry too
        tables.streams = boto3.client("dynamodbstreams", config=RETRYING)
        self.batch_retries = 0
        self.state_changes = 0

    def until_success(self, call: Callable[[], T], attempts: int = 50) -> T:
        for attempt in range(attempts):
            try:
                return call()
            except Exception:
                if attempt == attempts - 1:
                    raise
                self.batch_retries += 1
        raise AssertionError("unreachable")

    def run_batch(self, payloads: Sequence[bytes]) -> list[dict[str, Any]]:
        """state → map → reduce for one Kinesis batch; returns the delta stream records reduced."""
        event = self.pipeline.kinesis_event(payloads)  # built once: a retry sees the identical records
        self.until_success(lambda: state_handler.lambda_handler(event, LambdaContextStub()))
        changes = self.until_success(lambda: self.pipeline.new_stream_records("state"))
        self.state_changes += len(changes)
        if changes:
            self.until_success(lambda: self.pipeline.run_map(changes))
        deltas = self.until_success(lambda: self.pipeline.new_stream_records("delta"))
        if deltas:
            self.until_success(lambda: self.pipeline.run_reduce(deltas))
        return deltas

    def aggregates(self) -> dict[str, tuple[Decimal, int]]:
        return self.until_success(self.pipeline.aggregates)

    def messages_applied(self) -> int:
        return int(self.until_success(self.pipeline.stats)["MessagesApplied"])


def table_suffix(tables: Pipeline) -> str:
    """What every table of this pipeline's names contains: fault rules target only them."""
    return tables.names["state"].removeprefix("state-")


WRITE_SITES = [("BatchExecuteStatement", "state"), ("PutItem", "map"), ("TransactWriteItems", "reduce")]
WRITES = ("BatchExecuteStatement", "PutItem", "TransactWriteItems")
"""Every write operation: state statements, map and quarantine puts, reduce transaction."""


def without_emptied_nodes(aggregates: dict[str, tuple[Decimal, int]]) -> dict[str, tuple[Decimal, int]]:
    """Nodes every trade has left hold (0, 0): not in independently computed totals."""
    return {key: total for key, total in aggregates.items() if total != (Decimal(0), 0)}


def assert_exact(harness: Harness, work: Workload) -> None:
    assert without_emptied_nodes(harness.aggregates()) == work.expected()
    assert harness.messages_applied() == harness.state_changes, "every state change reduced exactly once"


@pytest.mark.parametrize("variant", ["error", "close"])
def test_lost_responses_at_every_write_site_leave_the_aggregates_exact(
    pipeline: Pipeline, emulator_faults: FaultControl, variant: str
) -> None:
    """state: statements applied + lost → SDK retry → DuplicateItem, then the UPDATE's condition fails
    with the item its own event wrote → counted as written, nothing lost;
    map: put applied + lost → retry → ConditionalCheckFailed → already written;
    reduce: transaction applied + lost → SDK retry, same token and parameters → not applied again;
    quarantine: INSERT applied + lost → retry → DuplicateItem → already there."""
    harness = Harness(pipeline)
    suffix = table_suffix(pipeline)
    emulator_faults.configure(
        *[lost("dynamodb", operation, table=suffix, variant=variant, max_injections=1) for operation in WRITES],
        lost("dynamodb", percent=45, table=suffix, variant=variant),
        seed=1,
    )
    work = workload(seed=1)

    for batch in work.batches:
        harness.run_batch(batch)

    report = emulator_faults.clear()
    assert_exact(harness, work)
    for operation in WRITES:
        assert injected_count(report, LOST_RESPONSE, operation) > 0, f"no lost {operation} response"
    assert report["rules"][-1]["injected"] >= 20, "lost at the high rate too, not only the first of each"


def test_responses_lost_by_read_timeouts_leave_the_aggregates_exact(
    pipeline: Pipeline, emulator_faults: FaultControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, with the connection held past the functions' SDK read timeout (shortened here)."""
    monkeypatch.setattr(aws, "SDK_CONFIG", RETRYING.merge(Config(read_timeout=0.4)))
    aws.dynamodb_client.cache_clear()
    aws.state_update_client.cache_clear()
    aws.prevalidated_write_client.cache_clear()
    harness = Harness(pipeline)
    timeouts = [
        lost("dynamodb", operation, table=table_suffix(pipeline), variant="timeout", hold_seconds=0.6, max_injections=2)
        for operation, _ in WRITE_SITES
    ]
    emulator_faults.configure(*timeouts)
    work = workload(seed=2, trades=12)

    for batch in work.batches:
        harness.run_batch(batch)

    report = emulator_faults.clear()
    assert_exact(harness, work)
    assert [rule["injected"] for rule in report["rules"]] == [2, 2, 2]


def test_throttling_on_reads_and_writes_at_high_rates_leaves_the_aggregates_exact(
    pipeline: Pipeline, emulator_faults: FaultControl
) -> None:
    harness = Harness(pipeline)
    suffix = table_suffix(pipeline)
    emulator_faults.configure(
        *[throttle("dynamodb", operation, table=suffix, max_injections=1) for operation in (*WRITES, "Scan")],
        throttle("dynamodbstreams", "GetRecords", table=suffix, max_injections=1),
        throttle("dynamodbstreams", "GetShardIterator", table=suffix, max_injections=1),
        throttle(
            "dynamodb", "TransactWriteItems", table=suffix, error="TransactionCanceledException", max_injections=1
        ),
        throttle("dynamodb", "TransactWriteItems", percent=30, table=suffix, error="TransactionCanceledException"),
        throttle("dynamodb", "BatchExecuteStatement", "PutItem", percent=40, table=suffix),
        throttle("dynamodb", "Scan", "TransactWriteItems", percent=40, table=suffix, error="ThrottlingException"),
        throttle("dynamodbstreams", percent=40, table=suffix),
        seed=4,
    )
    work = workload(seed=3)

    for batch in work.batches:
        harness.run_batch(batch)

    assert_exact(harness, work)  # the final reads (Scan) are throttled too
    report = emulator_faults.clear()
    once = len(WRITES) + 4  # the writes and Scan, the two stream reads, the cancelled transaction
    certain, at_rates = report["rules"][:once], report["rules"][once:]
    assert all(rule["injected"] == 1 for rule in certain), "each read and write site throttled at least once"
    assert all(rule["injected"] > 1 for rule in at_rates), [rule["injected"] for rule in at_rates]


@pytest.mark.parametrize("kind", [THROTTLE, LOST_RESPONSE])
def test_state_statements_refused_or_lost_one_by_one_and_whole_batches_throttled_or_lost_leave_aggregates_exact(
    pipeline: Pipeline, emulator_faults: FaultControl, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The partial batches AWS documents: single statements refused with every throttling-type code
    while the rest of the call is applied, at a rate that outlasts the state function's resends now
    and then (the batch fails, and is retried whole); or single statements applied and answered with
    an InternalServerError (resent, their own write recognised); and whole calls throttled or their
    responses lost."""
    monkeypatch.setattr(resends, "FIRST_RESEND_PAUSE_SECONDS", 0.002)
    harness = Harness(pipeline)
    suffix = table_suffix(pipeline)
    emulator_faults.configure(
        {"kind": kind, "service": "dynamodb", "percent": 40, "variant": STATEMENTS, "table": suffix},
        throttle("dynamodb", "BatchExecuteStatement", percent=20, table=suffix),
        lost("dynamodb", "BatchExecuteStatement", percent=30, table=suffix),
        seed=9,
    )
    work = workload(seed=9)

    for batch in work.batches:
        harness.run_batch(batch)

    report = emulator_faults.clear()
    assert_exact(harness, work)
    assert injected_count(report, kind, STATEMENT_COUNTER) >= 10, report["injected"]
    assert injected_count(report, THROTTLE, "BatchExecuteStatement") > 0
    assert injected_count(report, LOST_RESPONSE, "BatchExecuteStatement") > 0


def test_kept_tokens_of_cancelled_transactions_leave_the_aggregates_exact(
    pipeline: Pipeline, emulator_faults: FaultControl
) -> None:
    """Throttled reduce transactions whose tokens stay taken: every retry re-sends the identical
    request, so the token is never seen with other parameters and nothing is lost. (Before
    transaction parameters were a pure function of their units, a retry carried a new
    `LastUpdated`, got IdempotentParameterMismatchException, took it for "committed" and lost
    the units: this test, run against that code, lost the totals of most batches.)"""
    harness = Harness(pipeline)
    suffix = table_suffix(pipeline)
    cancel: dict[str, Any] = {"table": suffix, "error": "TransactionCanceledException"}
    emulator_faults.configure(
        throttle("dynamodb", "TransactWriteItems", max_injections=3, **cancel),
        throttle("dynamodb", "TransactWriteItems", percent=50, **cancel),
        kept_token(table=suffix),
        seed=5,
    )
    work = workload(seed=5)

    for batch in work.batches:
        harness.run_batch(batch)

    report = emulator_faults.clear()
    assert_exact(harness, work)
    assert injected_count(report, CANCELLED_TOKEN_KEPT, "TransactWriteItems") >= 3, report["injected"]


def test_lost_put_records_responses_duplicate_kinesis_records_and_the_pipeline_absorbs_them(
    pipeline: Pipeline, emulator_faults: FaultControl
) -> None:
    """A producer whose PutRecords response is lost resends: the stream holds duplicates."""
    harness = Harness(pipeline)
    kinesis: KinesisClient = boto3.client("kinesis", config=RETRYING)
    stream = f"trades-{table_suffix(pipeline)}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    emulator_faults.configure(
        lost("kinesis", "PutRecords", table=stream, max_injections=1),
        lost("kinesis", "PutRecords", percent=50, table=stream),
        seed=4,
    )
    work = workload(seed=4)

    sent = 0
    for batch in work.batches:
        records = [{"Data": payload, "PartitionKey": str(number)} for number, payload in enumerate(batch)]
        harness.until_success(lambda records=records: kinesis.put_records(StreamName=stream, Records=records))  # type: ignore[misc]
        sent += len(records)
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    received = [record["Data"] for record in kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"]]
    report = emulator_faults.clear()

    assert len(received) > sent, "lost responses made the producer's SDK resend"
    assert injected_count(report, LOST_RESPONSE, "PutRecords", service="kinesis") > 0
    for start in range(0, len(received), 16):
        harness.run_batch(received[start : start + 16])
    assert_exact(harness, work)


def test_negative_control_a_plain_add_over_counts_under_the_same_lost_responses(
    pipeline: Pipeline, emulator_faults: FaultControl
) -> None:
    """An unsafe reduce (ADD with no token, no marker) fed the same deltas through the same faults."""
    harness = Harness(pipeline)
    unsafe_table = new_table(pipeline.dynamodb, key="AggregateKey", name=f"unsafe-{table_suffix(pipeline)}")
    unsafe_client: DynamoDBClient = boto3.client("dynamodb", config=RETRYING)
    emulator_faults.configure(lost("dynamodb", percent=45, table=table_suffix(pipeline)), seed=5)
    work = workload(seed=5)

    for batch in work.batches:
        deltas = harness.run_batch(batch)
        harness.until_success(lambda deltas=deltas: unsafe_reduce(unsafe_client, unsafe_table, deltas))  # type: ignore[misc]

    report = emulator_faults.clear()
    assert_exact(harness, work)
    unsafe = read_aggregates(unsafe_client, unsafe_table)
    assert unsafe != work.expected(), "the faults did not bite: the control must over-count"
    assert sum(count for _, count in unsafe.values()) > sum(count for _, count in work.expected().values())
    assert injected_count(report, LOST_RESPONSE, "UpdateItem") > 0


def test_control_throttling_alone_never_makes_the_plain_add_over_count(
    pipeline: Pipeline, emulator_faults: FaultControl
) -> None:
    """Contrast: throttling rejects before applying, so even the unsafe ADD stays exact under it."""
    harness = Harness(pipeline)
    unsafe_table = new_table(pipeline.dynamodb, key="AggregateKey", name=f"unsafe-{table_suffix(pipeline)}")
    unsafe_client: DynamoDBClient = boto3.client("dynamodb", config=RETRYING)
    emulator_faults.configure(throttle("dynamodb", "UpdateItem", percent=40, table=unsafe_table), seed=6)
    work = workload(seed=6, trades=15)

    for batch in work.batches:
        deltas = harness.run_batch(batch)
        harness.until_success(lambda deltas=deltas: unsafe_reduce(unsafe_client, unsafe_table, deltas))  # type: ignore[misc]

    report = emulator_faults.clear()
    assert read_aggregates(unsafe_client, unsafe_table) == work.expected()
    assert_exact(harness, work)
    assert injected_count(report, THROTTLE, "UpdateItem") > 0


def unsafe_reduce(client: DynamoDBClient, table: str, delta_records: Sequence[dict[str, Any]]) -> None:
    """Add each node delta with a plain ``ADD``: retried, it adds again."""
    for record in delta_records:
        for key, node in record["dynamodb"]["NewImage"]["Deltas"]["M"].items():
            client.update_item(
                TableName=table,
                Key={"AggregateKey": {"S": key}},
                UpdateExpression="ADD #value :value, #count :count",
                ExpressionAttributeNames={"#value": "Value", "#count": "TradeCount"},
                ExpressionAttributeValues={":value": node["M"]["Value"], ":count": node["M"]["TradeCount"]},
            )


def read_aggregates(client: DynamoDBClient, table: str) -> dict[str, tuple[Decimal, int]]:
    items = [item for page in client.get_paginator("scan").paginate(TableName=table) for item in page["Items"]]
    return without_emptied_nodes(
        {item["AggregateKey"]["S"]: (Decimal(item["Value"]["N"]), int(item["TradeCount"]["N"])) for item in items}
    )


def injected_count(report: dict[str, Any], kind: str, operation: str, service: str = "dynamodb") -> int:
    return injected(report, kind, service, operation)


# ================ found by the faults: a write whose response was lost is still this handler's write


class MisreportedWrite(AssertionError):
    """A handler reported its own write, whose response was lost, as someone else's."""


def test_state_reports_its_write_as_written_when_the_response_was_lost(
    pipeline: Pipeline, emulator_faults: FaultControl
) -> None:
    emulator_faults.configure(lost("dynamodb", "BatchExecuteStatement", table=table_suffix(pipeline), max_injections=1))
    event = pipeline.kinesis_event([trade_message("a", 1, "10")])

    summary = state_handler.lambda_handler(event, LambdaContextStub())

    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "BatchExecuteStatement") == 1
    assert len(pipeline.new_stream_records("state")) == 1, "written once"
    if (summary["written"], summary["duplicate_or_stale"]) != (1, 0):
        raise MisreportedWrite(f"the one write is reported as {summary}")


def test_map_reports_its_delta_as_written_when_the_response_was_lost(
    pipeline: Pipeline, emulator_faults: FaultControl
) -> None:
    pipeline.run_state([trade_message("a", 1, "10")])
    changes = pipeline.new_stream_records("state")
    emulator_faults.configure(lost("dynamodb", "PutItem", table=table_suffix(pipeline), max_injections=1))

    outcome = map_handler.map_event(pipeline.map_event(changes), "request-1")

    assert emulator_faults.injected(LOST_RESPONSE, "dynamodb", "PutItem") == 1
    assert len(pipeline.new_stream_records("delta")) == 1, "written once"
    if (outcome.items_written, outcome.records_written, outcome.lost_races) != (1, 1, 0):
        raise MisreportedWrite(f"the item it wrote is reported as {outcome}")
