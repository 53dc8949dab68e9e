"""Each moto correction in `local.emulator.moto_compat`, proven against a real emulator over HTTP.

Every test name states the AWS behaviour restored. Tables, tokens and streams are unique
per test, so the tests share one emulator (per module) without seeing each other.
"""

from __future__ import annotations

import base64
import datetime
import io
import json
import threading
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb import models as moto_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.kinesis.models import KinesisBackend

from benchmarks.emulator_transactions import scratch_table
from local.emulator import moto_compat
from local.emulator.control import advance_clock, transaction_figures

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.literals import ScalarAttributeTypeType
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_kinesis import KinesisClient

AwsClientFactory = Callable[[str], Any]


def create_table(
    dynamodb: DynamoDBClient, stream_view_type: str | None = None, key_type: ScalarAttributeTypeType = "S"
) -> str:
    """A new table keyed by ``pk`` (of `key_type`), with a stream of `stream_view_type` when given."""
    name = f"compat-{uuid.uuid4().hex[:12]}"
    extra: dict[str, Any] = {}
    if stream_view_type is not None:
        extra["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream_view_type}
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": key_type}],
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )
    return name


def stream_records(dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient, table: str) -> list[Any]:
    """Every record of the table's stream so far, read from TRIM_HORIZON by the streams client."""
    stream_arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shards = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]
    records: list[Any] = []
    for shard in shards:
        iterator = streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while True:
            page = streams.get_records(ShardIterator=iterator)
            records.extend(page["Records"])
            if not page["Records"] or "NextShardIterator" not in page:
                break
            iterator = page["NextShardIterator"]
    return records


def run_concurrently(*workers: Callable[[], None]) -> None:
    """Run each worker on its own thread; re-raise the first failure in the test's thread."""
    failures: list[BaseException] = []

    def guarded(worker: Callable[[], None]) -> None:
        try:
            worker()
        except BaseException as failure:
            failures.append(failure)

    threads = [threading.Thread(target=guarded, args=(worker,)) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def add_to_counter(table: str, key: str, amount: int = 1) -> TransactWriteItemTypeDef:
    return {
        "Update": {
            "TableName": table,
            "Key": {"pk": {"S": key}},
            "UpdateExpression": "ADD amount :amount",
            "ExpressionAttributeValues": {":amount": {"N": str(amount)}},
        }
    }


def require_existing(table: str, key: str) -> TransactWriteItemTypeDef:
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": {"pk": {"S": key}},
            "ConditionExpression": "attribute_exists(pk)",
        }
    }


def counter(dynamodb: DynamoDBClient, table: str, key: str) -> int:
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item")
    return 0 if item is None else int(item["amount"]["N"])


def new_token() -> str:
    return uuid.uuid4().hex


# ------------------------------------------------- number arithmetic


def number_of(dynamodb: DynamoDBClient, table: str, key: str) -> str:
    return dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True)["Item"]["amount"]["N"]


@pytest.mark.parametrize("expression", ["ADD amount :amount", "SET amount = amount + :amount"])
def test_arithmetic_accepts_exponent_notation_like_aws(dynamodb: DynamoDBClient, expression: str) -> None:
    """AWS accepts `1E+3` as a number operand; moto used to answer HTTP 500 (int("1E+3"))."""
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}, "amount": {"N": "5"}})
    dynamodb.update_item(
        TableName=table,
        Key={"pk": {"S": "a"}},
        UpdateExpression=expression,
        ExpressionAttributeValues={":amount": {"N": "1E+3"}},
    )
    assert number_of(dynamodb, table, "a") == "1005"


def test_transactional_add_of_exponent_notation_commits(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    add = add_to_counter(table, "a")
    add["Update"]["ExpressionAttributeValues"] = {":amount": {"N": "-2.5E+2"}}
    dynamodb.transact_write_items(TransactItems=[add])
    assert number_of(dynamodb, table, "a") == "-250"


def test_arithmetic_is_exact_to_38_significant_digits_and_refuses_more(dynamodb: DynamoDBClient) -> None:
    """AWS keeps 38 digits exactly; moto used to round sums to Python's default 28 digits."""
    table = create_table(dynamodb)
    big = "1234567890123456789012345678901234567"  # 37 digits
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}, "amount": {"N": big}})
    dynamodb.update_item(
        TableName=table,
        Key={"pk": {"S": "a"}},
        UpdateExpression="ADD amount :amount",
        ExpressionAttributeValues={":amount": {"N": "0.1"}},
    )
    assert number_of(dynamodb, table, "a") == big + ".1"
    with pytest.raises(ClientError) as refused:
        dynamodb.update_item(
            TableName=table,
            Key={"pk": {"S": "a"}},
            UpdateExpression="ADD amount :amount",
            ExpressionAttributeValues={":amount": {"N": "0.01"}},
        )
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert number_of(dynamodb, table, "a") == big + ".1"


# ------------------------------------------------- item size


def item_too_large(dynamodb: DynamoDBClient, table: str, item: dict[str, Any]) -> bool:
    """True when the put is refused for the item's size, False when it is stored."""
    try:
        dynamodb.put_item(TableName=table, Item=item)
    except ClientError as error:
        assert error.response["Error"]["Code"] == "ValidationException", error.response
        assert "size" in error.response["Error"]["Message"]
        return True
    return False


def test_a_number_counts_its_significant_digits_not_its_characters(dynamodb: DynamoDBClient) -> None:
    """11,000 numbers of 38 characters but one significant digit: 33,003 bytes to AWS, and
    418,000 by moto's count of characters."""
    table = create_table(dynamodb)
    tiny = "-0." + "0" * 34 + "1"
    numbers = [{"N": tiny}] * 11_000
    assert not item_too_large(dynamodb, table, {"pk": {"S": "a"}, "l": {"L": numbers}})


