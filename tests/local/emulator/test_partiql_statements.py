"""PartiQL single-item statements in the emulator answer as DynamoDB documents (`fix_partiql_single_item_statements`).

Proven over HTTP against a real emulator (moto in server mode with the compat fixes), like
test_moto_compat.py. Each test uses tables of its own, so the module shares one emulator.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation import state_statements
from aggregation.names import QUARANTINE_RECORD_ID, TRADE_ID
from local.emulator import partiql_statements
from tests.local.emulator.test_moto_compat import create_table, stream_records

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.literals import KeyTypeType
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient


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


# ------------------------------------------------------------------------ parsing


@settings(max_examples=200, deadline=None, database=None)
@given(name=st.text(min_size=1, max_size=12), text=st.text(max_size=12))
def test_quoted_names_and_string_literals_read_back_exactly(name: str, text: str) -> None:
    """A ``"name"`` doubles its ``"``, a ``'string'`` its ``'``; any other character is itself."""
    quoted_name = '"' + name.replace('"', '""') + '"'
    literal = "'" + text.replace("'", "''") + "'"

    statement = partiql_statements.parse(
        f"UPDATE {quoted_name} SET {quoted_name} = {literal} WHERE k = ?", [{"N": "1"}]
    )

    assert statement == partiql_statements.Update(
        table=name,
        assignments=((partiql_statements.Path((name,)), {"S": text}),),
        removals=(),
        where=partiql_statements.Comparison(partiql_statements.Path(("k",)), "=", {"N": "1"}),
    )


# -------------------------------------------------------------- single statements


def execute(dynamodb: DynamoDBClient, statement: str, *parameters: dict[str, Any], **extra: Any) -> list[Any]:
    arguments: dict[str, Any] = {"Statement": statement, **extra}
    if parameters:
        arguments["Parameters"] = list(parameters)
    items: list[Any] = dynamodb.execute_statement(**arguments)["Items"]
    return items


def refusal(dynamodb: DynamoDBClient, statement: str, *parameters: dict[str, Any], **extra: Any) -> ClientError:
    with pytest.raises(ClientError) as refused:
        execute(dynamodb, statement, *parameters, **extra)
    return refused.value


