"""Write-cost accounting: DynamoDB item sizes, write units, and counting a client's real calls."""

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError

from benchmarks.stubbed_dynamodb import CannedResponses, SimulatedRoundTrip
from benchmarks.write_units import (
    WriteCallCounter,
    request_write_units,
    summarise_calls,
    updated_item_size_bytes,
    write_units,
)


@pytest.mark.parametrize(
    ("size", "standard", "transactional"), [(1, 1, 2), (1024, 1, 2), (1025, 2, 4), (4 * 1024 + 1, 5, 10)]
)
def test_write_units_are_per_started_kilobyte_and_double_in_a_transaction(
    size: int, standard: int, transactional: int
) -> None:
    assert write_units(size) == standard
    assert write_units(size, transactional=True) == transactional


def test_an_update_is_sized_by_its_key_and_the_values_it_sets() -> None:
    size = updated_item_size_bytes(
        {"AggregateKey": {"S": "Delta"}},
        {"#value": "Value", "#count": "TradeCount"},
        {":value": {"N": "12.5"}, ":count": {"N": "1"}},
    )
    assert size == (12 + 5) + (5 + 3) + (10 + 2)


def _transaction(actions: int) -> dict[str, Any]:
    update = {
        "Update": {
            "TableName": "t",
            "Key": {"AggregateKey": {"S": "Delta"}},
            "UpdateExpression": "ADD #value :value",
            "ExpressionAttributeNames": {"#value": "Value"},
            "ExpressionAttributeValues": {":value": {"N": "1"}},
        }
    }
    return {"TransactItems": [update] * actions}


def test_a_transaction_costs_two_units_per_small_item() -> None:
    assert request_write_units("TransactWriteItems", _transaction(3)) == (3, 6)


def test_a_large_put_costs_one_unit_per_started_kilobyte() -> None:
    item = {"BatchHash": {"S": "h"}, "Payload": {"S": "x" * 3000}}
    assert request_write_units("PutItem", {"Item": item}) == (1, 3)


def test_a_batch_write_costs_each_item() -> None:
    requests = [{"PutRequest": {"Item": {"RecordId": {"S": str(n)}}}} for n in range(4)]
    assert request_write_units("BatchWriteItem", {"RequestItems": {"q": requests}}) == (4, 4)


def test_reads_are_not_writes() -> None:
    with pytest.raises(ValueError, match="not a write"):
        request_write_units("GetItem", {})


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    yield boto3.client("dynamodb", endpoint_url="https://dynamodb.test.invalid")


def _update(client: Any, trade_id: str) -> None:
    client.update_item(
        TableName="state",
        Key={"TradeID": {"S": trade_id}},
        UpdateExpression="SET #version = :version",
        ConditionExpression="attribute_not_exists(TradeID) OR #version < :version",
        ExpressionAttributeNames={"#version": "Version"},
        ExpressionAttributeValues={":version": {"N": "2"}},
    )


def test_the_counter_counts_every_write_a_client_sends_by_stage(client: Any) -> None:
    counter = WriteCallCounter()
    counter.attach(client)
    CannedResponses().attach(client)
    with counter.labelled("state"):
        _update(client, "a")
        _update(client, "b")
    with counter.labelled("reduce"):
        client.transact_write_items(**_transaction(2))
    client.describe_limits()  # not a write: not counted
    stages = counter.by_stage()
    assert (stages["state"].requests, stages["state"].write_units) == (2, 2)
    assert (stages["reduce"].requests, stages["reduce"].items, stages["reduce"].write_units) == (1, 2, 4)
    assert counter.calls[0].params["ReturnConsumedCapacity"] == "TOTAL"  # asked, for the cross-check


def test_a_failed_condition_is_counted_and_still_costs_its_units(client: Any) -> None:
    counter = WriteCallCounter()
    counter.attach(client)

    def condition_failed(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        parsed = {
            "Error": {"Code": "ConditionalCheckFailedException", "Message": "no"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://dynamodb.test.invalid/", 400, HTTPHeaders(), None), parsed

    client.meta.events.register("before-call.dynamodb", condition_failed)
    with counter.labelled("state"), pytest.raises(ClientError):
        _update(client, "a")
    cost = summarise_calls(counter.calls)["state"]
    assert (cost.requests, cost.failed_conditions, cost.write_units) == (1, 1, 1)


def test_the_simulated_round_trip_answers_after_the_delay_without_a_network(client: Any) -> None:
    simulator = SimulatedRoundTrip(0.01)
    simulator.attach(client)
    _update(client, "a")  # would fail to resolve the .invalid host if it went on the wire
    assert simulator.requests == 1
    simulator.detach(client)
