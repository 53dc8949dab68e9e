"""`EMULATOR_STREAM_SHARDS`: a table's DynamoDB stream has several shards, each item's records in one, in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from local.emulator.control import EmulatorProcess, start_emulator
from local.emulator.moto_compat import STREAM_SHARDS_VARIABLE, stream_shard_count

pytestmark = pytest.mark.emulator
SHARDS = 4


@pytest.fixture(scope="module")
def sharded_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv(STREAM_SHARDS_VARIABLE, str(SHARDS))
        process = start_emulator(tmp_path_factory.mktemp("sharded") / "emulator.log")
    yield process
    process.stop()


def client(emulator: EmulatorProcess, service: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=emulator.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def shard_records(streams: Any, stream_arn: str, shard_id: str) -> list[dict[str, Any]]:
    iterator = streams.get_shard_iterator(StreamArn=stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    records: list[dict[str, Any]] = []
    page = streams.get_records(ShardIterator=iterator["ShardIterator"])
    while page["Records"]:
        records.extend(page["Records"])
        page = streams.get_records(ShardIterator=page["NextShardIterator"])
    return records


def test_each_item_s_records_are_in_one_shard_in_order_and_every_record_in_exactly_one(
    sharded_emulator: EmulatorProcess,
) -> None:
    dynamodb, streams = client(sharded_emulator, "dynamodb"), client(sharded_emulator, "dynamodbstreams")
    dynamodb.create_table(
        TableName="sharded",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    for version in (1, 2, 3):
        for item in range(40):
            dynamodb.put_item(TableName="sharded", Item={"pk": {"S": f"item-{item}"}, "v": {"N": str(version)}})
    with pytest.raises(ClientError, match="TransactionCanceled"):  # a cancelled transaction leaves no record
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "sharded", "Item": {"pk": {"S": f"item-{n}"}, "v": {"N": "9"}}}} for n in range(5)
            ]
            + [
                {
                    "ConditionCheck": {
                        "TableName": "sharded",
                        "Key": {"pk": {"S": "none"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                }
            ]
        )
    stream_arn = dynamodb.describe_table(TableName="sharded")["Table"]["LatestStreamArn"]
    shard_ids = [
        shard["ShardId"] for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]
    ]
    assert len(set(shard_ids)) == SHARDS

    shard_of: dict[str, str] = {}
    seen: list[tuple[str, int]] = []
    for shard_id in shard_ids:
        records = shard_records(streams, stream_arn, shard_id)
        assert records, f"{shard_id} holds some items: the partition keys spread"
        numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
        for record in records:
            key = record["dynamodb"]["Keys"]["pk"]["S"]
            assert shard_of.setdefault(key, shard_id) == shard_id, "an item's records stay in one shard"
            seen.append((key, int(record["dynamodb"]["NewImage"]["v"]["N"])))
    assert sorted(seen) == sorted((f"item-{item}", version) for item in range(40) for version in (1, 2, 3))
    for item in range(40):  # in each item's order
        assert [v for key, v in seen if key == f"item-{item}"] == [1, 2, 3]


def test_an_unknown_shard_is_refused_and_the_setting_is_checked(
    sharded_emulator: EmulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    dynamodb, streams = client(sharded_emulator, "dynamodb"), client(sharded_emulator, "dynamodbstreams")
    stream_arn = dynamodb.describe_table(TableName="sharded")["Table"]["LatestStreamArn"]
    with pytest.raises(ClientError, match="ResourceNotFound"):
        streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId="shardId-00000001541626099285-00000000", ShardIteratorType="TRIM_HORIZON"
        )
    for bad in ("0", "65", "x"):
        monkeypatch.setenv(STREAM_SHARDS_VARIABLE, bad)
        with pytest.raises(ValueError, match=STREAM_SHARDS_VARIABLE):
            stream_shard_count()