def test_execute_statement_insert_of_an_existing_key_raises_duplicate_item_exception(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    assert execute(dynamodb, f"INSERT INTO \"{table}\" VALUE {{'pk': 'k', 'n': 1}}") == []

    error = refusal(dynamodb, f"INSERT INTO \"{table}\" VALUE {{'pk': 'k', 'n': 2}}")

    assert error.response["Error"]["Code"] == "DuplicateItemException"
    assert item(dynamodb, table, "k") == {"pk": {"S": "k"}, "n": {"N": "1"}}


def test_execute_statement_failed_condition_raises_conditional_check_failed_with_the_item_under_all_old(
    dynamodb: DynamoDBClient,
) -> None:
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k"}, "Version": {"N": "9"}})
    update = f'UPDATE "{table}" SET "Version" = ? WHERE "pk" = ? AND "Version" < ?'
    arguments = ({"N": "5"}, {"S": "k"}, {"N": "5"})

    with_item = refusal(dynamodb, update, *arguments, ReturnValuesOnConditionCheckFailure="ALL_OLD")
    without_item = refusal(dynamodb, update, *arguments)
    missing = refusal(
        dynamodb, update, {"N": "5"}, {"S": "absent"}, {"N": "5"}, ReturnValuesOnConditionCheckFailure="ALL_OLD"
    )

    assert with_item.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert with_item.response["Item"] == {"pk": {"S": "k"}, "Version": {"N": "9"}}  # type: ignore[typeddict-item]
    assert without_item.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert "Item" not in without_item.response
    assert missing.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert "Item" not in missing.response
    assert item(dynamodb, table, "absent") is None, "UPDATE never creates an item"


def test_update_accepts_repeated_set_clauses_comma_lists_and_remove(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    dynamodb.put_item(
        TableName=table, Item={"pk": {"S": "k"}, "gone": {"S": "x"}, "m": {"M": {"l": {"L": [{"N": "1"}]}}}}
    )

    execute(
        dynamodb,
        f"UPDATE \"{table}\" SET a = 1, \"b\" = 'two' SET c = ? REMOVE gone SET m.l[0] = {{'x': [TRUE, NULL]}} "
        "WHERE pk = 'k'",
        {"SS": ["p", "q"]},
    )

    assert item(dynamodb, table, "k") == {
        "pk": {"S": "k"},
        "a": {"N": "1"},
        "b": {"S": "two"},
        "c": {"SS": ["p", "q"]},
        "m": {"M": {"l": {"L": [{"M": {"x": {"L": [{"BOOL": True}, {"NULL": True}]}}}]}}},
    }


def test_delete_of_a_missing_item_succeeds_and_of_an_item_failing_its_condition_fails(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k"}, "n": {"N": "2"}})

    assert execute(dynamodb, f"DELETE FROM \"{table}\" WHERE pk = 'absent' AND n = 1") == []
    failed = refusal(
        dynamodb, f"DELETE FROM \"{table}\" WHERE pk = 'k' AND n = 1", ReturnValuesOnConditionCheckFailure="ALL_OLD"
    )
    assert failed.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert failed.response["Item"] == {"pk": {"S": "k"}, "n": {"N": "2"}}  # type: ignore[typeddict-item]
    assert item(dynamodb, table, "k") is not None

    assert execute(dynamodb, f"DELETE FROM \"{table}\" WHERE pk = 'k' AND n = 2") == []
    assert item(dynamodb, table, "k") is None


def test_select_reads_one_item_by_its_full_key(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k"}, "a": {"N": "1"}, "b": {"S": "x"}})

    assert execute(dynamodb, f'SELECT * FROM "{table}" WHERE pk = ?', {"S": "k"}) == [
        {"pk": {"S": "k"}, "a": {"N": "1"}, "b": {"S": "x"}}
    ]
    assert execute(dynamodb, f"SELECT a FROM \"{table}\" WHERE pk = 'k'") == [{"a": {"N": "1"}}]
    assert execute(dynamodb, f"SELECT * FROM \"{table}\" WHERE pk = 'absent'") == []
    responses = dynamodb.batch_execute_statement(
        Statements=[
            {"Statement": f"SELECT * FROM \"{table}\" WHERE pk = 'k'"},
            {"Statement": f"SELECT * FROM \"{table}\" WHERE pk = 'absent'"},
        ]
    )["Responses"]
    assert responses == [
        {"TableName": table, "Item": {"pk": {"S": "k"}, "a": {"N": "1"}, "b": {"S": "x"}}},
        {"TableName": table},
    ]


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        ("n = 2", True),
        ("n <> 2", False),
        ("n < 3 AND s >= 'b'", True),
        ("n > 2 OR s <= 'a'", False),
        ("n > 2 OR (s = 'b' AND NOT n = 5)", True),
        ("NOT (n = 2 OR n = 3)", False),
        ("3 > n", True),
        ("absent IS MISSING AND n IS NOT MISSING", True),
        ("n IS MISSING", False),
        ("m.inner = ? AND l[1] = 'y'", True),
    ],
)
def test_update_conditions_compare_and_combine_as_dynamodb_does(
    dynamodb: DynamoDBClient, condition: str, holds: bool
) -> None:
    table = create_table(dynamodb)
    stored: dict[str, Any] = {
        "pk": {"S": "k"},
        "n": {"N": "2"},
        "s": {"S": "b"},
        "m": {"M": {"inner": {"N": "7"}}},
        "l": {"L": [{"S": "x"}, {"S": "y"}]},
    }
    dynamodb.put_item(TableName=table, Item=stored)
    statement = f"UPDATE \"{table}\" SET touched = TRUE WHERE pk = 'k' AND ({condition})"
    parameters = ({"N": "7"},) if "?" in condition else ()

    if holds:
        execute(dynamodb, statement, *parameters)
        assert item(dynamodb, table, "k") == {**stored, "touched": {"BOOL": True}}
    else:
        assert refusal(dynamodb, statement, *parameters).response["Error"]["Code"] == "ConditionalCheckFailedException"
        assert item(dynamodb, table, "k") == stored


@pytest.mark.parametrize(
    ("statement", "parameters", "says"),
    [
        ("UPDATE \"{table}\" SET n = ? WHERE pk = 'k'", ({"N": "1"}, {"N": "2"}), "Number of parameters"),
        ('UPDATE "{table}" SET n = 1 WHERE n = 1', (), "mandatory equality on all key attributes"),
        ("UPDATE \"{table}\" SET n = 1 WHERE pk = 'k' OR pk = 'j'", (), "mandatory equality on all key attributes"),
        ('DELETE FROM "{table}" WHERE n = 1', (), "mandatory equality on all key attributes"),
        ("INSERT INTO \"{table}\" VALUE {{'n': 1}}", (), "Missing the key pk"),
        ("UPDATE \"{table}\" SET pk = 'other' WHERE pk = 'k'", (), "part of the key"),
    ],
)
def test_statements_dynamodb_refuses_get_its_validation_exception_and_change_nothing(
    dynamodb: DynamoDBClient, statement: str, parameters: tuple[dict[str, Any], ...], says: str
) -> None:
    """A write names one item: "this condition must resolve to a single primary key value"
    (Developer Guide, ql-reference.update / ql-reference.delete)."""
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k"}, "n": {"N": "1"}, "s": {"S": "a"}})

    error = refusal(dynamodb, statement.format(table=table), *parameters)

    assert error.response["Error"]["Code"] == "ValidationException"
    assert says in error.response["Error"]["Message"]
    assert item(dynamodb, table, "k") == {"pk": {"S": "k"}, "n": {"N": "1"}, "s": {"S": "a"}}


def create_keyed_table(dynamodb: DynamoDBClient, sort_key: str | None = None, index: str | None = None) -> str:
    """A table keyed by ``pk`` (and `sort_key`), with a global secondary index `index` keyed by ``g``."""
    name = f"compat-{uuid.uuid4().hex[:12]}"
    keys: list[tuple[str, KeyTypeType]] = [("pk", "HASH")]
    if sort_key:
        keys.append((sort_key, "RANGE"))
    extra: dict[str, Any] = {}
    if index is not None:
        extra["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index,
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": attribute, "KeyType": kind} for attribute, kind in keys],
        AttributeDefinitions=[
            {"AttributeName": attribute, "AttributeType": "S"}
            for attribute in ("pk", *([sort_key] if sort_key else []), *(["g"] if index else []))
        ],
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )
    return name


def test_a_delete_naming_only_the_partition_key_of_a_table_with_a_sort_key_is_refused(
    dynamodb: DynamoDBClient,
) -> None:
    """ql-reference.delete: "this condition must resolve to a single primary key value" ("You cannot
    issue a single DynamoDB PartiQL statement that deletes multiple items"); moto deletes the partition."""
    table = create_keyed_table(dynamodb, sort_key="sk")
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "msg"}, "sk": {"S": "sth"}})

    error = refusal(dynamodb, f"DELETE FROM \"{table}\" WHERE pk='msg'")

    assert error.response["Error"]["Code"] == "ValidationException"
    assert "mandatory equality on all key attributes" in error.response["Error"]["Message"]
    assert dynamodb.scan(TableName=table)["Items"] == [{"pk": {"S": "msg"}, "sk": {"S": "sth"}}]


