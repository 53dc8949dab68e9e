"""PartiQL single-item statements in the emulator answer as DynamoDB documents (`fix_partiql_single_item_statements`).

Proven over HTTP against a real emulator (moto in server mode with the compat fixes), like
test_moto_compat.py. Each test uses tables of its own, so the module shares one emulator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from tests.local.emulator.test_moto_compat import create_table

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def item(dynamodb: DynamoDBClient, table: str, key: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get(
        "Item"
    )
    return found


def insert(table: str, key: str, version: str) -> dict[str, Any]:
    return {
        "Statement": f"INSERT INTO \"{table}\" VALUE {{'pk': ?, 'Version': ?, 'Value': ?}}",
        "Parameters": [{"S": key}, {"N": version}, {"N": "1"}],
    }


def newer_version(table: str, key: str, version: str, value: str) -> dict[str, Any]:
    """UPDATE of an existing item holding an older version, the stored item returned on failure."""
    return {
        "Statement": f'UPDATE "{table}" SET "Version" = ?, "Value" = ? WHERE "pk" = ? AND "Version" < ?',
        "Parameters": [{"N": version}, {"N": value}, {"S": key}, {"N": version}],
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


# ------------------------------------------------------------------ batch writes


def test_batch_insert_writes_new_items_and_answers_duplicate_item_for_an_existing_key(
    dynamodb: DynamoDBClient,
) -> None:
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "old"}, "Version": {"N": "7"}})

    responses = dynamodb.batch_execute_statement(
        Statements=[insert(table, "new", "1"), insert(table, "old", "2")]  # type: ignore[list-item]
    )["Responses"]

    assert responses[0] == {"TableName": table}
    assert responses[1]["TableName"] == table
    assert responses[1]["Error"]["Code"] == "DuplicateItem"
    assert "Item" not in responses[1]["Error"]
    assert item(dynamodb, table, "new") == {"pk": {"S": "new"}, "Version": {"N": "1"}, "Value": {"N": "1"}}
    assert item(dynamodb, table, "old") == {"pk": {"S": "old"}, "Version": {"N": "7"}}, "not overwritten"


def test_batch_conditional_update_applies_when_the_condition_holds_and_returns_the_item_when_it_fails(
    dynamodb: DynamoDBClient,
) -> None:
    table = create_table(dynamodb)
    for key, version in (("older", "3"), ("newer", "9")):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": key}, "Version": {"N": version}, "Value": {"N": "0"}})

    responses = dynamodb.batch_execute_statement(
        Statements=[newer_version(table, "older", "5", "2.5"), newer_version(table, "newer", "5", "2.5")]  # type: ignore[list-item]
    )["Responses"]

    assert responses[0] == {"TableName": table}
    assert item(dynamodb, table, "older") == {"pk": {"S": "older"}, "Version": {"N": "5"}, "Value": {"N": "2.5"}}
    failed = responses[1]["Error"]
    assert failed["Code"] == "ConditionalCheckFailed"
    assert failed["Item"] == {"pk": {"S": "newer"}, "Version": {"N": "9"}, "Value": {"N": "0"}}
    assert item(dynamodb, table, "newer") == failed["Item"], "unchanged"


def test_batch_conditional_update_of_a_missing_item_fails_without_an_item_and_creates_nothing(
    dynamodb: DynamoDBClient,
) -> None:
    table = create_table(dynamodb)

    (response,) = dynamodb.batch_execute_statement(
        Statements=[newer_version(table, "absent", "1", "1")]  # type: ignore[list-item]
    )["Responses"]

    assert response["Error"]["Code"] == "ConditionalCheckFailed"
    assert "Item" not in response["Error"]
    assert item(dynamodb, table, "absent") is None


def test_batch_failed_condition_without_all_old_carries_no_item(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k"}, "Version": {"N": "9"}})
    statement = newer_version(table, "k", "1", "1")
    del statement["ReturnValuesOnConditionCheckFailure"]

    (response,) = dynamodb.batch_execute_statement(Statements=[statement])["Responses"]  # type: ignore[list-item]

    assert response["Error"]["Code"] == "ConditionalCheckFailed"
    assert "Item" not in response["Error"]


def test_numbers_stay_exact_through_parameters_and_literals(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    exact = "12345678901234567890.123456789"
    literal = "98765432109876543210.000000001"
    dynamodb.batch_execute_statement(
        Statements=[
            {
                "Statement": f"INSERT INTO \"{table}\" VALUE {{'pk': 'n', 'a': ?, 'b': {literal}}}",
                "Parameters": [{"N": exact}],
            }
        ]
    )
    dynamodb.batch_execute_statement(
        Statements=[
            {
                "Statement": f'UPDATE "{table}" SET c = ? WHERE pk = ? AND a = ?',
                "Parameters": [{"N": "-0.000000000000000000000000000000000001"}, {"S": "n"}, {"N": exact}],
            }
        ]
    )

    stored = item(dynamodb, table, "n")
    assert stored is not None
    assert stored["a"] == {"N": exact}
    assert stored["b"] == {"N": literal}
    assert stored["c"] == {"N": "-0.000000000000000000000000000000000001"}


def test_a_batch_of_more_than_25_statements_is_refused_whole(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)

    with pytest.raises(ClientError) as refused:
        dynamodb.batch_execute_statement(Statements=[insert(table, f"k{i}", "1") for i in range(26)])  # type: ignore[misc]

    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert dynamodb.scan(TableName=table)["Items"] == [], "nothing written"