def test_a_map_counts_three_bytes_plus_one_per_element(dynamodb: DynamoDBClient) -> None:
    """52,000 NULL elements named by six digits: 364,000 bytes counting names and values alone
    (moto's count), 416,003 with AWS's 3 bytes per map plus 1 per element: refused."""
    table = create_table(dynamodb)
    elements = {f"{index:06d}": {"NULL": True} for index in range(52_000)}
    assert item_too_large(dynamodb, table, {"pk": {"S": "a"}, "m": {"M": elements}})
    fewer = {name: value for name, value in list(elements.items())[:48_000]}  # 384,003 bytes
    assert not item_too_large(dynamodb, table, {"pk": {"S": "b"}, "m": {"M": fewer}})


# ------------------------------------------------- TransactWriteItems ClientRequestToken


def test_transact_write_items_same_token_and_parameters_twice_applies_once(
    dynamodb: DynamoDBClient, emulator_endpoint: str
) -> None:
    table = create_table(dynamodb)
    token = new_token()
    before = transaction_figures(emulator_endpoint)

    first = dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "a")], ClientRequestToken=token)
    repeat = dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "a")], ClientRequestToken=token)

    assert first["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert repeat["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert counter(dynamodb, table, "a") == 1
    after = transaction_figures(emulator_endpoint)
    assert after["token_replays"] - before["token_replays"] == 1  # counted: the upgrade scenario reports it


def test_transact_write_items_same_token_different_parameters_raises_idempotent_parameter_mismatch(
    dynamodb: DynamoDBClient, emulator_endpoint: str
) -> None:
    table = create_table(dynamodb)
    token = new_token()
    dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "a")], ClientRequestToken=token)
    before = transaction_figures(emulator_endpoint)["token_mismatches"]

    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "a", 2)], ClientRequestToken=token)

    assert raised.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert counter(dynamodb, table, "a") == 1
    assert transaction_figures(emulator_endpoint)["token_mismatches"] == before + 1


def test_transact_write_items_token_expires_ten_minutes_after_first_success(
    dynamodb: DynamoDBClient, emulator_endpoint: str
) -> None:
    table = create_table(dynamodb)
    token = new_token()
    dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "a")], ClientRequestToken=token)

    advance_clock(emulator_endpoint, 599)
    dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "a")], ClientRequestToken=token)
    assert counter(dynamodb, table, "a") == 1, "still inside the window: the repeat applies nothing"

    advance_clock(emulator_endpoint, 2)
    dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "a")], ClientRequestToken=token)
    assert counter(dynamodb, table, "a") == 2, "after 10 minutes the token is forgotten: a new request"


def test_cancelled_transaction_does_not_record_its_token(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    token = new_token()
    items = [add_to_counter(table, "a"), require_existing(table, "gate")]

    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(TransactItems=items, ClientRequestToken=token)
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert counter(dynamodb, table, "a") == 0

    dynamodb.put_item(TableName=table, Item={"pk": {"S": "gate"}})
    dynamodb.transact_write_items(TransactItems=items, ClientRequestToken=token)
    assert counter(dynamodb, table, "a") == 1, "the retry with the same token was executed"


def test_transaction_cancellation_reasons_name_each_item_in_request_order(dynamodb: DynamoDBClient) -> None:
    """AWS: CancellationReasons has one entry per action, ``None`` or ``ConditionalCheckFailed``."""
    table = create_table(dynamodb)

    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(
            TransactItems=[add_to_counter(table, "a"), require_existing(table, "missing")],
            ClientRequestToken=new_token(),
        )

    reasons = raised.value.response.get("CancellationReasons", [])
    assert [reason["Code"] for reason in reasons] == ["None", "ConditionalCheckFailed"]


def test_transact_write_request_digest_compares_the_request_canonically() -> None:
    """Key order does not matter (JSON objects); action order, values and options do; the token does not."""
    request = {
        "TransactItems": [{"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}, "n": {"N": "1"}}}}],
        "ClientRequestToken": "one",
    }
    reordered_keys = {
        "ClientRequestToken": "two",
        "TransactItems": [{"Put": {"Item": {"n": {"N": "1"}, "pk": {"S": "a"}}, "TableName": "t"}}],
    }
    with_option = {**request, "ReturnConsumedCapacity": "TOTAL"}
    two_actions: dict[str, Any] = {"TransactItems": [{"ConditionCheck": {}}, {"Delete": {}}]}
    swapped_actions: dict[str, Any] = {"TransactItems": [{"Delete": {}}, {"ConditionCheck": {}}]}

    digest = moto_compat.transact_write_request_digest
    assert digest(request) == digest(reordered_keys)
    assert digest(request) != digest(with_option)
    assert digest(two_actions) != digest(swapped_actions)


# ------------------------------------------------------------ DynamoDB stream records


def test_update_item_creating_an_item_emits_one_insert_with_the_full_new_image(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    table = create_table(dynamodb, "NEW_AND_OLD_IMAGES")

    dynamodb.update_item(
        TableName=table,
        Key={"pk": {"S": "trade"}},
        UpdateExpression="SET Version = :v, #value = :value",
        ExpressionAttributeNames={"#value": "Value"},
        ExpressionAttributeValues={":v": {"N": "1"}, ":value": {"N": "10.5"}},
        ConditionExpression="attribute_not_exists(pk) OR Version < :v",
    )

    records = stream_records(dynamodb, streams, table)
    assert [record["eventName"] for record in records] == ["INSERT"]
    image = records[0]["dynamodb"]
    assert image["NewImage"] == {"pk": {"S": "trade"}, "Version": {"N": "1"}, "Value": {"N": "10.5"}}
    assert "OldImage" not in image
    assert image["Keys"] == {"pk": {"S": "trade"}}


def test_update_item_of_an_existing_item_emits_one_modify_with_both_images(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    table = create_table(dynamodb, "NEW_AND_OLD_IMAGES")
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "trade"}, "Version": {"N": "1"}})

    dynamodb.update_item(
        TableName=table,
        Key={"pk": {"S": "trade"}},
        UpdateExpression="SET Version = :v",
        ExpressionAttributeValues={":v": {"N": "2"}},
    )

    records = stream_records(dynamodb, streams, table)
    assert [record["eventName"] for record in records] == ["INSERT", "MODIFY"]
    modify = records[1]["dynamodb"]
    assert modify["OldImage"] == {"pk": {"S": "trade"}, "Version": {"N": "1"}}
    assert modify["NewImage"] == {"pk": {"S": "trade"}, "Version": {"N": "2"}}


def test_failed_conditional_writes_emit_no_stream_record(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    table = create_table(dynamodb, "NEW_AND_OLD_IMAGES")
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "trade"}, "Version": {"N": "3"}})

    with pytest.raises(ClientError) as update_failed:
        dynamodb.update_item(
            TableName=table,
            Key={"pk": {"S": "trade"}},
            UpdateExpression="SET Version = :v",
            ConditionExpression="attribute_not_exists(pk) OR Version < :v",
            ExpressionAttributeValues={":v": {"N": "2"}},
        )
    with pytest.raises(ClientError) as put_failed:
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "trade"}}, ConditionExpression="attribute_not_exists(pk)")

    assert update_failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert put_failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert [record["eventName"] for record in stream_records(dynamodb, streams, table)] == ["INSERT"]