PRICED: list[dict[str, Any]] = [
    {"pk": {"S": "a"}, "g": {"S": "x"}, "name": {"S": "lambda code"}, "price": {"N": "1"}},
    {"pk": {"S": "b"}, "name": {"S": "ec2"}, "price": {"N": "7.2"}, "free": {"NULL": True}},
    {"pk": {"S": "c"}, "g": {"S": "y"}, "name": {"S": "config"}, "price": {"S": "0.003"}},
]


def sorted_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda found: str(found.get("pk")))


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        # "If you omit the WHERE clause, then all of the items in the table will be retrieved." (ql-reference.select)
        ('SELECT * FROM "{table}"', PRICED),
        ('SELECT name FROM "{table}"', [{"name": item["name"]} for item in PRICED]),
        ('SELECT * FROM "{table}"."by_g"', [PRICED[0], PRICED[2]]),
        (
            'SELECT pk FROM "{table}" WHERE contains("name", \'code\') OR contains("name", \'fig\')',
            [{"pk": {"S": "a"}}, {"pk": {"S": "c"}}],
        ),
        ('SELECT pk FROM "{table}" WHERE attribute_type("price", \'N\')', [{"pk": {"S": "a"}}, {"pk": {"S": "b"}}]),
        # moto's engine answers IN with the first match only (docs/moto-upstream.md): one value here
        ("SELECT pk FROM \"{table}\" WHERE pk IN ['c']", [{"pk": {"S": "c"}}]),
        ("SELECT * FROM \"{table}\" WHERE pk = 'b' AND price > 7", [PRICED[1]]),
        ("SELECT * FROM \"{table}\" WHERE pk = 'b' AND price > 8", []),
        ("SELECT * FROM \"{table}\" WHERE pk = 'b' AND free IS NOT MISSING AND g IS MISSING", [PRICED[1]]),
    ],
)
def test_reads_beyond_one_item_are_answered_as_dynamodb_documents(
    dynamodb: DynamoDBClient, statement: str, expected: list[dict[str, Any]]
) -> None:
    """The fast path answers reads of one item (or a partition, by Query); every other SELECT is moto's own."""
    table = create_keyed_table(dynamodb, index="by_g")
    for stored in PRICED:
        dynamodb.put_item(TableName=table, Item=stored)

    found = execute(dynamodb, statement.format(table=table))

    assert sorted_items(found) == sorted_items(expected)


