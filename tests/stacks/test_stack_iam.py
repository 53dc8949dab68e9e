"""Least privilege: each role may do exactly what its stage does, on exactly its resources."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from tests.stacks.stack_helpers import (
    HANDLERS,
    MAP_HANDLER,
    REDUCE_HANDLER,
    STATE_HANDLER,
    actions_on,
    as_list,
    function_properties,
    referenced_logical_ids,
    resources_of_type,
    role_statements,
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
    assert actions_on(statements, table_arn(template, "TradeID")) == {"dynamodb:UpdateItem"}
    assert actions_on(statements, table_arn(template, "RecordId")) == {
        "dynamodb:PutItem",
        "dynamodb:BatchWriteItem",
    }
    (stream_id,) = resources_of_type(template, "AWS::Kinesis::Stream")
    kinesis_actions = actions_on(statements, {"Fn::GetAtt": [stream_id, "Arn"]})
    assert {"kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:DescribeStream"} <= kinesis_actions
    assert not any(action.startswith("kinesis:Put") for action in kinesis_actions)
    dynamodb_actions = {a for a in all_actions(statements) if a.startswith("dynamodb:")}
    assert dynamodb_actions == {"dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:BatchWriteItem"}
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
    # TransactWriteItems is authorised per contained action: Update, Put (markers), ConditionCheck.
    # BatchGetItem: the consistent read of markers that decides a token mismatch.
    assert actions_on(statements, table_arn(template, "AggregateKey")) == {
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
        "dynamodb:ConditionCheckItem",
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
