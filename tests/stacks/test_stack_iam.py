"""Least privilege: each role may do exactly what its stage does, on exactly its resources."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from tests.stacks.handler_calls import calls_made, iam_actions_needed
from tests.stacks.stack_helpers import (
    ARCHIVE_HANDLER,
    HANDLERS,
    MAP_HANDLER,
    REDUCE_HANDLER,
    SETTINGS_GUARD_HANDLER,
    STATE_HANDLER,
    actions_on,
    as_list,
    function_properties,
    referenced_logical_ids,
    resources_of_type,
    role_statements,
    synthesize,
    table_logical_id,
)


def table_arn(template: Template, partition_key: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [table_logical_id(template, partition_key), "Arn"]}


def stream_arn(template: Template, partition_key: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [table_logical_id(template, partition_key), "StreamArn"]}


def all_actions(statements: list[dict[str, Any]]) -> set[str]:
    return {action for statement in statements for action in as_list(statement["Action"])}


def test_no_wildcard_actions_and_no_managed_policies(template: Template) -> None:
    for policy in resources_of_type(template, "AWS::IAM::Policy").values():
        for action in all_actions(policy["Properties"]["PolicyDocument"]["Statement"]):
            assert "*" not in action, action
    for role in resources_of_type(template, "AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]


@pytest.mark.parametrize("handler", HANDLERS.values())
def test_every_role_writes_only_its_own_log_group(template: Template, handler: str) -> None:
    log_group_id = function_properties(template, handler)["LoggingConfig"]["LogGroup"]["Ref"]
    statements = role_statements(template, handler)
    log_statements = [s for s in statements if any(a.startswith("logs:") for a in as_list(s["Action"]))]
    assert log_statements == [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [log_group_id, "Arn"]},
        }
    ]


def test_state_role(template: Template) -> None:
    statements = role_statements(template, STATE_HANDLER)
    assert actions_on(statements, table_arn(template, "TradeID")) == {
        "dynamodb:PartiQLInsert",
        "dynamodb:PartiQLUpdate",
    }
    # PartiQL inserts only, which never replace an item: no PutItem or BatchWriteItem, whose grants
    # would allow overwriting or deleting quarantine evidence.
    assert actions_on(statements, table_arn(template, "RecordId")) == {"dynamodb:PartiQLInsert"}
    (stream_id,) = resources_of_type(template, "AWS::Kinesis::Stream")
    kinesis_actions = actions_on(statements, {"Fn::GetAtt": [stream_id, "Arn"]})
    # A standard mapping's polling only: no enhanced fan-out (SubscribeToShard, DescribeStreamConsumer).
    assert kinesis_actions == {
        "kinesis:DescribeStream",
        "kinesis:DescribeStreamSummary",
        "kinesis:GetRecords",
        "kinesis:GetShardIterator",
        "kinesis:ListShards",
    }
    dynamodb_actions = {a for a in all_actions(statements) if a.startswith("dynamodb:")}
    assert dynamodb_actions == {"dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate"}
    referenced = referenced_logical_ids(statements)
    for other in ("StreamShard", "AggregateKey"):
        assert table_logical_id(template, other) not in referenced


def test_map_role(template: Template) -> None:
    statements = role_statements(template, MAP_HANDLER)
    assert actions_on(statements, stream_arn(template, "TradeID")) == {
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
    }
    # Query: which stream positions earlier delta items cover; PutItem: the rest.
    assert actions_on(statements, table_arn(template, "StreamShard")) == {"dynamodb:PutItem", "dynamodb:Query"}
    # No access to StateTable's items, nor to the aggregates or the quarantine.
    assert actions_on(statements, table_arn(template, "TradeID")) == set()
    referenced = referenced_logical_ids(statements)
    for other in ("AggregateKey", "RecordId"):
        assert table_logical_id(template, other) not in referenced
    assert actions_on(statements, "*") == {"dynamodb:ListStreams"}


def test_reduce_role(template: Template) -> None:
    statements = role_statements(template, REDUCE_HANDLER)
    assert actions_on(statements, stream_arn(template, "StreamShard")) == {
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
    }
    # TransactWriteItems is authorised per contained action: Update, Put (markers); no ConditionCheck is sent.
    # BatchGetItem: the consistent read of markers that decides a token mismatch.
    assert actions_on(statements, table_arn(template, "AggregateKey")) == {
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
        "dynamodb:BatchGetItem",
    }
    assert actions_on(statements, table_arn(template, "StreamShard")) == set()
    referenced = referenced_logical_ids(statements)
    for other in ("TradeID", "RecordId"):
        assert table_logical_id(template, other) not in referenced
    assert actions_on(statements, "*") == {"dynamodb:ListStreams"}


def test_nobody_may_delete_or_scan_and_only_map_queries_its_own_items(template: Template) -> None:
    for handler in HANDLERS.values():
        statements = role_statements(template, handler)
        actions = all_actions(statements)
        forbidden = {"dynamodb:DeleteItem", "dynamodb:Scan", "dynamodb:DeleteTable"}
        assert actions.isdisjoint(forbidden), (handler, actions & forbidden)
        if handler != MAP_HANDLER:
            assert "dynamodb:Query" not in actions, handler
    queried = [
        resource
        for statement in role_statements(template, MAP_HANDLER)
        if "dynamodb:Query" in as_list(statement["Action"])
        for resource in as_list(statement["Resource"])
    ]
    assert queried == [table_arn(template, "StreamShard")], "the DeltaTable only, no index, no other table"


MAPPING_ACTIONS = {
    # What Lambda's pollers call with the role, not the handler: the Kinesis mapping ...
    "kinesis:DescribeStream",
    "kinesis:DescribeStreamSummary",
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
    # ... and the DynamoDB stream mappings.
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
}
WRITE_ITS_LOGS = {"logs:CreateLogStream", "logs:PutLogEvents"}
NEEDED_BEYOND_THE_CALLS: dict[str, set[str]] = {}
"""Grants a role needs that its handler's calls do not show (none since the archive stopped reading)."""