def test_reads_of_a_partition_are_queries_in_sort_key_order(dynamodb: DynamoDBClient) -> None:
    table = create_keyed_table(dynamodb, sort_key="sk")
    for sort_key in ("b", "a", "c"):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": sort_key}, "n": {"N": "1"}})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "other"}, "sk": {"S": "a"}})

    found = execute(dynamodb, f"SELECT sk FROM \"{table}\" WHERE pk = 'p' AND n = 1")

    assert found == [{"sk": {"S": "a"}}, {"sk": {"S": "b"}}, {"sk": {"S": "c"}}]


def test_a_select_of_an_unknown_table_or_index_answers_dynamodb_s_error_codes(dynamodb: DynamoDBClient) -> None:
    table = create_keyed_table(dynamodb)
    missing = f"{table}-missing"

    for statement in (f'SELECT * FROM "{missing}"', f"SELECT * FROM \"{missing}\" WHERE pk = 'k'"):
        error = refusal(dynamodb, statement)
        assert error.response["Error"]["Code"] == "ResourceNotFoundException", statement
    unknown_index = refusal(dynamodb, f'SELECT * FROM "{table}"."nope"')
    assert unknown_index.response["Error"]["Code"] == "ValidationException"
    assert unknown_index.response["Error"]["Message"] == "The table does not have the specified index"


def test_unquoted_table_names_with_hyphens_name_the_table(dynamodb: DynamoDBClient) -> None:
    table = create_keyed_table(dynamodb)  # compat-<hex>: a hyphen, read by moto's engine

    execute(dynamodb, f"INSERT INTO {table} VALUE {{'pk': 'k', 'n': 1}}")
    execute(dynamodb, f'UPDATE {table} SET "n" = ? WHERE "pk" = ?', {"N": "2"}, {"S": "k"})

    assert execute(dynamodb, f"SELECT * FROM {table}") == [{"pk": {"S": "k"}, "n": {"N": "2"}}]
    responses = dynamodb.batch_execute_statement(Statements=[{"Statement": f"SELECT n FROM {table} WHERE pk = 'k'"}])
    assert responses["Responses"] == [{"TableName": table, "Item": {"n": {"N": "2"}}}]


