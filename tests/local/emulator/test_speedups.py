"""Each patch of `local.emulator.speedups` answers exactly as moto's own path does.

moto runs in this process behind its WSGI app (werkzeug's test client, no sockets), first
without a patch and then with it, on the same data; the patches are undone after each test
(`monkeypatch`), so nothing leaks into other tests in the process.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import decimal
import gc
import http.client
import json
import re
import statistics
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import backends as moto_backends
from moto.core import responses as moto_responses
from moto.core.common_models import BaseModel
from moto.core.responses import ActionContext, ActionResult
from moto.core.serialize import BaseJSONSerializer, TimestampSerializer, get_serializer_class
from moto.core.utils import get_service_model, unix_time
from moto.dynamodb import models as moto_models
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models import dynamo_type as dynamo_type_module
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import StreamShard, Table
from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node  # type: ignore[attr-defined]
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import UpdateExpressionValidator
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.models import ShardIterator
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.kinesis import models as kinesis_models
from moto.kinesis.models import Shard
from moto.kinesis.responses import KinesisResponse
from moto.moto_api._internal import mock_random
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.s3.models import FakeKey, S3Backend
from moto.s3.responses import S3Response
from moto.utilities.utils import CaseInsensitiveDict
from werkzeug.serving import make_server
from werkzeug.test import Client

from local.emulator import moto_compat, speedups

AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=x, Signature=y"
)
"""As botocore signs DynamoDB and DynamoDB Streams requests (both scoped to ``dynamodb``)."""
PATCHED: tuple[tuple[Any, str], ...] = (
    (LimitedSizeDict, "__setitem__"),
    (DynamoType, "__init__"),
    (DynamoType, "to_regular_json"),
    (BaseJSONSerializer, "_serialize_type_structure"),
    (DepthFirstTraverser, "traverse_node_recursively"),
    (Node, "find_clauses"),
    (BaseModel, "__new__"),
    (StreamShard, "add"),
    (ShardIterator, "__init__"),
    (ShardIterator, "arn"),
    (DynamoDBStreamsHandler, "get_records"),
    (UpdateExpressionParser, "make"),
    (ConditionExpressionParser, "_lex_condition_expression"),
    (DynamoDBBackend, "update_item"),
    (moto_models, "UpdateExpressionValidator"),
    (speedups._ValidateNewItemOnce, "structure_checked"),
    (DynamoType, "size"),
    (Item, "__init__"),
    (Table, "scan"),
    (Table, "all_items"),
    (moto_backends, "list_of_moto_modules"),
    (moto_responses, "method_names_from_class"),
    (moto_responses, "gen_amzn_requestid_long"),
    (Shard, "get_records"),
    (Shard, "get_min_sequence_number"),
    (Shard, "get_max_sequence_number"),
)


class Moto:
    """moto's server app in this process: ``call("DynamoDB_20120810.PutItem", {...})``."""

    def __init__(self) -> None:
        self.client = Client(DomainDispatcherApplication(create_backend_app))

    def raw(self, target: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        try:
            response = self.client.post(
                "/",
                data=json.dumps(body),
                headers={
                    "X-Amz-Target": target,
                    "Content-Type": "application/x-amz-json-1.0",
                    "Host": "127.0.0.1:5000",
                    "Authorization": AUTHORIZATION,
                },
            )
        except Exception as error:  # moto's unhandled errors: the server answers 500, the test client raises
            return 500, {}, json.dumps({"unhandled": type(error).__name__, "message": str(error)}).encode()
        return response.status_code, dict(response.headers), response.get_data()

    def call(self, target: str, body: dict[str, Any]) -> Any:
        status, _, data = self.raw(target, body)
        assert status == 200, data
        return json.loads(data)


@pytest.fixture
def moto() -> Moto:
    moto_compat.apply()
    return Moto()


@pytest.fixture
def moto_s_own(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """moto's own function of every attribute a speedup replaces (``"Owner.name"``); all put back after the test."""
    originals: dict[str, Any] = {}
    for owner, name in PATCHED:
        original = vars(owner)[name]  # a classmethod as such, not bound
        originals[f"{owner.__name__}.{name}"] = original
        monkeypatch.setattr(owner, name, original)
    monkeypatch.setattr(Node, "__deepcopy__", None, raising=False)  # moto's has none: deepcopy's generic path
    monkeypatch.delattr(ShardIterator, "id", raising=False)  # moto's is an instance attribute
    validator = moto_models.UpdateExpressionValidator  # type: ignore[attr-defined]
    assert validator is UpdateExpressionValidator, "a speedup leaked from another test"
    yield originals


def table_with_stream(moto: Moto, view_type: str = "NEW_AND_OLD_IMAGES") -> tuple[str, str, str]:
    """(table name, stream ARN, shard id) of a new table with a stream."""
    name = f"speed-{uuid.uuid4().hex[:10]}"
    moto.call(
        "DynamoDB_20120810.CreateTable",
        {
            "TableName": name,
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
            "StreamSpecification": {"StreamEnabled": True, "StreamViewType": view_type},
        },
    )
    arn = moto.call("DynamoDB_20120810.DescribeTable", {"TableName": name})["Table"]["LatestStreamArn"]
    shards = moto.call("DynamoDBStreams_20120810.DescribeStream", {"StreamArn": arn})["StreamDescription"]["Shards"]
    return name, arn, shards[0]["ShardId"]


def write_every_kind_of_change(moto: Moto, table: str) -> None:
    """INSERT, MODIFY and REMOVE records with every attribute type, non-ASCII text and blobs."""
    item = {
        "pk": {"S": "caf\u00e9"},
        "n": {"N": "1.50"},
        "m": {"M": {"x": {"L": [{"S": "\u00e9\u4e2d"}, {"BOOL": True}, {"NULL": True}, {"B": "AAE="}]}}},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": ["eg==", "AP8="]},
        "b": {"B": "3q2+7w=="},
    }
    moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": item})
    moto.call(
        "DynamoDB_20120810.UpdateItem",
        {
            "TableName": table,
            "Key": {"pk": {"S": "caf\u00e9"}},
            "UpdateExpression": "SET n = n + :one, #q = :q",
            "ExpressionAttributeNames": {"#q": 'quote"d'},
            "ExpressionAttributeValues": {":one": {"N": "1"}, ":q": {"S": 'a "quoted" \\ line\n'}},
        },
    )
    moto.call(
        "DynamoDB_20120810.UpdateItem",
        {
            "TableName": table,
            "Key": {"pk": {"S": "new"}},
            "UpdateExpression": "SET v = :v",
            "ExpressionAttributeValues": {":v": {"N": "7"}},
        },
    )
    moto.call("DynamoDB_20120810.DeleteItem", {"TableName": table, "Key": {"pk": {"S": "caf\u00e9"}}})


def read_all(moto: Moto, arn: str, shard: str, limit: int) -> tuple[list[bytes], dict[str, str]]:
    """Every GetRecords reply body from TRIM_HORIZON, `limit` records at a time, the iterator stripped."""
    iterator = moto.call(
        "DynamoDBStreams_20120810.GetShardIterator",
        {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"},
    )["ShardIterator"]
    bodies: list[bytes] = []
    while True:
        request = {"ShardIterator": iterator, "Limit": limit}
        status, headers, body = moto.raw("DynamoDBStreams_20120810.GetRecords", request)
        assert status == 200, body
        records_part, _, iterator_part = body.partition(b', "NextShardIterator": ')
        bodies.append(records_part)
        if records_part == b'{"Records": []':
            return bodies, headers
        iterator = json.loads(b"{" + b'"i": ' + iterator_part)["i"]


@pytest.mark.parametrize("view_type", ["NEW_AND_OLD_IMAGES", "NEW_IMAGE", "OLD_IMAGE", "KEYS_ONLY"])
@pytest.mark.parametrize("limit", [1, 3, 1000])
def test_get_records_from_stored_json_is_byte_for_byte_moto_s_reply(
    moto: Moto, moto_s_own: dict[str, Any], view_type: str, limit: int
) -> None:
    table, arn, shard = table_with_stream(moto, view_type)
    write_every_kind_of_change(moto, table)
    moto_bodies, moto_headers = read_all(moto, arn, shard, limit)

    speedups.store_stream_records_as_json()
    speedups.serve_stream_records_from_stored_json()
    fast_bodies, fast_headers = read_all(moto, arn, shard, limit)  # moto's records, served from their JSON
    assert len(moto_bodies) > 1
    assert fast_bodies == moto_bodies
    assert fast_headers["Content-Type"] == moto_headers["Content-Type"]

    write_every_kind_of_change(moto, table)  # these are stored compactly from the start
    fast_bodies = read_all(moto, arn, shard, limit)[0]
    # Compact records read the same through moto's own serialiser (their `to_json()`).
    DynamoDBStreamsHandler.get_records = moto_s_own["DynamoDBStreamsHandler.get_records"]  # type: ignore[method-assign]
    assert read_all(moto, arn, shard, limit)[0] == fast_bodies
    assert b"".join(fast_bodies).count(b'"eventID"') == 2 * b"".join(moto_bodies).count(b'"eventID"') == 8


def test_a_stream_iterator_keeps_its_arn_once_and_reads_as_moto_s(moto: Moto, moto_s_own: dict[str, Any]) -> None:
    table, arn, shard = table_with_stream(moto)
    write_every_kind_of_change(moto, table)
    request = {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"}
    moto_s_reads = read_all(moto, arn, shard, 2)[0]
    moto_s_iterator = moto.call("DynamoDBStreams_20120810.GetShardIterator", request)["ShardIterator"]
    speedups.keep_each_stream_iterator_s_arn_once()
    assert read_all(moto, arn, shard, 2)[0] == moto_s_reads  # each GetRecords made and followed the next iterator
    iterator = moto.call("DynamoDBStreams_20120810.GetShardIterator", request)["ShardIterator"]
    assert len(iterator) == len(moto_s_iterator) and iterator.rsplit("|", 1)[0] == moto_s_iterator.rsplit("|", 1)[0]
    backend = moto_backends.get_backend("dynamodbstreams")["123456789012"]["us-east-1"]
    stored = backend.shard_iterators[iterator]
    assert "id" not in vars(stored) and stored.id == iterator.rsplit("|", 1)[1]
    assert next(key for key in backend.shard_iterators if key == iterator) is stored.arn  # one string: the key


@pytest.mark.parametrize("microsecond", [0, 1, 999, 1000, 866892, 999999])
def test_a_compact_record_keeps_moto_s_timestamp_rendering(microsecond: int) -> None:
    """moto sends an int for a whole second, else a float truncated to milliseconds; `to_json()` keeps that."""
    created = datetime.datetime(2026, 11, 25, 17, 35, 30, microsecond)
    record = {
        "eventID": "e",
        "eventName": "INSERT",
        "eventSource": "aws:dynamodb",
        "eventVersion": "1.0",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "StreamViewType": "KEYS_ONLY",
            "ApproximateCreationDateTime": created,
            "SequenceNumber": "7",
            "SizeBytes": 1,
            "Keys": {"pk": {"B": b"\x00"}},
        },
    }
    compact = speedups.CompactStreamRecord(record)
    expected = TimestampSerializer._timestamp_unixtimestamp(created)
    assert json.loads(compact.text)["dynamodb"]["ApproximateCreationDateTime"] == expected
    assert type(json.loads(compact.text)["dynamodb"]["ApproximateCreationDateTime"]) is type(expected)
    assert speedups.CompactStreamRecord(compact.to_json()).text == compact.text
    assert compact.to_json()["dynamodb"]["Keys"] == {"pk": {"B": b"\x00"}}
    assert compact.sequence_number == 7


def test_a_record_compressed_against_an_earlier_one_reads_the_same_in_a_third_of_the_space() -> None:
    def record(number: int) -> dict[str, Any]:
        image = {
            "pk": {"S": f"TRADE-{number:08d}"},
            "Value": {"N": f"{number * 7}.25"},
            "Digest": {"S": uuid.UUID(int=number * 7919).hex * 2},
            "Hierarchy": {"M": {"Desk": {"S": "desk-3"}, "Book": {"S": "book-17"}}},
        }
        return {
            "eventID": uuid.UUID(int=number).hex,
            "eventName": "MODIFY",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {
                "ApproximateCreationDateTime": datetime.datetime(2026, 11, 26, 1, 2, 3, 4000),
                "Keys": {"pk": image["pk"]},
                "NewImage": image,
                "OldImage": {**image, "Value": {"N": "1"}},
                "SequenceNumber": str(number),
                "SizeBytes": 300,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            },
        }

    dictionary = speedups.CompactStreamRecord(record(1)).text.encode()
    alone, against_the_first = (
        speedups.CompactStreamRecord(record(2)),
        speedups.CompactStreamRecord(record(2), dictionary),
    )
    assert against_the_first.text == alone.text and against_the_first.to_json() == alone.to_json() == record(2)
    assert len(against_the_first._packed) * 3 < len(alone._packed)


# (UpdateExpression, ConditionExpression or None, names, values, on an existing item?)
UPDATES: list[tuple[str, str | None, dict[str, str], dict[str, Any], bool]] = [
    ("SET a = :one, #b = :s", None, {"#b": "b"}, {":one": {"N": "1"}, ":s": {"S": "x"}}, False),
    ("SET a = a + :one", None, {}, {":one": {"N": "1"}}, True),
    ("SET a = a + :one", None, {}, {":one": {"N": "1"}}, False),  # no such attribute
    ("SET x = if_not_exists(pk, :s)", None, {}, {":s": {"S": "x"}}, False),  # names a key attribute
    ("SET x = pk", None, {}, {}, False),
    ("SET #x = :s", None, {"#x": "pk"}, {":s": {"S": "x"}}, False),  # cannot update a key
    ("SET #x = :s", None, {"#x": "a"}, {":s": {"S": "x"}}, False),  # the same text, other names
    ("SET a = :missing", None, {}, {":one": {"N": "1"}}, False),
    ("SET a = = :one", None, {}, {":one": {"N": "1"}}, False),  # a syntax error
    ("SET a = = :one", None, {}, {":one": {"N": "1"}}, False),  # again: errors are not cached
    ("SET a = :one, a = :two", None, {}, {":one": {"N": "1"}, ":two": {"N": "2"}}, False),
    ("SET a = :s + :one", None, {}, {":s": {"S": "x"}, ":one": {"N": "1"}}, False),
    ("SET m.k = :one", None, {}, {":one": {"N": "1"}}, False),
    ("SET m.k = :one, m = :one", None, {}, {":one": {"N": "1"}}, False),  # overlapping paths
    ("SET a = :one SET b = :one", None, {}, {":one": {"N": "1"}}, False),  # two SET clauses
    ("SET a = :one SET b = :one", None, {}, {":one": {"N": "1"}}, False),  # again: a failed check is not remembered
    ("SET #p = :one, #q = :one", None, {"#p": "a", "#q": "b"}, {":one": {"N": "1"}}, False),
    ("SET #p = :one, #q = :one", None, {"#p": "a", "#q": "a"}, {":one": {"N": "1"}}, False),  # the same path twice
    ("REMOVE x ADD n :one REMOVE y ADD m :one SET a = :one SET b = :one", None, {}, {":one": {"N": "1"}}, False),
    (
        "SET l = list_append(if_not_exists(l, :empty), :l)",
        None,
        {},
        {":empty": {"L": []}, ":l": {"L": [{"N": "1"}]}},
        False,
    ),
    (
        "SET l = list_append(if_not_exists(l, :empty), :l)",
        None,
        {},
        {":empty": {"L": []}, ":l": {"L": [{"N": "1"}]}},
        True,
    ),
    ("ADD n :one REMOVE gone", None, {}, {":one": {"N": "1"}}, False),
    ("ADD n :one", None, {}, {":one": {"N": "1"}}, True),
    (
        "SET #value = :value, #version = :version",
        "attribute_not_exists(#trade_id) OR #version < :version",
        {"#trade_id": "pk", "#version": "Version", "#value": "Value"},
        {":value": {"N": "1.5"}, ":version": {"N": "1"}},
        False,
    ),
    (
        "SET #value = :value, #version = :version",
        "attribute_not_exists(#trade_id) OR #version < :version",
        {"#trade_id": "pk", "#version": "Version", "#value": "Value"},
        {":value": {"N": "1.5"}, ":version": {"N": "1"}},
        True,  # the existing item's Version is 1: the condition fails
    ),
    ("SET a = :one", "attribute_exists(pk)", {}, {":one": {"N": "1"}}, False),
    ("SET a = :one", "attribute_not_exists(", {}, {":one": {"N": "1"}}, False),
    ("SET a = :one", "#undefined = :one", {}, {":one": {"N": "1"}}, False),
]


def run_updates(moto: Moto) -> list[Any]:
    """Every update of `UPDATES` on a new table: each reply, then the table and its stream."""
    table, arn, shard = table_with_stream(moto)
    replies: list[Any] = []
    for number, (update, condition, names, values, existing) in enumerate(UPDATES):
        key = {"pk": {"S": f"item-{number}"}}
        if existing:
            item = {**key, "a": {"N": "5"}, "n": {"N": "2"}, "Version": {"N": "1"}, "l": {"L": [{"S": "x"}]}}
            moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": item})
        request: dict[str, Any] = {
            "TableName": table,
            "Key": key,
            "UpdateExpression": update,
            "ReturnValues": "ALL_NEW",
        }
        if condition is not None:
            request["ConditionExpression"] = condition
            request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        if names:
            request["ExpressionAttributeNames"] = names
        if values:
            request["ExpressionAttributeValues"] = values
        status, headers, body = moto.raw("DynamoDB_20120810.UpdateItem", request)
        replies.append(
            (number, status, headers.get("X-Amzn-Errortype"), json.loads(body.replace(table.encode(), b"T")))
        )
    transaction = {
        "TransactItems": [
            {"Update": {"TableName": table, "Key": {"pk": {"S": "t-1"}}, "UpdateExpression": "SET a = :one"}},
            {
                "Update": {
                    "TableName": table,
                    "Key": {"pk": {"S": "t-2"}},
                    "UpdateExpression": "SET a = :one",
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
        ]
    }
    for action in transaction["TransactItems"]:
        action["Update"]["ExpressionAttributeValues"] = {":one": {"N": "1"}}
    status, headers, body = moto.raw("DynamoDB_20120810.TransactWriteItems", transaction)
    replies.append(
        ("transaction", status, headers.get("X-Amzn-Errortype"), json.loads(body.replace(table.encode(), b"T")))
    )
    del transaction["TransactItems"][1]["Update"]["ConditionExpression"]
    replies.append(("transaction", *moto.raw("DynamoDB_20120810.TransactWriteItems", transaction)[:1]))
    items = moto.call("DynamoDB_20120810.Scan", {"TableName": table})["Items"]
    replies.append(sorted(items, key=lambda item: item["pk"]["S"]))
    records = [record for body in read_all(moto, arn, shard, 1000)[0] for record in json.loads(body + b"}")["Records"]]
    for record in records:  # random, the time, and moto's size estimate, which counts the time's digits
        del record["eventID"], record["dynamodb"]["ApproximateCreationDateTime"], record["dynamodb"]["SizeBytes"]
    replies.append(records)
    return replies


def test_cached_expressions_and_one_validation_give_moto_s_results_and_errors(
    moto: Moto, moto_s_own: dict[str, Any]
) -> None:
    expected = run_updates(moto)
    speedups.parse_each_update_expression_once()
    speedups.lex_each_condition_expression_once()
    speedups.validate_a_new_item_s_update_once()
    speedups.check_each_expression_s_structure_once()
    assert run_updates(moto) == expected
    assert run_updates(moto) == expected  # with every expression already cached
    errors = {
        str(reply[3].get("__type", reply[3].get("unhandled"))).split("#")[-1] for reply in expected[: len(UPDATES)]
    }
    assert {"None", "ValidationException", "ConditionalCheckFailedException", "ValueError"} <= errors


def test_an_expression_s_structure_is_checked_once_per_names(moto: Moto, moto_s_own: dict[str, Any]) -> None:
    """The structural validators run for a new (expression, names) pair, and again after a failure."""
    speedups.parse_each_update_expression_once()
    speedups.validate_a_new_item_s_update_once()
    speedups.check_each_expression_s_structure_once()
    table, _, _ = table_with_stream(moto)
    checked: list[str] = []

    def counted(self: Any, node: Any) -> Any:
        checked.append(type(self).__name__)
        return vars(DepthFirstTraverser)["traverse"](self, node)

    def update(names: dict[str, str]) -> int:
        request = {
            "TableName": table,
            "Key": {"pk": {"S": "k"}},
            "UpdateExpression": "SET #p = :one, #q = :one",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
        return moto.raw("DynamoDB_20120810.UpdateItem", request)[0]

    for validator in speedups._STRUCTURAL_CHECKS:
        validator.traverse = counted
    try:
        assert [update({"#p": "a", "#q": "b"}) for _ in range(3)] == [200, 200, 200]
        assert checked == ["ActionCountValidator", "OverlappingPathsValidator", "UpdateHashRangeKeyValidator"]
        assert [update({"#p": "a", "#q": "a"}) for _ in range(2)] == [400, 400]
        assert checked.count("OverlappingPathsValidator") == 3  # new names, then again after the failure
        assert [update({"#p": "a", "#q": "pk"}) for _ in range(2)] == [400, 400]  # a key attribute
        assert checked.count("UpdateHashRangeKeyValidator") == 3
    finally:
        for validator in speedups._STRUCTURAL_CHECKS:
            delattr(validator, "traverse")


def test_copied_trees_cached_traversal_and_direct_serialisation_give_moto_s_results_and_errors(
    moto: Moto, moto_s_own: dict[str, Any]
) -> None:
    expected = run_updates(moto)
    speedups.copy_syntax_trees_node_by_node()
    speedups.find_the_nodes_each_validator_processes_once()
    speedups.find_clauses_without_abc_checks()
    speedups.convert_attribute_values_without_copying_them_first()
    speedups.serialize_attribute_values_directly()
    assert run_updates(moto) == expected


def tree_of(node: Any, seen: dict[int, int]) -> Any:
    """A syntax tree as nested tuples: class, numbered node, its parent's number, children (leaves as they are)."""
    if not isinstance(node, Node):
        return node if isinstance(node, str | int | bool | float) else repr(node)
    seen.setdefault(id(node), len(seen))
    parent = None if node.parent is None else seen.setdefault(id(node.parent), len(seen))
    children = [tree_of(child, seen) for child in node.children or []]
    return (type(node).__name__, seen[id(node)], parent, node.type, children, sorted(vars(node)))


EXPRESSIONS = [
    "SET #a = :a, #b = :b, c.d[2].e = if_not_exists(#f, :z) + :one, g = list_append(g, :l)",
    "REMOVE a[1], b.c ADD n :one DELETE s :s",
    "SET a = :c - d, e = f + :one",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_syntax_tree_is_copied_as_deepcopy_copies_it(moto_s_own: dict[str, Any], expression: str) -> None:
    tree = UpdateExpressionParser.make(expression)
    moto_s_copy = copy.deepcopy(tree)
    speedups.copy_syntax_trees_node_by_node()
    fast_copy = copy.deepcopy(tree)
    assert tree_of(fast_copy, {}) == tree_of(moto_s_copy, {}) == tree_of(tree, {})
    originals, copies = {id(node) for node in walk(tree)}, {id(node) for node in walk(fast_copy)}
    assert originals.isdisjoint(copies)  # a copy, not the same nodes
    kinds = [[kind] for kind in {type(node) for node in walk(tree)}]
    moto_s_clauses = [node.find_clauses(kind) for node in walk(tree) for kind in kinds]
    speedups.find_clauses_without_abc_checks()
    assert [node.find_clauses(kind) for node in walk(tree) for kind in kinds] == moto_s_clauses
    assert any(moto_s_clauses)
    leaf = walk(fast_copy)[-1]
    assert copy.deepcopy(leaf).parent is not leaf.parent  # a subtree copies its ancestors, as deepcopy does
    assert tree_of(copy.deepcopy(leaf).parent, {}) == tree_of(leaf.parent, {})


def walk(node: Any) -> list[Any]:
    """Every node of a tree, depth first."""
    return [node, *(found for child in node.children or [] if isinstance(child, Node) for found in walk(child))]


def attribute_values(blobs_as: Any) -> Any:
    """Any DynamoDB AttributeValue, nested maps and lists included (`blobs_as`: how moto holds a blob)."""
    texts = st.text(max_size=6)
    numbers = st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str)
    blobs = st.binary(max_size=6).map(blobs_as)
    scalars = st.one_of(
        texts.map(lambda text: {"S": text}),
        numbers.map(lambda number: {"N": number}),
        blobs.map(lambda blob: {"B": blob}),
        st.booleans().map(lambda flag: {"BOOL": flag}),
        st.just({"NULL": True}),
        st.lists(texts, min_size=1, max_size=3, unique=True).map(lambda members: {"SS": members}),
        st.lists(numbers, min_size=1, max_size=3, unique=True).map(lambda members: {"NS": members}),
        st.lists(blobs, min_size=1, max_size=3).map(lambda members: {"BS": members}),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda members: {"L": members}),
            st.dictionaries(st.text(max_size=4), inner, max_size=3).map(lambda members: {"M": members}),
        ),
        max_leaves=8,
    )


@settings(max_examples=150, database=None, suppress_health_check=list(HealthCheck))
@given(value=attribute_values(lambda blob: base64.b64encode(blob).decode()))
def test_attribute_values_convert_as_moto_converts_them(value: dict[str, Any]) -> None:
    moto_s = vars(DynamoType)["to_regular_json"]
    if getattr(moto_s, "_speedup", False):  # installed by an earlier example or test: moto's is the one it wraps
        moto_s = moto_s.__wrapped__
    speedups.convert_attribute_values_without_copying_them_first()
    assert DynamoType(value).to_regular_json() == moto_s(DynamoType(value))


@settings(max_examples=100, database=None, suppress_health_check=list(HealthCheck))
@given(value=attribute_values(bytes), with_empty_key=st.booleans())
def test_attribute_values_serialise_as_moto_s_serialiser_writes_them(
    value: dict[str, Any], with_empty_key: bool
) -> None:
    """Every shape of value, blobs as bytes and as text, an empty map key (left to moto's walk)."""
    attributes: dict[str, Any] = {"a": value, "t": {"B": "text blob"}}
    if with_empty_key:
        attributes["m"] = {"M": {"": {"S": "x"}, "y": value}}
    result = {"Attributes": attributes, "ConsumedCapacity": {"TableName": "t"}}
    service = get_service_model("dynamodb")

    def serialised() -> Any:
        serializer = get_serializer_class("dynamodb", "json")
        context = ActionContext(service, service.operation_model("UpdateItem"), serializer, DynamoHandler())
        return ActionResult(copy.deepcopy(result)).execute_result(context)[2]

    original = vars(BaseJSONSerializer)["_serialize_type_structure"]
    moto_s = original.__wrapped__ if getattr(original, "_speedup", False) else original
    BaseJSONSerializer._serialize_type_structure = moto_s  # type: ignore[method-assign]
    try:
        expected = serialised()
        speedups.serialize_attribute_values_directly()
        assert serialised() == expected
    finally:
        BaseJSONSerializer._serialize_type_structure = original  # type: ignore[method-assign]


NUMBER_TEXTS = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False).map(str),  # exponents included: '1E+3', '0E-7'
    st.from_regex(r"[+-]?0*[0-9]{0,45}(\.[0-9]{0,45})?0*", fullmatch=True).filter(
        lambda text: any(map(str.isdigit, text))
    ),
    st.sampled_from(["0", "-0", ".5", "5.", "00.000", "1" * 401, "9" * 400 + ".0", "1e5", "1E-130"]),
)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(value=attribute_values(lambda blob: base64.b64encode(blob).decode()), number=NUMBER_TEXTS)
def test_sizes_are_moto_compat_s_documented_sizes(value: dict[str, Any], number: str) -> None:
    moto_compat.fix_item_size_follows_the_developer_guide()
    for attribute in (value, {"N": number}, {"L": [{"N": number}, value]}, {"M": {"é": value, "n": {"N": number}}}):
        try:
            expected: Any = moto_compat._documented_size(DynamoType(attribute))
        except decimal.DecimalException as error:  # more than 400 digits: refused, by the same error
            expected = type(error)
        try:
            found: Any = speedups._attribute_size(DynamoType(attribute))
        except decimal.DecimalException as error:
            found = type(error)
        assert found == expected


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    keys=st.lists(
        st.tuples(st.sampled_from(["a", "b", "B", "é", ""]), st.decimals(allow_nan=False, allow_infinity=False)),
        max_size=12,
        unique_by=lambda key: (key[0], key[1].normalize()),
    )
)
def test_a_table_s_items_are_sorted_as_moto_sorts_them(keys: list[tuple[str, decimal.Decimal]]) -> None:
    """Hash (S) and range (N) keys, numbers with exponents and negative: the same order."""
    backend = DynamoDBBackend("us-east-1", "123456789012")
    table = backend.create_table(
        "sorted",
        schema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        throughput=None,
        attr=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"}],
        global_indexes=None,
        indexes=None,
        streams=None,
        billing_mode="PAY_PER_REQUEST",
        sse_specification=None,
        tags=[],
        deletion_protection_enabled=False,
        warm_throughput=None,
    )
    for hash_key, range_key in keys:
        table.put_item({"pk": {"S": hash_key or "-"}, "sk": {"N": str(range_key)}})
    moto_s_own = vars(Table)["all_items"]
    if getattr(moto_s_own, "_speedup", False):
        moto_s_own = moto_s_own.__wrapped__
    expected = [item.to_json() for item in moto_s_own(table)]
    assert [item.to_json() for item in speedups._all_items(table)] == expected


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    values=st.lists(attribute_values(lambda blob: base64.b64encode(blob).decode()), min_size=1, max_size=6),
    padding=st.sampled_from([0, 200_000, 404_900]),
)
def test_a_new_item_is_sized_as_moto_sizes_it_each_value_once(values: list[dict[str, Any]], padding: int) -> None:
    """The same item, or the same refusal of an item over the limit, with each attribute value sized once."""
    moto_compat.fix_item_size_follows_the_developer_guide()
    attributes = {f"a{index}": value for index, value in enumerate(values)} | {"pad": {"S": "x" * padding}}

    def build() -> Any:
        try:
            return Item(DynamoType({"S": "k"}), None, attributes).to_json()
        except ItemSizeTooLarge:
            return ItemSizeTooLarge

    moto_s_init, compat_size = vars(Item)["__init__"], vars(DynamoType)["size"]
    assert not getattr(moto_s_init, "_speedup", False), "a speedup leaked from another test or example"
    expected = build()
    sized: list[int] = []

    def counted(self: DynamoType) -> int:
        sized.append(id(self))
        return int(compat_size(self))

    DynamoType.size = counted  # type: ignore[method-assign]
    try:
        speedups.size_a_new_item_s_attributes_once()
        assert build() == expected
        assert len(sized) == len(set(sized)) <= len(attributes)  # once each (a refused item stops early)
    finally:
        Item.__init__ = moto_s_init  # type: ignore[method-assign]
        DynamoType.size = compat_size  # type: ignore[method-assign]