def test_put_item_and_delete_item_emit_insert_modify_remove_per_stream_view_type(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    table = create_table(dynamodb, "NEW_IMAGE")

    dynamodb.put_item(TableName=table, Item={"pk": {"S": "batch"}, "n": {"N": "1"}})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "batch"}, "n": {"N": "2"}})
    dynamodb.delete_item(TableName=table, Key={"pk": {"S": "batch"}})

    records = stream_records(dynamodb, streams, table)
    assert [record["eventName"] for record in records] == ["INSERT", "MODIFY", "REMOVE"]
    assert [record["dynamodb"].get("NewImage") for record in records] == [
        {"pk": {"S": "batch"}, "n": {"N": "1"}},
        {"pk": {"S": "batch"}, "n": {"N": "2"}},
        None,
    ]
    assert all("OldImage" not in record["dynamodb"] for record in records), "NEW_IMAGE has no old image"
    assert records[2]["dynamodb"]["Keys"] == {"pk": {"S": "batch"}}


def test_transact_write_items_emit_one_record_per_item_and_none_when_cancelled(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    table = create_table(dynamodb, "NEW_AND_OLD_IMAGES")

    dynamodb.transact_write_items(
        TransactItems=[
            add_to_counter(table, "node", 5),
            {"Put": {"TableName": table, "Item": {"pk": {"S": "#marker"}}}},
        ]
    )
    with pytest.raises(ClientError):
        dynamodb.transact_write_items(
            TransactItems=[add_to_counter(table, "node", 1), require_existing(table, "missing")]
        )
    dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "node", 2)])

    records = stream_records(dynamodb, streams, table)
    assert [(r["eventName"], r["dynamodb"]["Keys"]["pk"]["S"]) for r in records] == [
        ("INSERT", "node"),
        ("INSERT", "#marker"),
        ("MODIFY", "node"),
    ]
    assert records[0]["dynamodb"]["NewImage"] == {"pk": {"S": "node"}, "amount": {"N": "5"}}
    assert records[2]["dynamodb"]["OldImage"]["amount"] == {"N": "5"}
    assert records[2]["dynamodb"]["NewImage"]["amount"] == {"N": "7"}