@pytest.mark.parametrize(
    ("statement", "says"),
    [
        ("UPDATE \"{table}\" SET n = 1 WHERE pk = 'k' AND begins_with(s, 'a')", "'('"),
        ("UPDATE \"{table}\" SET n = n + 1 WHERE pk = 'k'", "SET <path> = <value> only"),
        ("DELETE FROM \"{table}\" WHERE pk = 'k' RETURNING ALL OLD *", "RETURNING"),
        ('MERGE INTO "{table}"', "expected INSERT, UPDATE, DELETE or SELECT"),
    ],
)
def test_writes_neither_the_fast_path_nor_moto_understands_are_refused_saying_what(
    dynamodb: DynamoDBClient, statement: str, says: str
) -> None:
    """Never a silently different answer: ValidationException naming what was not understood, nothing written."""
    table = create_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k"}, "n": {"N": "1"}, "s": {"S": "a"}})

    error = refusal(dynamodb, statement.format(table=table))

    assert error.response["Error"]["Code"] == "ValidationException"
    assert says in error.response["Error"]["Message"]
    assert item(dynamodb, table, "k") == {"pk": {"S": "k"}, "n": {"N": "1"}, "s": {"S": "a"}}


def test_the_pipeline_s_statements_are_all_on_the_fast_path() -> None:
    """The state function's and the quarantine's statements translate to one item request each (constant
    time, whatever the table holds): none is handed to moto's engine, which reads every item of every table."""
    texts = state_statements.statement_texts("StateTable")
    quarantine_text = state_statements.insert_text("QuarantineTable", (QUARANTINE_RECORD_ID, "Reason", "Payload"))
    for text in (*vars(texts).values(), quarantine_text):
        parameters = [{"S": "p"}] * text.count("?")
        parsed = partiql_statements.parse(text, parameters)
        key_names = [QUARANTINE_RECORD_ID] if text is quarantine_text else [TRADE_ID]
        operation, _ = partiql_statements.item_request(parsed, key_names)
        assert operation in ("PutItem", "UpdateItem"), text


# ------------------------------------------------------------------- batch rules