def handler_module(handler: str) -> str:
    return handler.rsplit(".", 1)[0]


@pytest.mark.parametrize("handler", [*HANDLERS.values(), SETTINGS_GUARD_HANDLER])
def test_each_role_may_make_exactly_the_calls_its_handler_makes(template: Template, handler: str) -> None:
    """Both ways: no call the role cannot make, no grant the code never uses (the mapping's and the
    log group's aside)."""
    granted = all_actions(role_statements(template, handler)) - WRITE_ITS_LOGS - MAPPING_ACTIONS
    needed = iam_actions_needed(handler_module(handler)) | NEEDED_BEYOND_THE_CALLS.get(handler, set())
    assert granted == needed


def test_the_scan_finds_what_each_handler_calls() -> None:
    """The scan itself, on calls known to be there: it must not pass by finding nothing."""
    assert calls_made("reduce_function.handler") >= {"dynamodb:TransactWriteItems", "dynamodb:BatchGetItem"}
    assert iam_actions_needed("reduce_function.handler") >= {"dynamodb:PutItem", "dynamodb:UpdateItem"}
    assert "dynamodb:ConditionCheckItem" not in iam_actions_needed("reduce_function.handler")
    assert calls_made("archive_function.handler") == {"s3:PutObject"}
    assert calls_made("state_function.handler") == {"dynamodb:BatchExecuteStatement"}
    assert iam_actions_needed("state_function.handler") == {"dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate"}
    assert calls_made("settings_guard_function.handler") == {"dynamodb:GetItem"}  # the `#stats` read of a Create


def test_with_object_lock_the_archive_role_may_also_set_retention_on_batch_objects_only() -> None:
    _stack, template = synthesize({"archiveObjectLockDays": 30})
    statements = role_statements(template, ARCHIVE_HANDLER)
    granted = all_actions(statements) - WRITE_ITS_LOGS - MAPPING_ACTIONS
    assert granted == iam_actions_needed("archive_function.handler") | {"s3:PutObjectRetention"}
    (retention,) = [s for s in statements if "s3:PutObjectRetention" in as_list(s["Action"])]
    assert retention["Action"] == "s3:PutObjectRetention"
    assert retention["Resource"]["Fn::Join"][1][-1] == "/deltas/*"


def test_the_archive_role_reads_and_lists_nothing(template: Template) -> None:
    actions = all_actions(role_statements(template, ARCHIVE_HANDLER))
    assert actions.isdisjoint({"s3:GetObject", "s3:ListBucket"})