def test_a_transaction_cancelled_midway_leaves_every_item_and_the_stream_as_they_were(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    """The rollback journal restores created, modified, overwritten and deleted items alike."""
    table = create_table(dynamodb, "NEW_AND_OLD_IMAGES")
    for key, amount in (("kept", 1), ("overwritten", 2), ("deleted", 3), ("bystander", 4)):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": key}, "amount": {"N": str(amount)}})
    before = sorted(dynamodb.scan(TableName=table, ConsistentRead=True)["Items"], key=lambda i: i["pk"]["S"])
    records_before = stream_records(dynamodb, streams, table)

    with pytest.raises(ClientError, match="TransactionCanceledException"):
        dynamodb.transact_write_items(
            TransactItems=[
                add_to_counter(table, "kept", 10),
                add_to_counter(table, "created", 10),
                {"Put": {"TableName": table, "Item": {"pk": {"S": "overwritten"}, "other": {"S": "x"}}}},
                {"Delete": {"TableName": table, "Key": {"pk": {"S": "deleted"}}}},
                require_existing(table, "missing"),  # the last action fails: nothing may remain
            ]
        )

    after = sorted(dynamodb.scan(TableName=table, ConsistentRead=True)["Items"], key=lambda i: i["pk"]["S"])
    assert after == before
    assert stream_records(dynamodb, streams, table) == records_before
    dynamodb.transact_write_items(TransactItems=[add_to_counter(table, "kept", 10)])  # the table still works
    assert counter(dynamodb, table, "kept") == 11
    assert [r["eventName"] for r in stream_records(dynamodb, streams, table)][len(records_before) :] == ["MODIFY"]


def test_a_transaction_does_not_copy_the_tables_it_touches(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto deep-copied every touched table before every transaction; inside one, tables are not copied."""
    moto_compat.fix_transaction_rollback_copies_only_what_it_touches()
    backend = DynamoDBBackend("us-east-1", "123456789012")
    table = scratch_table(backend, "t")
    copies: list[Any] = []
    shim = moto_models.copy  # type: ignore[attr-defined]
    original_deepcopy = shim.deepcopy

    def recording_deepcopy(value: Any, memo: Any = None) -> Any:
        result = original_deepcopy(value, memo)
        copies.append((value, result))
        return result

    monkeypatch.setattr(shim, "deepcopy", recording_deepcopy)
    backend.transact_write_items([{"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}}])
    assert [result for value, result in copies if value is table] == [table]  # moto's rollback copy is no copy
    assert backend.tables["t"] is table and table.get_item(DynamoType({"S": "a"})) is not None


# ------------------------------------------------------------------- DynamoDB Streams


def test_dynamodb_streams_client_works_against_the_server(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    """Server mode + endpoint URL: list/describe/iterators/get_records, sequence numbers increasing."""
    table = create_table(dynamodb, "NEW_AND_OLD_IMAGES")
    stream_arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    assert stream_arn in [s["StreamArn"] for s in streams.list_streams(TableName=table)["Streams"]]
    description = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]
    assert description["StreamStatus"] == "ENABLED"
    assert description["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    shard_id = description["Shards"][0]["ShardId"]
    latest = streams.get_shard_iterator(StreamArn=stream_arn, ShardId=shard_id, ShardIteratorType="LATEST")

    for number in range(3):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": f"item-{number}"}})

    page = streams.get_records(ShardIterator=latest["ShardIterator"], Limit=2)
    rest = streams.get_records(ShardIterator=page["NextShardIterator"])
    tip = streams.get_records(ShardIterator=rest["NextShardIterator"])
    sequence_numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in page["Records"] + rest["Records"]]
    assert len(page["Records"]) == 2 and len(rest["Records"]) == 1
    assert sequence_numbers == sorted(set(sequence_numbers))
    assert tip["Records"] == [] and "NextShardIterator" in tip, "an open shard always has a next iterator"

    after_first = streams.get_shard_iterator(
        StreamArn=stream_arn,
        ShardId=shard_id,
        ShardIteratorType="AFTER_SEQUENCE_NUMBER",
        SequenceNumber=str(sequence_numbers[0]),
    )
    resumed = streams.get_records(ShardIterator=after_first["ShardIterator"])["Records"]
    assert [int(r["dynamodb"]["SequenceNumber"]) for r in resumed] == sequence_numbers[1:]
    assert all(r["eventSource"] == "aws:dynamodb" and r["eventID"] for r in resumed)


def test_dynamodb_stream_iterators_expire_fifteen_minutes_after_they_are_returned(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient, emulator_endpoint: str
) -> None:
    """GetShardIterator's and each GetRecords' NextShardIterator live 15 minutes, then ExpiredIteratorException."""
    table = create_table(dynamodb, "KEYS_ONLY")
    stream_arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard_id = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"][0]["ShardId"]

    def iterator() -> str:
        arguments = {"StreamArn": stream_arn, "ShardId": shard_id, "ShardIteratorType": "TRIM_HORIZON"}
        return str(streams.get_shard_iterator(**arguments)["ShardIterator"])  # type: ignore[arg-type]

    old, kept = iterator(), iterator()
    advance_clock(emulator_endpoint, moto_compat.STREAM_ITERATOR_LIFETIME_SECONDS - 60)
    renewed = streams.get_records(ShardIterator=kept)["NextShardIterator"]  # still valid at 14 minutes
    advance_clock(emulator_endpoint, 60)
    for expired in (old, kept):
        with pytest.raises(ClientError) as raised:
            streams.get_records(ShardIterator=expired)
        assert raised.value.response["Error"]["Code"] == "ExpiredIteratorException"
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "after"}})
    assert [r["dynamodb"]["Keys"] for r in streams.get_records(ShardIterator=renewed)["Records"]] == [
        {"pk": {"S": "after"}}
    ]


def test_expired_stream_iterators_are_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto kept every iterator forever (about 115 MB an hour of idle polling); expired ones are dropped."""
    clock = moto_compat.CompatClock()
    monkeypatch.setattr(moto_compat, "clock", clock)
    iterators = moto_compat._ExpiringShardIterators()
    for number in range(1000):
        iterators[f"arn-{number}"] = number
    clock.advance(moto_compat.STREAM_ITERATOR_LIFETIME_SECONDS / 2)
    iterators["young"] = "y"
    assert len(iterators) == 1001 and iterators["arn-0"] == 0
    clock.advance(moto_compat.STREAM_ITERATOR_LIFETIME_SECONDS / 2)
    iterators["newest"] = "n"
    assert dict(iterators) == {"young": "y", "newest": "n"} and set(iterators.made_at) == {"young", "newest"}


def test_event_source_mappings_leave_stream_records_for_the_poller(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient, aws_client: AwsClientFactory
) -> None:
    """AWS: a mapping polls; writes never invoke the function and stream records stay readable."""
    table = create_table(dynamodb, "NEW_IMAGE")
    stream_arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    role = aws_client("iam").create_role(RoleName=f"role-{table}", AssumeRolePolicyDocument="{}")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as package:
        package.writestr("handler.py", "def handler(event, context):\n    return None\n")
    lambda_client = aws_client("lambda")
    lambda_client.create_function(
        FunctionName=f"fn-{table}",
        Runtime="python3.11",
        Role=role["Role"]["Arn"],
        Handler="handler.handler",
        Code={"ZipFile": archive.getvalue()},
    )
    mapping = lambda_client.create_event_source_mapping(
        EventSourceArn=stream_arn, FunctionName=f"fn-{table}", StartingPosition="TRIM_HORIZON"
    )

    for number in range(3):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": f"item-{number}"}})

    assert [r["eventName"] for r in stream_records(dynamodb, streams, table)] == ["INSERT"] * 3
    listed = lambda_client.list_event_source_mappings(EventSourceArn=stream_arn)["EventSourceMappings"]
    assert [m["UUID"] for m in listed] == [mapping["UUID"]]


# ------------------------------------------------------------------- cloudformation


def test_an_ssm_typed_stack_parameter_resolves_the_parameter_given_not_its_default(
    aws_client: AwsClientFactory,
) -> None:
    """AWS: the default of an SSM-typed parameter is only the name used when no value is given."""
    ssm, cloudformation = aws_client("ssm"), aws_client("cloudformation")
    suffix = uuid.uuid4().hex[:12]
    given, default_that_exists = f"/compat/given-{suffix}", f"/compat/default-{suffix}"
    ssm.put_parameter(Name=given, Value="the given value", Type="String")
    ssm.put_parameter(Name=default_that_exists, Value="the default value", Type="String")

    def template(default: str, copy_name: str) -> str:
        """A stack copying its SSM-typed parameter's resolved value into the parameter `copy_name`."""
        parameter = {"Type": "AWS::SSM::Parameter::Value<String>", "Default": default}
        properties = {"Name": copy_name, "Type": "String", "Value": {"Ref": "Source"}}
        return json.dumps(
            {
                "Parameters": {"Source": parameter},
                "Resources": {"Copy": {"Type": "AWS::SSM::Parameter", "Properties": properties}},
                "Outputs": {"Copy": {"Value": {"Ref": "Copy"}}},
            }
        )

    def copied_value(stack_name: str) -> str:
        outputs = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["Outputs"]
        return str(ssm.get_parameter(Name=outputs[0]["OutputValue"])["Parameter"]["Value"])

    # A default nobody may create (reserved prefix), overridden by the caller: created, and updated.
    missing_default = f"/aws/service/compat-absent/{suffix}"
    overridden = [{"ParameterKey": "Source", "ParameterValue": given}]
    cloudformation.create_stack(
        StackName=f"given-{suffix}",
        TemplateBody=template(missing_default, f"/compat/a-{suffix}"),
        Parameters=overridden,
    )
    assert copied_value(f"given-{suffix}") == "the given value"
    cloudformation.update_stack(
        StackName=f"given-{suffix}",
        TemplateBody=template(missing_default + "/v2", f"/compat/b-{suffix}"),
        Parameters=overridden,
    )
    assert copied_value(f"given-{suffix}") == "the given value"

    # No value given: the default is resolved, as before.
    cloudformation.create_stack(
        StackName=f"default-{suffix}", TemplateBody=template(default_that_exists, f"/compat/c-{suffix}")
    )
    assert copied_value(f"default-{suffix}") == "the default value"


def table_template(*, protected: bool, ttl: bool = False, sort_key: bool = False, provisioned: bool = False) -> str:
    """A stack of one streamed table, its name as output (protection, TTL, key shape and capacity mode as given)."""
    keys = [("Id", "HASH"), *([("At", "RANGE")] if sort_key else [])]
    properties: dict[str, Any] = {
        "KeySchema": [{"AttributeName": name, "KeyType": kind} for name, kind in keys],
        "AttributeDefinitions": [{"AttributeName": name, "AttributeType": "S"} for name, _ in keys],
        "BillingMode": "PROVISIONED" if provisioned else "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
        "DeletionProtectionEnabled": protected,
    }
    if provisioned:
        properties["ProvisionedThroughput"] = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
    if ttl:
        properties["TimeToLiveSpecification"] = {"AttributeName": "ExpiresAt", "Enabled": True}
    return json.dumps(
        {
            "Resources": {"Table": {"Type": "AWS::DynamoDB::Table", "Properties": properties}},
            "Outputs": {
                "Table": {"Value": {"Ref": "Table"}},
                "Stream": {"Value": {"Fn::GetAtt": ["Table", "StreamArn"]}},
            },
        }
    )


def stack_status(cloudformation: Any, stack_name: str) -> str:
    return str(cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["StackStatus"])


def test_a_stack_update_changes_a_table_in_place_and_keeps_its_items(aws_client: AwsClientFactory) -> None:
    """AWS: deletion protection and TTL update with no interruption; the table and its items stay."""
    cloudformation, dynamodb = aws_client("cloudformation"), aws_client("dynamodb")
    stack_name = f"table-{uuid.uuid4().hex[:12]}"
    cloudformation.create_stack(StackName=stack_name, TemplateBody=table_template(protected=False))
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["Outputs"]
    }
    dynamodb.put_item(TableName=outputs["Table"], Item={"Id": {"S": "kept"}})

    cloudformation.update_stack(StackName=stack_name, TemplateBody=table_template(protected=True, ttl=True))

    assert stack_status(cloudformation, stack_name) == "UPDATE_COMPLETE"
    after = {
        o["OutputKey"]: o["OutputValue"]
        for o in cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["Outputs"]
    }
    assert after == outputs  # the same table and stream
    described = dynamodb.describe_table(TableName=outputs["Table"])["Table"]
    assert described["DeletionProtectionEnabled"] is True
    ttl = dynamodb.describe_time_to_live(TableName=outputs["Table"])["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ExpiresAt"}
    assert dynamodb.get_item(TableName=outputs["Table"], Key={"Id": {"S": "kept"}})["Item"] == {"Id": {"S": "kept"}}


def test_a_stack_update_that_would_replace_a_table_fails_and_leaves_it(aws_client: AwsClientFactory) -> None:
    """AWS replaces a table whose key schema changes (a new, empty table): the emulator refuses it."""
    cloudformation, dynamodb = aws_client("cloudformation"), aws_client("dynamodb")
    stack_name = f"table-{uuid.uuid4().hex[:12]}"
    cloudformation.create_stack(StackName=stack_name, TemplateBody=table_template(protected=False))
    table = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["Outputs"][0]["OutputValue"]
    dynamodb.put_item(TableName=table, Item={"Id": {"S": "kept"}})

    with pytest.raises(ClientError, match="KeySchema replaces the table"):
        cloudformation.update_stack(StackName=stack_name, TemplateBody=table_template(protected=False, sort_key=True))

    assert dynamodb.describe_table(TableName=table)["Table"]["KeySchema"] == [
        {"AttributeName": "Id", "KeyType": "HASH"}
    ]
    assert "Item" in dynamodb.get_item(TableName=table, Key={"Id": {"S": "kept"}})


def test_a_fifth_switch_to_on_demand_in_a_day_is_refused_by_update_table_and_by_a_stack_update(
    aws_client: AwsClientFactory,
) -> None:
    """AWS: provisioned to on-demand up to four times in a 24-hour rolling window; to provisioned at any time."""
    cloudformation, dynamodb = aws_client("cloudformation"), aws_client("dynamodb")
    stack_name = f"table-{uuid.uuid4().hex[:12]}"
    cloudformation.create_stack(StackName=stack_name, TemplateBody=table_template(protected=False, provisioned=True))
    table = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["Outputs"][0]["OutputValue"]
    throughput = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
    for _ in range(moto_compat.ON_DEMAND_SWITCHES_PER_DAY):
        dynamodb.update_table(TableName=table, BillingMode="PAY_PER_REQUEST")
        dynamodb.update_table(TableName=table, BillingMode="PROVISIONED", ProvisionedThroughput=throughput)

    with pytest.raises(ClientError) as by_api:
        dynamodb.update_table(TableName=table, BillingMode="PAY_PER_REQUEST")
    with pytest.raises(ClientError, match="Subscriber limit exceeded"):
        cloudformation.update_stack(StackName=stack_name, TemplateBody=table_template(protected=False))

    assert by_api.value.response["Error"]["Code"] == "LimitExceededException"
    described = dynamodb.describe_table(TableName=table)["Table"]
    assert described.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED") == "PROVISIONED"


def bare_table(name: str) -> Table:
    """A moto table outside any backend: what the capacity-mode switch rules read and record."""
    return Table(  # type: ignore[abstract]  # moto's CloudFormation hooks are not used here
        name,
        account_id="123456789012",
        region="us-east-1",
        schema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        attr=[{"AttributeName": "pk", "AttributeType": "S"}],
    )


def test_switches_to_on_demand_leave_the_window_after_24_hours(monkeypatch: pytest.MonkeyPatch) -> None:
    """The window is rolling: a switch counts for 24 hours of the compat clock, then no more."""
    clock = moto_compat.CompatClock()
    monkeypatch.setattr(moto_compat, "clock", clock)
    table = bare_table("switching")
    refusals = []
    for hour in range(6):
        table.billing_mode = "PROVISIONED"
        refusals.append(moto_compat.capacity_mode_switch_refusal(table, "PAY_PER_REQUEST"))
        if refusals[-1] is None:
            table.billing_mode = "PAY_PER_REQUEST"
            moto_compat.record_capacity_mode_switch(table, "PROVISIONED")
        clock.advance(3600 if hour < 4 else 20 * 3600 + 1)
    assert [refusal is None for refusal in refusals] == [True, True, True, True, False, True]
    table.billing_mode = "PAY_PER_REQUEST"
    assert moto_compat.capacity_mode_switch_refusal(table, "PROVISIONED") is None, "to provisioned: any time"


def test_a_switch_that_did_not_happen_does_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking is not switching: refused or failed updates leave the four switches a day untouched."""
    monkeypatch.setattr(moto_compat, "clock", moto_compat.CompatClock())
    table = bare_table("asking")
    table.billing_mode = "PROVISIONED"
    for _ in range(10):
        assert moto_compat.capacity_mode_switch_refusal(table, "PAY_PER_REQUEST") is None
    moto_compat.record_capacity_mode_switch(table, "PROVISIONED")  # still provisioned: the update failed
    assert moto_compat.capacity_mode_switch_refusal(table, "PAY_PER_REQUEST") is None
    for _ in range(4):
        table.billing_mode = "PAY_PER_REQUEST"
        moto_compat.record_capacity_mode_switch(table, "PROVISIONED")
        table.billing_mode = "PROVISIONED"
    assert moto_compat.capacity_mode_switch_refusal(table, "PAY_PER_REQUEST") is not None


def test_a_stack_update_that_drops_reserved_concurrency_removes_it(aws_client: AwsClientFactory) -> None:
    """AWS: removing ReservedConcurrentExecutions from the template removes the function's reserved concurrency."""
    cloudformation, lambda_client, iam, s3 = (aws_client(name) for name in ("cloudformation", "lambda", "iam", "s3"))
    suffix = uuid.uuid4().hex[:12]
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return event\n")
    s3.create_bucket(Bucket=f"compat-{suffix}")
    s3.put_object(Bucket=f"compat-{suffix}", Key="code.zip", Body=package.getvalue())
    role = iam.create_role(
        RoleName=f"compat-{suffix}",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]

    def template(reserved: int | None) -> str:
        properties: dict[str, Any] = {
            "FunctionName": f"compat-{suffix}",
            "Runtime": "python3.12",
            "Handler": "index.handler",
            "Role": role,
            "Code": {"S3Bucket": f"compat-{suffix}", "S3Key": "code.zip"},
        }
        if reserved is not None:
            properties["ReservedConcurrentExecutions"] = reserved
        return json.dumps({"Resources": {"Function": {"Type": "AWS::Lambda::Function", "Properties": properties}}})

    cloudformation.create_stack(StackName=f"function-{suffix}", TemplateBody=template(1))
    assert lambda_client.get_function(FunctionName=f"compat-{suffix}")["Concurrency"] == {
        "ReservedConcurrentExecutions": 1
    }

    cloudformation.update_stack(StackName=f"function-{suffix}", TemplateBody=template(None))

    assert "Concurrency" not in lambda_client.get_function(FunctionName=f"compat-{suffix}")


def test_a_stack_update_that_changes_only_a_log_groups_metadata_keeps_it_and_its_attributes(
    aws_client: AwsClientFactory,
) -> None:
    """AWS: Metadata is not a property; a release adding checkov's skips to a log group upgrades in place."""
    cloudformation, logs = aws_client("cloudformation"), aws_client("logs")
    suffix = uuid.uuid4().hex[:12]

    def template(metadata: dict[str, Any], retention: int = 30) -> str:
        log_group = {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"LogGroupName": f"/compat/{suffix}", "RetentionInDays": retention},
            "Metadata": metadata,
        }
        return json.dumps(
            {
                "Resources": {"LogGroup": log_group},
                "Outputs": {"Arn": {"Value": {"Fn::GetAtt": ["LogGroup", "Arn"]}}},
            }
        )

    cloudformation.create_stack(StackName=f"logs-{suffix}", TemplateBody=template({"aws:cdk:path": "a"}))
    arn = cloudformation.describe_stacks(StackName=f"logs-{suffix}")["Stacks"][0]["Outputs"][0]["OutputValue"]

    skips = {"aws:cdk:path": "a", "checkov": {"skip": [{"id": "CKV_AWS_158", "comment": "reason"}]}}
    cloudformation.update_stack(StackName=f"logs-{suffix}", TemplateBody=template(skips))

    assert stack_status(cloudformation, f"logs-{suffix}") == "UPDATE_COMPLETE"
    assert cloudformation.describe_stacks(StackName=f"logs-{suffix}")["Stacks"][0]["Outputs"][0]["OutputValue"] == arn
    described = cloudformation.get_template(StackName=f"logs-{suffix}")["TemplateBody"]
    assert described["Resources"]["LogGroup"]["Metadata"] == skips
    (group,) = logs.describe_log_groups(logGroupNamePrefix=f"/compat/{suffix}")["logGroups"]
    assert group["retentionInDays"] == 30