def test_a_batch_mixing_reads_and_writes_or_naming_one_item_twice_is_refused_whole(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    read = {"Statement": f"SELECT * FROM \"{table}\" WHERE pk = 'a'"}
    twice = [insert(table, "b", "1"), newer_version(table, "b", "2", "1")]

    for statements in ([insert(table, "a", "1"), read], twice):
        with pytest.raises(ClientError) as refused:
            dynamodb.batch_execute_statement(Statements=statements)  # type: ignore[arg-type]
        assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert dynamodb.scan(TableName=table)["Items"] == [], "nothing written"


def test_a_batch_naming_one_number_key_in_two_spellings_is_refused(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb, key_type="N")
    statement = f"INSERT INTO \"{table}\" VALUE {{'pk': ?}}"

    with pytest.raises(ClientError) as refused:
        dynamodb.batch_execute_statement(
            Statements=[
                {"Statement": statement, "Parameters": [{"N": "1"}]},
                {"Statement": statement, "Parameters": [{"N": "1.0E0"}]},
            ]
        )

    assert refused.value.response["Error"]["Message"] == "Provided list of item keys contains duplicates"
    assert dynamodb.scan(TableName=table)["Items"] == []


def test_each_statement_of_a_batch_fails_on_its_own_and_the_others_run(dynamodb: DynamoDBClient) -> None:
    table = create_table(dynamodb)
    missing_table = f"{table}-missing"

    responses = dynamodb.batch_execute_statement(
        Statements=[
            {"Statement": "this is not PartiQL"},
            insert(missing_table, "a", "1"),  # type: ignore[list-item]
            insert(table, "a", "1"),  # type: ignore[list-item]
            {"Statement": f"UPDATE \"{table}\" SET x = 1 WHERE pk = 'a' AND y = 1 OR z = 2"},
        ]
    )["Responses"]

    assert responses[0]["Error"]["Code"] == "ValidationError"
    assert responses[1]["Error"]["Code"] == "ResourceNotFound"
    assert responses[1]["TableName"] == missing_table
    assert responses[2] == {"TableName": table}
    assert responses[3]["Error"]["Code"] == "ValidationError", "an OR at the top leaves no single key"
    assert item(dynamodb, table, "a") is not None


# ---------------------------------------------------------------- stream records


def change_records(dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient, table: str) -> list[dict[str, Any]]:
    """The table's stream records as what they say about the change (no ids, times or sizes)."""
    return [
        {
            "eventName": record["eventName"],
            **{part: record["dynamodb"].get(part) for part in ("Keys", "NewImage", "OldImage", "StreamViewType")},
        }
        for record in stream_records(dynamodb, streams, table)
    ]


def test_statements_emit_the_stream_records_the_equivalent_item_requests_emit(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient
) -> None:
    partiql = create_table(dynamodb, "NEW_AND_OLD_IMAGES")
    requests = create_table(dynamodb, "NEW_AND_OLD_IMAGES")

    dynamodb.batch_execute_statement(Statements=[insert(partiql, "k", "1")])  # type: ignore[list-item]
    dynamodb.batch_execute_statement(Statements=[newer_version(partiql, "k", "2", "7.25")])  # type: ignore[list-item]
    dynamodb.batch_execute_statement(Statements=[newer_version(partiql, "k", "1", "0")])  # type: ignore[list-item]
    execute(dynamodb, f'UPDATE "{partiql}" REMOVE "Value" WHERE pk = \'k\'')
    execute(dynamodb, f"DELETE FROM \"{partiql}\" WHERE pk = 'k'")
    execute(dynamodb, f"DELETE FROM \"{partiql}\" WHERE pk = 'k'")

    key = {"pk": {"S": "k"}}
    dynamodb.put_item(
        TableName=requests,
        Item={**key, "Version": {"N": "1"}, "Value": {"N": "1"}},
        ConditionExpression="attribute_not_exists(pk)",
    )
    dynamodb.update_item(
        TableName=requests,
        Key=key,
        UpdateExpression="SET Version = :v, #value = :value",
        ConditionExpression="attribute_exists(pk) AND Version < :v",
        ExpressionAttributeNames={"#value": "Value"},
        ExpressionAttributeValues={":v": {"N": "2"}, ":value": {"N": "7.25"}},
    )
    with pytest.raises(ClientError):
        dynamodb.update_item(
            TableName=requests,
            Key=key,
            UpdateExpression="SET Version = :v",
            ConditionExpression="attribute_exists(pk) AND Version < :v",
            ExpressionAttributeValues={":v": {"N": "1"}},
        )
    dynamodb.update_item(
        TableName=requests, Key=key, UpdateExpression="REMOVE #value", ExpressionAttributeNames={"#value": "Value"}
    )
    dynamodb.delete_item(TableName=requests, Key=key)
    dynamodb.delete_item(TableName=requests, Key=key)

    emitted = change_records(dynamodb, streams, partiql)
    assert [record["eventName"] for record in emitted] == ["INSERT", "MODIFY", "MODIFY", "REMOVE"]
    assert emitted == change_records(dynamodb, streams, requests)


# ------------------------------------------------------- property: as item requests do


@dataclass(frozen=True)
class Write:
    """An INSERT (``comparison`` None) or a conditional UPDATE of one of a few keys."""

    key: str
    version: int
    value: str
    comparison: str | None  # UPDATE ... AND "Version" <comparison> ?
    remove_value: bool
    repeated_set: bool  # SET a = ? SET b = ? rather than SET a = ?, b = ?


numbers = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.decimals(min_value=-(10**20), max_value=10**20, places=9, allow_nan=False, allow_infinity=False).map(str),
)
writes = st.builds(
    Write,
    key=st.sampled_from(("a", "b", "c")),
    version=st.integers(0, 4),
    value=numbers,
    comparison=st.sampled_from((None, "<", "<=", "=", "<>", ">", ">=")),
    remove_value=st.booleans(),
    repeated_set=st.booleans(),
)
Outcome = tuple[str, Any] | None
"""None: applied; else the error code and the item returned with it (None when none)."""


