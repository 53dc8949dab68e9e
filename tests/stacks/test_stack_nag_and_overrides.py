"""cdk-nag AwsSolutions is clean, and context overrides reach the template."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from stacks import ExactlyOnceAggregationStack
from tests.stacks.stack_helpers import (
    MAP_HANDLER,
    REDUCE_HANDLER,
    STATE_HANDLER,
    event_source_mapping,
    function_properties,
    resources_of_type,
    synthesize,
)


def test_no_unsuppressed_aws_solutions_errors(default_stack: ExactlyOnceAggregationStack) -> None:
    annotations = Annotations.from_stack(default_stack)
    errors = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert errors == [], [error.entry.data for error in errors]


def test_no_unsuppressed_aws_solutions_warnings(default_stack: ExactlyOnceAggregationStack) -> None:
    annotations = Annotations.from_stack(default_stack)
    warnings = annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert warnings == [], [warning.entry.data for warning in warnings]


def test_every_suppression_has_a_specific_reason(template: Template) -> None:
    suppressions = [
        suppression
        for resource in template.to_json()["Resources"].values()
        for suppression in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert suppressions, "the reviewed IAM5 findings are expected to be suppressed"
    for suppression in suppressions:
        assert len(suppression["reason"]) >= 80
        assert suppression["id"] == "AwsSolutions-IAM5"
        # ListStreams on '*' (stream mappings), the archive's content-addressed deltas/ prefix and its
        # registry shards' prefix, and the versions of the settings guard's function, which its
        # provider framework may invoke.
        assert suppression["applies_to"] == ["Resource::*"] or (
            len(suppression["applies_to"]) == 1
            and re.fullmatch(
                r"Resource::<(.*\.Arn>/(deltas|metastore/receipts)/\*|SettingsGuardGuardFunction\w+\.Arn>:\*)",
                suppression["applies_to"][0],
            )
        )


OVERRIDES: dict[str, Any] = {
    "stackName": "EoaTest",
    "hierarchyLevels": ["Desk", "Book"],
    "stateBatchSize": "500",  # as the CDK CLI passes `-c stateBatchSize=500`
    "stateParallelizationFactor": 4,
    "stateWriteConcurrency": 32,
    "mapBatchSize": 250,
    "reduceBatchSize": 25,
    "deltaTtlDays": 3,
    "markerTtlDays": 14,
    "reduceIdempotency": "crt",
    "iteratorAgeAlarmMs": 120000,
    "logRetentionDays": 7,
    "powertoolsLayerVersion": 41,
    "removalPolicy": "destroy",
    "faultInjection": json.dumps(
        {
            "FAILURE_STATE_LAMBDA_PCT": 10,
            "FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT": 25,
            "FAILURE_REDUCE_LAMBDA_PCT": 2.5,
            "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT": 50,
        }
    ),
}


@pytest.fixture(scope="module")
def overridden() -> tuple[ExactlyOnceAggregationStack, Template]:
    return synthesize(OVERRIDES)


def environment(template: Template, handler: str) -> dict[str, Any]:
    variables: dict[str, Any] = function_properties(template, handler)["Environment"]["Variables"]
    return variables


def test_overridden_fault_injection_reaches_each_function(
    overridden: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    _stack, template = overridden
    state, map_, reduce = (environment(template, h) for h in (STATE_HANDLER, MAP_HANDLER, REDUCE_HANDLER))
    assert (state["FAILURE_STATE_LAMBDA_PCT"], state["FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT"]) == ("10", "0")
    assert (map_["FAILURE_MAP_LAMBDA_PCT"], map_["FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT"]) == ("0", "25")
    assert (reduce["FAILURE_REDUCE_LAMBDA_PCT"], reduce["FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT"]) == ("2.5", "50")
    # Each function carries only its own stage's variables.
    assert not [name for name in state if name.startswith(("FAILURE_MAP", "FAILURE_REDUCE"))]
    assert not [name for name in map_ if name.startswith(("FAILURE_STATE", "FAILURE_REDUCE"))]
    assert not [name for name in reduce if name.startswith(("FAILURE_STATE", "FAILURE_MAP"))]


def test_overridden_settings_reach_the_template(overridden: tuple[ExactlyOnceAggregationStack, Template]) -> None:
    stack, template = overridden
    assert stack.stack_name == "EoaTest"
    state_mapping = event_source_mapping(template, STATE_HANDLER)
    assert (state_mapping["BatchSize"], state_mapping["ParallelizationFactor"]) == (500, 4)
    assert event_source_mapping(template, MAP_HANDLER)["BatchSize"] == 250
    assert event_source_mapping(template, REDUCE_HANDLER)["BatchSize"] == 25
    assert environment(template, STATE_HANDLER)["HIERARCHY_LEVELS"] == "Desk,Book"
    assert environment(template, STATE_HANDLER)["STATE_WRITE_CONCURRENCY"] == "32"
    assert environment(template, MAP_HANDLER)["DELTA_TTL_DAYS"] == "3"
    assert environment(template, REDUCE_HANDLER)["REDUCE_IDEMPOTENCY"] == "crt"
    assert environment(template, REDUCE_HANDLER)["MARKER_TTL_DAYS"] == "14"
    layer = function_properties(template, MAP_HANDLER)["Layers"][0]["Fn::Join"][1][-1]
    assert layer.endswith("AWSLambdaPowertoolsPythonV3-python314-arm64:41")
    template.all_resources_properties("AWS::Logs::LogGroup", {"RetentionInDays": 7})
    alarms = resources_of_type(template, "AWS::CloudWatch::Alarm").values()
    iterator_thresholds = {
        a["Properties"]["Threshold"] for a in alarms if a["Properties"]["MetricName"] == "IteratorAge"
    }
    assert iterator_thresholds == {120000}


def test_removal_policy_destroy_applies_to_data_and_logs(
    overridden: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    _stack, template = overridden
    for resource_type in ("AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::Kinesis::Stream"):
        resources = resources_of_type(template, resource_type)
        assert resources
        assert {r["DeletionPolicy"] for r in resources.values()} == {"Delete"}, resource_type