# ----------------------------------------------------------------- request isolation


def test_concurrent_writes_survive_cancelled_transactions_on_the_same_table(dynamodb: DynamoDBClient) -> None:
    """AWS: transactions are serializable; a cancelled one never undoes another request's write."""
    table = create_table(dynamodb)
    for number in range(100):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": f"filler-{number}"}, "pad": {"S": "x" * 100}})
    adders, additions_each, cancellations = 3, 60, 60

    def add() -> None:
        for _ in range(additions_each):
            dynamodb.update_item(
                TableName=table,
                Key={"pk": {"S": "count"}},
                UpdateExpression="ADD amount :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )

    def cancel() -> None:
        for _ in range(cancellations):
            with pytest.raises(ClientError):
                dynamodb.transact_write_items(
                    TransactItems=[add_to_counter(table, "other"), require_existing(table, "missing")]
                )

    run_concurrently(*[add] * adders, cancel)

    assert counter(dynamodb, table, "count") == adders * additions_each


def test_concurrent_kinesis_puts_keep_every_record_with_a_unique_sequence_number(kinesis: KinesisClient) -> None:
    stream = f"compat-{uuid.uuid4().hex[:12]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    backlog = [{"Data": b"{}", "PartitionKey": "backlog"}] * 500
    for _ in range(8):  # a longer shard widens moto's read-max-then-insert window
        kinesis.put_records(StreamName=stream, Records=backlog)  # type: ignore[arg-type]
    writers, puts_each, batch = 4, 15, 25

    def put() -> None:
        for _ in range(puts_each):
            response = kinesis.put_records(
                StreamName=stream,
                Records=[{"Data": b"{}", "PartitionKey": str(number)} for number in range(batch)],
            )
            assert response["FailedRecordCount"] == 0

    run_concurrently(*[put] * writers)

    shard_id = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    page = kinesis.get_records(ShardIterator=iterator["ShardIterator"], Limit=10000)
    sequence_numbers = [int(record["SequenceNumber"]) for record in page["Records"]]
    assert len(sequence_numbers) == 8 * len(backlog) + writers * puts_each * batch
    assert sequence_numbers == sorted(set(sequence_numbers))


def test_concurrent_s3_conditional_puts_lose_no_update(aws_client: AwsClientFactory) -> None:
    """AWS (S3 User Guide, "Add preconditions to S3 operations with conditional requests"): a
    conditional write is atomic, so of writers that read one version and PUT with ``If-Match``
    its ETag, one succeeds and the others get 412. Each writer here CAS-increments one counter
    object until it has made its increments; a lost one shows as a short count, or as a 500 to
    the writer whose object moto replaced while it was still answering."""
    s3 = aws_client("s3")
    bucket, key = f"compat-{uuid.uuid4().hex[:12]}", "counter"
    s3.create_bucket(Bucket=bucket)
    padding = b"x" * 1024 * 1024  # a larger body widens moto's check-then-store window
    s3.put_object(Bucket=bucket, Key=key, Body=b"0\n" + padding, IfNoneMatch="*")
    writers, increments_each = 16, 6

    def increment() -> None:
        done = 0
        while done < increments_each:
            current = s3.get_object(Bucket=bucket, Key=key)
            value = int(current["Body"].read().split(b"\n", 1)[0])
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=b"%d\n" % (value + 1) + padding, IfMatch=current["ETag"])
            except ClientError as error:
                assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 412, error.response
                continue
            done += 1

    run_concurrently(*[increment] * writers)

    final = s3.get_object(Bucket=bucket, Key=key)["Body"].read().split(b"\n", 1)[0]
    assert int(final) == writers * increments_each