def as_statement(table: str, prefix: str, write: Write) -> dict[str, Any]:
    key = {"S": prefix + write.key}
    if write.comparison is None:
        return {
            "Statement": f"INSERT INTO \"{table}\" VALUE {{'pk': ?, 'Version': ?, 'Value': ?}}",
            "Parameters": [key, {"N": str(write.version)}, {"N": write.value}],
        }
    if write.remove_value:
        changes, parameters = 'SET "Version" = ? REMOVE "Value"', [{"N": str(write.version)}]
    else:
        separator = " SET " if write.repeated_set else ", "
        changes, parameters = (
            f'SET "Version" = ?{separator}"Value" = ?',
            [{"N": str(write.version)}, {"N": write.value}],
        )
    return {
        "Statement": f'UPDATE "{table}" {changes} WHERE "pk" = ? AND "Version" {write.comparison} ?',
        "Parameters": [*parameters, key, {"N": str(write.version)}],
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def as_item_request(dynamodb: DynamoDBClient, table: str, prefix: str, write: Write) -> Outcome:
    key = {"pk": {"S": prefix + write.key}}
    version = {"N": str(write.version)}
    try:
        if write.comparison is None:
            dynamodb.put_item(
                TableName=table,
                Item={**key, "Version": version, "Value": {"N": write.value}},
                ConditionExpression="attribute_not_exists(pk)",
            )
            return None
        values: dict[str, Any] = {":version": version}
        if write.remove_value:
            update = "SET Version = :version REMOVE #value"
        else:
            update, values[":value"] = "SET Version = :version, #value = :value", {"N": write.value}
        dynamodb.update_item(
            TableName=table,
            Key=key,
            UpdateExpression=update,
            ConditionExpression=f"attribute_exists(pk) AND Version {write.comparison} :version",
            ExpressionAttributeNames={"#value": "Value"},
            ExpressionAttributeValues=values,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return None
    except ClientError as error:
        assert error.response["Error"]["Code"] == "ConditionalCheckFailedException"
        code = "DuplicateItem" if write.comparison is None else "ConditionalCheckFailed"
        return code, None if write.comparison is None else error.response.get("Item")


def batches(sequence: list[Write]) -> list[list[Write]]:
    """`sequence` cut, in order, into batches of at most 25 writes on distinct keys."""
    cut: list[list[Write]] = []
    for write in sequence:
        if not cut or len(cut[-1]) == 25 or any(other.key == write.key for other in cut[-1]):
            cut.append([])
        cut[-1].append(write)
    return cut


def as_statements(
    dynamodb: DynamoDBClient, table: str, prefix: str, sequence: list[Write], batched: bool
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    if batched:
        for batch in batches(sequence):
            statements = [as_statement(table, prefix, write) for write in batch]
            for response in dynamodb.batch_execute_statement(Statements=statements)["Responses"]:  # type: ignore[arg-type]
                error = response.get("Error")
                outcomes.append(None if error is None else (error["Code"], error.get("Item")))
        return outcomes
    for write in sequence:
        try:
            dynamodb.execute_statement(**as_statement(table, prefix, write))
            outcomes.append(None)
        except ClientError as error:
            code = error.response["Error"]["Code"].removesuffix("Exception")
            outcomes.append((code, error.response.get("Item")))
    return outcomes


@pytest.fixture(scope="module")
def twin_tables(dynamodb: DynamoDBClient) -> tuple[str, str]:
    """One table written by statements, one by the equivalent item requests (keys prefixed per example)."""
    return create_table(dynamodb), create_table(dynamodb)


@settings(max_examples=30, deadline=None, database=None)
@given(sequence=st.lists(writes, min_size=1, max_size=12), batched=st.booleans())
def test_inserts_and_updates_leave_the_table_as_the_equivalent_item_requests_do(
    dynamodb: DynamoDBClient, twin_tables: tuple[str, str], sequence: list[Write], batched: bool
) -> None:
    statements_table, requests_table = twin_tables
    prefix = f"{uuid.uuid4().hex[:8]}-"

    by_statements = as_statements(dynamodb, statements_table, prefix, sequence, batched)
    by_requests = [as_item_request(dynamodb, requests_table, prefix, write) for write in sequence]

    assert by_statements == by_requests
    for key in ("a", "b", "c"):
        assert item(dynamodb, statements_table, prefix + key) == item(dynamodb, requests_table, prefix + key)