SCANS: list[dict[str, Any]] = [
    {},
    {
        "FilterExpression": "begins_with(pk, :p)",
        "ExpressionAttributeValues": {":p": {"S": "#m"}},
        "ProjectionExpression": "pk",
    },
    {
        "FilterExpression": "NOT begins_with(#k, :p)",
        "ExpressionAttributeNames": {"#k": "pk"},
        "ExpressionAttributeValues": {":p": {"S": "#m"}},
        "ConsistentRead": True,
    },
    {"FilterExpression": "n > :two", "ExpressionAttributeValues": {":two": {"N": "2"}}, "Limit": 7},
    {"ProjectionExpression": "m.k, l[0], n", "Limit": 5},
    {"ScanFilter": {"n": {"ComparisonOperator": "GT", "AttributeValueList": [{"N": "4"}]}}},
    {"ScanFilter": {"gone": {"ComparisonOperator": "NULL"}}, "Limit": 3},
    {"Segment": 1, "TotalSegments": 3},
    {"FilterExpression": "attribute_exists(big)"},  # the 1 MB page limit, counted before the filter
]


def scan_everything(moto: Moto, table: str) -> list[Any]:
    """Every scan of `SCANS`, each page after page to the end: the replies."""
    replies: list[Any] = []
    for scan in SCANS:
        request = {"TableName": table, **scan}
        while True:
            status, headers, body = moto.raw("DynamoDB_20120810.Scan", request)
            reply = json.loads(body)
            replies.append((status, headers.get("X-Amzn-Errortype"), reply))
            if status != 200 or "LastEvaluatedKey" not in reply:
                break
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]
    return replies