def kinesis_stream_with_records(kinesis: KinesisClient, count: int) -> tuple[str, str]:
    """A new one-shard stream holding `count` records ("0", "1", ...): its name and shard id."""
    stream = f"compat-{uuid.uuid4().hex[:12]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    for number in range(count):
        kinesis.put_record(StreamName=stream, Data=str(number).encode(), PartitionKey="k")
    return stream, kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]


def test_kinesis_iterators_expire_five_minutes_after_they_are_returned(
    kinesis: KinesisClient, emulator_endpoint: str
) -> None:
    """GetShardIterator's and each GetRecords' NextShardIterator live 5 minutes (reusable until then)."""
    stream, shard_id = kinesis_stream_with_records(kinesis, 2)
    old = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    advance_clock(emulator_endpoint, moto_compat.KINESIS_ITERATOR_LIFETIME_SECONDS - 60)
    first = kinesis.get_records(ShardIterator=old["ShardIterator"], Limit=1)  # still valid at 4 minutes
    again = kinesis.get_records(ShardIterator=old["ShardIterator"], Limit=1)  # and reusable
    assert [r["Data"] for r in first["Records"]] == [r["Data"] for r in again["Records"]] == [b"0"]
    advance_clock(emulator_endpoint, 60)
    with pytest.raises(ClientError) as raised:
        kinesis.get_records(ShardIterator=old["ShardIterator"])
    assert raised.value.response["Error"]["Code"] == "ExpiredIteratorException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    renewed = kinesis.get_records(ShardIterator=first["NextShardIterator"])  # issued a minute ago
    assert [r["Data"] for r in renewed["Records"]] == [b"1"]


