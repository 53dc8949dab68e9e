"""The settings guard (`stacks/settings_guard.py`): the custom resource that fails an unsafe deploy."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from aggregation.names import STATE_SETTINGS_GUARD_TYPE
from aggregation.setting_changes import AGGREGATE_TABLE_PROPERTY, UPGRADE_DRAINED
from stacks import ExactlyOnceAggregationStack
from stacks.settings import SettingsError
from tests.stacks.stack_helpers import (
    HANDLERS,
    SETTINGS_GUARD_HANDLER,
    as_list,
    function_logical_id,
    function_properties,
    resources_of_type,
    role_statements,
    synthesize,
    table_logical_id,
)


def guard(template: Template) -> tuple[str, dict[str, Any]]:
    (found,) = resources_of_type(template, STATE_SETTINGS_GUARD_TYPE).items()
    return found


def test_the_guards_properties_are_exactly_the_state_settings_and_the_aggregate_table(
    template: Template, default_stack: ExactlyOnceAggregationStack
) -> None:
    properties = dict(guard(template)[1]["Properties"])
    service_token = properties.pop("ServiceToken")
    assert properties == {
        **default_stack.settings.state_settings.properties(),
        AGGREGATE_TABLE_PROPERTY: {"Ref": table_logical_id(template, "AggregateKey")},
    }, "no drained declaration unless the deploy makes one"
    (provider_id, _attribute) = service_token["Fn::GetAtt"]
    provider = resources_of_type(template, "AWS::Lambda::Function")[provider_id]["Properties"]
    guard_function = function_logical_id(template, SETTINGS_GUARD_HANDLER)
    assert provider["Environment"]["Variables"]["USER_ON_EVENT_FUNCTION_ARN"] == {
        "Fn::GetAtt": [guard_function, "Arn"]
    }, "the provider framework calls the guard's handler"


def test_every_pipeline_function_and_mapping_is_updated_only_after_the_guard(template: Template) -> None:
    guard_id = guard(template)[0]
    functions = resources_of_type(template, "AWS::Lambda::Function")
    for handler in HANDLERS.values():
        assert guard_id in functions[function_logical_id(template, handler)]["DependsOn"], handler
    mappings = resources_of_type(template, "AWS::Lambda::EventSourceMapping")
    assert len(mappings) == len(HANDLERS)
    for mapping in mappings.values():
        assert guard_id in mapping["DependsOn"]


def test_the_guard_may_only_log_and_get_aggregate_items_and_its_provider_only_log_and_call_it(
    template: Template,
) -> None:
    """The guard's one read: the AggregateTable's `#stats` item, by key (no Scan, Query, index or
    other table)."""
    guard_function = function_logical_id(template, SETTINGS_GUARD_HANDLER)
    log_group = function_properties(template, SETTINGS_GUARD_HANDLER)["LoggingConfig"]["LogGroup"]["Ref"]
    assert role_statements(template, SETTINGS_GUARD_HANDLER) == [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [log_group, "Arn"]},
        },
        {
            "Action": "dynamodb:GetItem",
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [table_logical_id(template, "AggregateKey"), "Arn"]},
        },
    ]
    provider_handler = "framework.onEvent"
    provider_statements = role_statements(template, provider_handler)
    guard_arn = {"Fn::GetAtt": [guard_function, "Arn"]}
    by_action = {
        action: statement["Resource"] for statement in provider_statements for action in as_list(statement["Action"])
    }
    assert by_action == {
        "logs:CreateLogStream": {
            "Fn::GetAtt": [function_properties(template, provider_handler)["LoggingConfig"]["LogGroup"]["Ref"], "Arn"]
        },
        "logs:PutLogEvents": {
            "Fn::GetAtt": [function_properties(template, provider_handler)["LoggingConfig"]["LogGroup"]["Ref"], "Arn"]
        },
        # The framework waits for the guard function to be active (GetFunction), then invokes it.
        "lambda:GetFunction": guard_arn,
        "lambda:InvokeFunction": [guard_arn, {"Fn::Join": ["", [guard_arn, ":*"]]}],
    }


def test_the_guards_settings_follow_the_context() -> None:
    stack, template = synthesize({"valueIntegerDigits": 19, "hierarchyLevels": ["Region", "RiskType"]})
    properties = guard(template)[1]["Properties"]
    assert (properties["ValueIntegerDigits"], properties["HierarchyLevels"]) == ("19", "Region,RiskType")
    assert {key: value for key, value in properties.items() if key != "ServiceToken"} == {
        **stack.settings.state_settings.properties(),
        AGGREGATE_TABLE_PROPERTY: {"Ref": table_logical_id(template, "AggregateKey")},
    }


def test_the_drained_declaration_reaches_the_guard_as_a_property_and_is_validated() -> None:
    """`-c upgradeDrained=true` (the CLI passes a string), the AWS spelling of the local `up --drained`."""
    _stack, template = synthesize({"upgradeDrained": "true"})
    assert guard(template)[1]["Properties"][UPGRADE_DRAINED] == "true"
    with pytest.raises(SettingsError, match="'upgradeDrained' must be true or false"):
        synthesize({"upgradeDrained": "yes"})