def test_a_scan_answers_as_moto_s_and_copies_only_what_it_returns(
    moto: Moto, moto_s_own: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    table, _, _ = table_with_stream(moto)
    for number in range(24):
        item = {"pk": {"S": f"node-{number:02}"}, "n": {"N": str(number % 6)}, "m": {"M": {"k": {"S": "v"}}}}
        if number % 3:
            item["l"] = {"L": [{"N": "1"}, {"S": "x"}]}
        moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": item})
    for number in range(4):
        moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": {"pk": {"S": f"#m{number}"}}})
    for number in range(4):  # 4 items of 300 KB: a page holds 3
        big = {"pk": {"S": f"big-{number}"}, "big": {"S": "x" * 300_000}}
        moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": big})
    expected = scan_everything(moto, table)
    speedups.sort_a_table_s_items_by_their_key_values()
    assert scan_everything(moto, table) == expected
    speedups.scan_without_copying_what_is_filtered_out()
    speedups.size_items_without_decimal_arithmetic()
    assert scan_everything(moto, table) == expected
    assert any("LastEvaluatedKey" in reply[2] for reply in expected) and all(reply[0] == 200 for reply in expected)
    copied: list[str] = []
    item_deepcopy = Item.__deepcopy__

    def counted(self: Item, memo: dict[int, Any]) -> Item:
        copied.append(self.hash_key.value)
        return item_deepcopy(self, memo)

    monkeypatch.setattr(Item, "__deepcopy__", counted)
    markers = moto.call("DynamoDB_20120810.Scan", {"TableName": table, **SCANS[1]})["Items"]
    assert sorted(copied) == sorted(item["pk"]["S"] for item in markers) == [f"#m{number}" for number in range(4)]


def test_a_new_item_s_update_is_validated_once(
    moto: Moto, moto_s_own: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    speedups.validate_a_new_item_s_update_once()
    validations: list[int] = []
    original = UpdateExpressionValidator.validate

    def counted(self: UpdateExpressionValidator) -> Any:
        validations.append(1)
        return original(self)

    monkeypatch.setattr(UpdateExpressionValidator, "validate", counted)
    table = table_with_stream(moto)[0]

    def update(key: str, expression: str, names: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        request = {"TableName": table, "Key": {"pk": {"S": key}}, "UpdateExpression": expression}
        values = {"ExpressionAttributeValues": {":v": {"S": "v"}}, "ExpressionAttributeNames": names}
        return moto.raw("DynamoDB_20120810.UpdateItem", {**request, **values})

    assert update("new", "SET #a = :v", {"#a": "a"})[0] == 200
    assert len(validations) == 1
    assert update("new", "SET #a = :v", {"#a": "a"})[0] == 200  # it exists now: one validation, as in moto
    assert len(validations) == 2
    # Reusing the empty item's validation is sound because one naming a key attribute never passes it.
    for expression in ["SET a = if_not_exists(#a, :v)", "SET b = :v, a = list_append(#a, :v)", "ADD #a :v"]:
        status, _, body = update("other", expression, {"#a": "pk"})
        assert (status, json.loads(body)["message"]) == (400, KEY_UPDATE_REFUSED)
    assert len(validations) == 5


KEY_UPDATE_REFUSED = (
    "One or more parameter values were invalid: Cannot update attribute pk. This attribute is part of the key"
)


def test_request_routing_and_action_lookup_give_moto_s_answers(moto_s_own: dict[str, Any]) -> None:
    modules = list(moto_backends.list_of_moto_modules())
    handlers = [DynamoHandler, DynamoDBStreamsHandler, KinesisResponse, S3Response]
    actions = [moto_responses.method_names_from_class(handler) for handler in handlers]  # type: ignore[attr-defined]
    speedups.list_moto_s_modules_once()
    speedups.find_each_handler_s_actions_once()
    assert list(moto_backends.list_of_moto_modules()) == modules
    assert "dynamodb" in modules and "dynamodbstreams" in modules
    assert [moto_responses.method_names_from_class(handler) for handler in handlers] == actions  # type: ignore[attr-defined]
    assert "get_records" in actions[1] and "transact_write_items" in actions[0]


def test_request_ids_keep_moto_s_format_and_follow_its_seed(moto: Moto, moto_s_own: dict[str, Any]) -> None:
    speedups.draw_request_ids_in_one_call()
    headers: dict[str, Any] = {}
    first = moto_responses.gen_amzn_requestid_long(headers)  # type: ignore[attr-defined]
    assert re.fullmatch("[A-Za-z0-9]{52}", first) and headers == {"x-amzn-requestid": first}
    mock_random.seed(22)
    seeded = moto_responses.gen_amzn_requestid_long()  # type: ignore[attr-defined]
    mock_random.seed(22)
    assert moto_responses.gen_amzn_requestid_long() == seeded != first  # type: ignore[attr-defined]
    reply_id = moto.raw("DynamoDB_20120810.ListTables", {})[1]["x-amzn-requestid"]
    assert re.fullmatch("[A-Za-z0-9]{52}", reply_id)


class _NoWalk(OrderedDict[int, Any]):
    """A shard's records that refuse to be walked: a read or put touching every record fails."""

    def items(self) -> Any:
        raise AssertionError("walked the shard")

    def keys(self) -> Any:
        raise AssertionError("walked the shard")

    def values(self) -> Any:
        raise AssertionError("walked the shard")


def live_moto_items() -> list[Item]:
    """moto's `Item`s alive in this process. `type`, not `isinstance`: `gc.get_objects()` also holds
    weak proxies (the pure-Python protobuf's, `tests/conftest.py`), and `isinstance` on one whose
    object is gone raises `ReferenceError`."""
    return [thing for thing in gc.get_objects() if issubclass(type(thing), Item)]


def live_items_with_key(value: str) -> int:
    """How many moto `Item` objects with hash key ``{"S": value}`` are alive in this process."""
    gc.collect()
    key = DynamoType({"S": value})
    return sum(1 for thing in live_moto_items() if thing.hash_key == key)


def update_one_item(moto: Moto, table: str, key: str, times: int) -> None:
    for number in range(times):
        moto.call(
            "DynamoDB_20120810.UpdateItem",
            {
                "TableName": table,
                "Key": {"pk": {"S": key}},
                "UpdateExpression": "SET v = :v",
                "ExpressionAttributeValues": {":v": {"N": str(number)}},
            },
        )


def test_moto_objects_nothing_uses_are_freed(moto: Moto, moto_s_own: dict[str, Any]) -> None:
    """moto registers every model instance for ever: 40 updates of one item left 40+ Items alive."""
    table, _, _ = table_with_stream(moto)
    kept_by_moto = f"kept-{uuid.uuid4().hex}"
    update_one_item(moto, table, kept_by_moto, 40)
    assert live_items_with_key(kept_by_moto) > 40  # the control: moto's own register keeps the copies

    speedups.keep_no_register_of_every_model_instance()
    freed = f"freed-{uuid.uuid4().hex}"
    update_one_item(moto, table, freed, 40)
    assert live_items_with_key(freed) == 1  # the one in the table
    stored = moto.call("DynamoDB_20120810.GetItem", {"TableName": table, "Key": {"pk": {"S": freed}}})
    assert stored["Item"]["v"] == {"N": "39"}


def stored_item(key: str) -> Item:
    """The moto `Item` stored under ``{"S": key}`` (found among the live objects)."""
    gc.collect()
    wanted = DynamoType({"S": key})
    return next(thing for thing in live_moto_items() if thing.hash_key == wanted)


def item_in_table(table: str, key: str) -> Item:
    """The moto `Item` `table` stores under ``{"S": key}``, taken from moto's backend: `stored_item`'s
    walk of every live object (a full `gc.collect` first) costs most of a second in a process this
    size, and a property test asks once per example."""
    items = moto_backends.get_backend("dynamodb")["123456789012"]["us-east-1"].get_table(table).items
    return cast(Item, items[DynamoType({"S": key})])


def put_update_and_read(moto: Moto, table: str, item: dict[str, Any], added: dict[str, Any]) -> Any:
    """PutItem `item`, then UpdateItem it with ``SET added = <the AttributeValue added>``, and GetItem it."""
    key = {"pk": item["pk"]}
    moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": item})
    moto.call(
        "DynamoDB_20120810.UpdateItem",
        {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET added = :v",
            "ExpressionAttributeValues": {":v": added},
        },
    )
    return moto.call("DynamoDB_20120810.GetItem", {"TableName": table, "Key": key})


def test_items_share_their_attribute_names_and_read_as_moto_s(moto: Moto, moto_s_own: dict[str, Any]) -> None:
    table, _, _ = table_with_stream(moto)
    speedups.keep_no_register_of_every_model_instance()
    item = {"n": {"N": "1.50"}, "m": {"M": {"Delta:Credit": {"M": {"Value": {"N": "2"}}}, "l": {"L": [{"S": "x"}]}}}}
    moto_s_reads = []
    for name in ("moto-a", "moto-b"):
        moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": {"pk": {"S": name}, **item}})
        moto_s_reads.append(moto.call("DynamoDB_20120810.GetItem", {"TableName": table, "Key": {"pk": {"S": name}}}))
    assert next(iter(stored_item("moto-a").attrs["m"].value)) is not next(iter(stored_item("moto-b").attrs["m"].value))

    speedups.share_attribute_names()
    reads = [
        put_update_and_read(moto, table, {"pk": {"S": name}, **item}, {"S": "y"}) for name in ("shared-a", "shared-b")
    ]
    first, second = stored_item("shared-a"), stored_item("shared-b")
    for name in ("n", "m", "added"):
        assert next(key for key in first.attrs if key == name) is next(key for key in second.attrs if key == name)
    assert next(iter(first.attrs["m"].value)) is next(iter(second.attrs["m"].value))
    for read, moto_s_read in zip(reads, moto_s_reads, strict=True):
        assert read["Item"].pop("added") == {"S": "y"}
        assert {**read["Item"], "pk": None} == {**moto_s_read["Item"], "pk": None}


def test_items_share_their_equal_string_values_and_read_as_moto_s(moto: Moto, moto_s_own: dict[str, Any]) -> None:
    table, _, _ = table_with_stream(moto)
    speedups.keep_no_register_of_every_model_instance()
    item = {"s": {"S": "desk-3"}, "m": {"M": {"Book": {"S": "book-17"}}}, "l": {"L": [{"S": "EMEA"}, {"N": "2"}]}}

    def stored_strings(key: str) -> list[str]:
        """The strings in the item's map and list (shared); its top-level ones are mostly unique: left alone."""
        attrs = stored_item(key).attrs
        return [attrs["m"].value["Book"].value, attrs["l"].value[0].value, attrs["added"].value[0].value]

    def write_and_read(names: tuple[str, str]) -> list[Any]:
        return [
            put_update_and_read(moto, table, {"pk": {"S": name}, **item}, {"L": [{"S": "same text"}]}) for name in names
        ]

    unique = uuid.uuid4().hex  # `stored_item` looks among every live Item, other tests' too
    moto_s_reads = write_and_read((f"moto-a-{unique}", f"moto-b-{unique}"))
    pairs = zip(stored_strings(f"moto-a-{unique}"), stored_strings(f"moto-b-{unique}"), strict=True)
    assert not any(a is b for a, b in pairs), "the control: moto keeps a copy per item"

    speedups.share_equal_string_values()
    reads = write_and_read((f"shared-a-{unique}", f"shared-b-{unique}"))
    for a, b in zip(stored_strings(f"shared-a-{unique}"), stored_strings(f"shared-b-{unique}"), strict=True):
        assert a == b and a is b
    for read, moto_s_read in zip(reads, moto_s_reads, strict=True):
        assert {**read["Item"], "pk": None} == {**moto_s_read["Item"], "pk": None}


def put_back_every_name_of(original: type, monkeypatch: pytest.MonkeyPatch) -> type:
    """`original`: every module attribute that names it now names it again when `monkeypatch` undoes."""
    for module in list(sys.modules.values()):
        for name, value in list(getattr(module, "__dict__", {}).items()):
            if value is original:
                monkeypatch.setattr(module, name, original)
    return original


@pytest.fixture
def moto_s_attribute_value_class(monkeypatch: pytest.MonkeyPatch) -> type:
    return put_back_every_name_of(dynamo_type_module.DynamoType, monkeypatch)


def test_attribute_values_in_slots_give_moto_s_results_and_errors(
    moto: Moto, moto_s_own: dict[str, Any], moto_s_attribute_value_class: type
) -> None:
    expected = run_updates(moto)
    speedups.keep_attribute_values_in_slots()
    slotted = dynamo_type_module.DynamoType
    assert slotted is not moto_s_attribute_value_class and moto_models.DynamoType is slotted  # type: ignore[attr-defined]
    assert run_updates(moto) == expected
    gc.collect()
    stored = [thing for thing in live_moto_items() if type(thing.hash_key) is slotted]
    assert stored and not any(hasattr(value, "__dict__") for item in stored for value in item.attrs.values())
    speedups.keep_attribute_values_in_slots()  # idempotent: no third class
    assert dynamo_type_module.DynamoType is slotted


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(value=attribute_values(lambda blob: base64.b64encode(blob).decode()))
def test_every_attribute_value_in_slots_reads_back_as_moto_s(moto: Moto, value: dict[str, Any]) -> None:
    table, _, _ = table_with_stream(moto)
    item = {"v": value, "m": {"M": {"nested": value}}, "l": {"L": [value, {"N": "1"}]}}
    moto_s_key, slotted_key = {"pk": {"S": f"moto-{uuid.uuid4().hex}"}}, {"pk": {"S": f"slots-{uuid.uuid4().hex}"}}
    moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": {**moto_s_key, **item}})
    moto_s_read = moto.call("DynamoDB_20120810.GetItem", {"TableName": table, "Key": moto_s_key})["Item"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        put_back_every_name_of(dynamo_type_module.DynamoType, monkeypatch)
        speedups.keep_attribute_values_in_slots()
        moto.call("DynamoDB_20120810.PutItem", {"TableName": table, "Item": {**slotted_key, **item}})
        read = moto.call("DynamoDB_20120810.GetItem", {"TableName": table, "Key": slotted_key})["Item"]
        assert {**read, "pk": None} == {**moto_s_read, "pk": None}
        assert not hasattr(item_in_table(table, slotted_key["pk"]["S"]).attrs["v"], "__dict__")


def kinesis_shard(records: int) -> Shard:
    shard = Shard(0, 0, 2**128 - 1)
    for number in range(records):
        shard.put_record(f"key-{number}", f"data-{number}", "1")
    return shard


def test_kinesis_reads_give_moto_s_records_positions_and_lag(moto_s_own: dict[str, Any]) -> None:
    shard = kinesis_shard(60)
    shard.records[60].created_at = shard.records[1].created_at + 2.5  # a measurable lag
    cases = [(after, limit) for after in (0, 1, 7, 59, 60, 61, 1000) for limit in (None, -1, 0, 1, 5, 10_000)]
    expected = [shard.get_records(str(after), limit) for after, limit in cases]
    ends = (shard.get_min_sequence_number(), shard.get_max_sequence_number())
    speedups.read_kinesis_shards_by_sequence_number()
    assert [shard.get_records(str(after), limit) for after, limit in cases] == expected
    assert (shard.get_min_sequence_number(), shard.get_max_sequence_number()) == ends == (1, 60)
    assert expected[cases.index((7, 5))][1] == 12 and 2400 < expected[cases.index((7, 5))][2] <= 2500
    empty = Shard(1, 0, 1)
    assert empty.get_records("0", 10) == ([], 0, 0) and empty.get_max_sequence_number() == 0


def test_kinesis_records_kept_compact_read_as_moto_s(
    moto_s_own: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    put_back_every_name_of(kinesis_models.Record, monkeypatch)
    sent = [base64.b64encode(b"m" * size).decode() for size in (0, 1, 2, 3, 250)] + ["YQ==", "YQ", "not base64!"]

    def stored(shard: Shard) -> list[Any]:
        def read(record: Any) -> Any:
            try:
                answer = record.to_json()
            except binascii.Error as error:
                return type(error)
            return {**answer, "ApproximateArrivalTimestamp": None}

        return [
            (record.partition_key, record.data, record.sequence_number, record.explicit_hash_key, read(record))
            for record in shard.records.values()
        ]

    moto_s = kinesis_shard(0)
    for number, data in enumerate(sent):
        moto_s.put_record(f"key-{number}", data, "1")
    speedups.keep_kinesis_records_compact()
    compact = kinesis_shard(0)
    for number, data in enumerate(sent):
        compact.put_record(f"key-{number}", data, "1")
    assert stored(compact) == stored(moto_s)
    assert stored(moto_s)[-1][-1] is binascii.Error and stored(moto_s)[0][-1]["Data"] == b""
    records: list[Any] = list(compact.records.values())
    for record in records:
        assert type(record) is speedups.CompactKinesisRecord and not hasattr(record, "__dict__")
        assert record.created_at == unix_time(record.created_at_datetime)
    assert isinstance(records[5]._data, bytes) and records[6]._data == "YQ"  # kept as sent


def test_kinesis_puts_and_reads_never_walk_the_shard(moto_s_own: dict[str, Any]) -> None:
    speedups.read_kinesis_shards_by_sequence_number()
    shard = kinesis_shard(5000)
    shard.records = _NoWalk(shard.records)
    assert shard.put_record("k", "tail", "1") == "5001"
    records, last, _ = shard.get_records("4998", 100)
    assert [record.data for record in records] == ["data-4998", "data-4999", "tail"] and last == 5001


@pytest.fixture
def keep_alive_server(moto_s_own: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """moto behind `CompatMiddleware` on a real socket, served by `KeepAliveRequestHandler`."""
    app = moto_compat.CompatMiddleware(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=speedups.KeepAliveRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", server.server_port
    server.shutdown()
    server.server_close()


def post(connection: http.client.HTTPConnection, target: str, body: bytes, **headers: str) -> Any:
    connection.request(
        "POST",
        "/",
        body=body,
        headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.0", "Authorization": AUTHORIZATION}
        | headers,
    )
    return connection.getresponse()


def test_a_client_s_requests_share_one_connection(keep_alive_server: tuple[str, int]) -> None:
    connection = http.client.HTTPConnection(*keep_alive_server, timeout=10)
    table = f"keep-{uuid.uuid4().hex[:8]}"
    create = {
        "TableName": table,
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    response = post(connection, "DynamoDB_20120810.CreateTable", json.dumps(create).encode())
    assert response.status == 200 and response.getheader("Connection") is None
    response.read()
    first_socket = connection.sock
    for number in range(3):
        item = {"TableName": table, "Item": {"pk": {"S": f"k{number}"}, "v": {"S": "x" * 5000}}}
        response = post(connection, "DynamoDB_20120810.PutItem", json.dumps(item).encode())
        assert response.status == 200, response.read()
        response.read()
    response = post(connection, "DynamoDB_20120810.Scan", json.dumps({"TableName": table}).encode())
    assert json.loads(response.read())["Count"] == 3
    assert connection.sock is first_socket, "every request went over the first connection"


def test_a_kept_connection_answers_without_waiting_for_the_client_s_delayed_ack(
    keep_alive_server: tuple[str, int],
) -> None:
    """With Nagle's algorithm on, each answer's body waited for the client's delayed ACK (about 40 ms).

    The median request, not the mean: on a busy machine (the suite's other worker, say) a request now
    and then waits for a core, while with Nagle's algorithm every one waits (44-68 ms each, measured)."""
    connection = http.client.HTTPConnection(*keep_alive_server, timeout=10)
    post(connection, "DynamoDB_20120810.ListTables", b"{}").read()
    durations = []
    for _ in range(20):
        started = time.perf_counter()
        response = post(connection, "DynamoDB_20120810.ListTables", b"{}")
        assert response.status == 200
        response.read()
        durations.append(time.perf_counter() - started)
    assert statistics.median(durations) < 0.02, durations


def test_a_chunked_request_is_answered_and_its_connection_closed(keep_alive_server: tuple[str, int]) -> None:
    connection = http.client.HTTPConnection(*keep_alive_server, timeout=10)
    connection.request(
        "POST",
        "/",
        body=iter([b'{"Limit"', b": 5}"]),
        headers={"X-Amz-Target": "DynamoDB_20120810.ListTables", "Authorization": AUTHORIZATION},
        encode_chunked=True,
    )
    response = connection.getresponse()
    assert response.status == 200 and "TableNames" in json.loads(response.read())
    assert response.getheader("Connection") == "close"


def test_s3_s_reset_still_closes_superseded_versions_and_the_parts_of_pending_uploads() -> None:
    """moto's reset closed every key it ever made through its register; without the register, the
    buckets list only each object's latest version, so the superseded ones stayed open until collected."""
    speedups.keep_no_register_of_every_model_instance()
    backend = S3Backend("us-east-1", "123456789012")
    backend.create_bucket("versioned", "us-east-1")
    backend.put_bucket_versioning("versioned", "Enabled")
    versions = [backend.put_object("versioned", "k", body) for body in (b"one", b"two", b"three")]
    upload = backend.create_multipart_upload("versioned", "big", CaseInsensitiveDict(), "STANDARD", {}, None, "", "")
    parts = [backend.upload_part("versioned", upload.id, number, b"x" * 10) for number in (1, 2)]
    assert not any(key._value_buffer.closed for key in (*versions, *parts))

    backend.reset()

    assert [key._value_buffer.closed for key in versions] == [True, True, True]
    assert [part._value_buffer.closed for part in parts] == [True, True]


def test_s3_objects_nothing_uses_are_still_freed() -> None:
    """The S3 register is weak: a version nothing holds is freed, not kept for the reset."""
    speedups.keep_no_register_of_every_model_instance()
    backend = S3Backend("us-east-1", "123456789012")
    backend.create_bucket("plain", "us-east-1")
    name = f"k-{uuid.uuid4().hex}"
    for body in (b"one", b"two", b"three"):
        backend.put_object("plain", name, body)  # each replaces the last (no versioning)

    gc.collect()
    live = [thing for thing in gc.get_objects() if issubclass(type(thing), FakeKey) and thing.name == name]
    assert len(live) == 1
    backend.reset()