def test_a_kinesis_iterator_this_emulator_never_issued_is_an_invalid_argument(kinesis: KinesisClient) -> None:
    stream, shard_id = kinesis_stream_with_records(kinesis, 1)
    moto_s_own = base64.b64encode(f"{stream}:{shard_id}:0".encode()).decode()  # moto's format, no issue time
    for iterator in (moto_s_own, "not an iterator"):
        with pytest.raises(ClientError) as raised:
            kinesis.get_records(ShardIterator=iterator)
        assert raised.value.response["Error"]["Code"] == "InvalidArgumentException"


def test_kinesis_reads_through_expiring_iterators_answer_as_moto_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: every read, every iterator type, the same records and positions as moto's unpatched path."""
    monkeypatch.setattr(moto_compat, "clock", moto_compat.CompatClock())
    moto_compat.fix_kinesis_iterators_expire()
    backend = KinesisBackend("us-east-1", "123456789012")
    backend.create_stream("s", shard_count=1, stream_mode={"StreamMode": "PROVISIONED"}, retention_period_hours=24)
    shard_id = next(iter(backend.streams["s"].shards))
    numbers = [int(backend.put_record("", "s", "k", "", base64.b64encode(b"x").decode())[0]) for _ in range(7)]
    moto_get_iterator = KinesisBackend.get_shard_iterator.__wrapped__  # type: ignore[attr-defined]
    moto_get_records = KinesisBackend.get_records.__wrapped__  # type: ignore[attr-defined]
    now = datetime.datetime.now(datetime.UTC)
    for kind, number in [
        ("TRIM_HORIZON", 0),
        ("AT_SEQUENCE_NUMBER", numbers[2]),
        ("AFTER_SEQUENCE_NUMBER", numbers[2]),
        ("LATEST", 0),
    ]:
        ours = backend.get_shard_iterator(None, "s", shard_id, kind, number, now)
        theirs = moto_get_iterator(backend, None, "s", shard_id, kind, number, now)
        for _ in range(4):
            ours, our_records, our_lag = backend.get_records(None, ours, 3)
            theirs, their_records, their_lag = moto_get_records(backend, None, theirs, 3)
            assert [r.sequence_number for r in our_records] == [r.sequence_number for r in their_records]
            assert our_lag == their_lag
            assert moto_compat._unstamped_kinesis_iterator(ours)[0].encode() == base64.b64encode(
                base64.b64decode(theirs)
            ), "the same position"


# ------------------------------------------------------------------- control endpoints


def request_json(url: str, method: str = "GET", body: object | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_control_endpoints_report_health_and_move_the_clock_forward_only(emulator_endpoint: str) -> None:
    status, health = request_json(emulator_endpoint + "/_compat/health")
    assert status == 200 and health["status"] == "ok"
    assert set(health["fixes"]) == {fix.__name__ for fix in moto_compat.FIXES}

    _, before = request_json(emulator_endpoint + "/_compat/clock")
    status, after = request_json(emulator_endpoint + "/_compat/clock/advance", "POST", {"seconds": 30})
    assert status == 200 and after["now"] >= before["now"] + 30

    assert request_json(emulator_endpoint + "/_compat/clock/advance", "POST", {"seconds": -1})[0] == 400
    assert request_json(emulator_endpoint + "/_compat/nothing-here")[0] == 404


def test_compat_clock_advances_in_process() -> None:
    """In-process users (moto without a server) can move the clock the fixes read."""
    clock = moto_compat.CompatClock()
    start = clock.now()
    assert clock.advance(601) >= start + 601
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_get_metric_data_answers_percentiles_of_the_published_values(aws_client: AwsClientFactory) -> None:
    """`fix_cloudwatch_percentile_statistics`: `pNN` is the nearest-rank percentile of the period's
    values (Values/Counts included); the statistics moto knows are left alone."""
    cloudwatch = aws_client("cloudwatch")
    when = datetime.datetime.now(datetime.UTC).replace(second=0, microsecond=0) - datetime.timedelta(minutes=3)
    metric = {"Namespace": "Compat", "MetricName": f"m{uuid.uuid4().hex[:8]}"}
    cloudwatch.put_metric_data(
        Namespace=metric["Namespace"],
        MetricData=[
            {"MetricName": metric["MetricName"], "Timestamp": when, "Values": [1, 2, 10], "Counts": [90, 9, 1]}
        ],
    )
    queries = [
        {"Id": statistic.replace(".", "_").lower(), "MetricStat": {"Metric": metric, "Period": 60, "Stat": statistic}}
        for statistic in ("p50", "p90", "p99", "p99.9", "p100", "Maximum", "Sum")
    ]
    results = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=when, EndTime=when + datetime.timedelta(minutes=1)
    )["MetricDataResults"]
    assert {result["Id"]: result["Values"] for result in results} == {
        "p50": [1.0],
        "p90": [1.0],
        "p99": [2.0],
        "p99_9": [10.0],
        "p100": [10.0],
        "maximum": [10.0],
        "sum": [118.0],
    }


def test_get_metric_data_reads_only_the_namespace_each_query_names(aws_client: AwsClientFactory) -> None:
    """`fix_cloudwatch_metric_data_reads_its_namespace`: the same name and dimensions in two
    namespaces are two metrics (two stacks' functions); each query reads its own, in one request too."""
    cloudwatch = aws_client("cloudwatch")
    when = datetime.datetime.now(datetime.UTC).replace(second=0, microsecond=0) - datetime.timedelta(minutes=3)
    name, dimensions = f"m{uuid.uuid4().hex[:8]}", [{"Name": "service", "Value": "reduce"}]
    for namespace, value in (("Compat/Production", 100.0), ("Compat/Staging", 7.0)):
        cloudwatch.put_metric_data(
            Namespace=namespace,
            MetricData=[{"MetricName": name, "Dimensions": dimensions, "Timestamp": when, "Value": value}],
        )
    queries = [
        {
            "Id": stack.lower(),
            "MetricStat": {
                "Metric": {"Namespace": f"Compat/{stack}", "MetricName": name, "Dimensions": dimensions},
                "Period": 60,
                "Stat": "Sum",
            },
        }
        for stack in ("Staging", "Production")
    ]
    results = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=when, EndTime=when + datetime.timedelta(minutes=1)
    )["MetricDataResults"]
    assert [(result["Id"], result["Values"]) for result in results] == [("staging", [7.0]), ("production", [100.0])]
    doubled = {"Id": "doubled", "Expression": "production * 2"}
    with pytest.raises(ClientError, match="not emulated"):
        cloudwatch.get_metric_data(
            MetricDataQueries=[*queries, doubled], StartTime=when, EndTime=when + datetime.timedelta(minutes=1)
        )
