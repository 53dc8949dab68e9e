"""Stream, tables, functions, logs, alarms and outputs of the default stack."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from aggregation.names import STATE_SETTINGS_GUARD_TYPE
from stacks.settings import FAULT_INJECTION_VARIABLES
from stacks.stages import STATE_TIMEOUT_SECONDS
from tests.stacks.stack_helpers import (
    HANDLERS,
    MAP_HANDLER,
    REDUCE_HANDLER,
    SETTINGS_GUARD_HANDLER,
    STATE_HANDLER,
    function_logical_id,
    function_properties,
    powertools_parameter_logical_id,
    resources_of_type,
    table_logical_id,
)

TABLE_KEYS = ("TradeID", "StreamShard", "AggregateKey", "RecordId")


def table(template: Template, partition_key: str) -> dict[str, Any]:
    resource: dict[str, Any] = resources_of_type(template, "AWS::DynamoDB::Table")[
        table_logical_id(template, partition_key)
    ]
    return resource


def test_stack_name_comes_from_context(default_stack: Any) -> None:
    assert default_stack.stack_name == "ExactlyOnceAggregation"


def test_kinesis_stream_is_on_demand_and_kms_encrypted(template: Template) -> None:
    template.resource_count_is("AWS::Kinesis::Stream", 1)
    template.has_resource_properties(
        "AWS::Kinesis::Stream",
        {
            "StreamModeDetails": {"StreamMode": "ON_DEMAND"},
            "StreamEncryption": {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"},
            "ShardCount": Match.absent(),
        },
    )


def test_four_plain_tables_and_no_global_table(template: Template) -> None:
    template.resource_count_is("AWS::DynamoDB::Table", 4)
    template.resource_count_is("AWS::DynamoDB::GlobalTable", 0)
    for key in TABLE_KEYS:
        definitions = table(template, key)["Properties"]["AttributeDefinitions"]
        assert definitions[0] == {"AttributeName": key, "AttributeType": "S"}
        assert len(definitions) == (2 if key == "StreamShard" else 1), "no index, only the DeltaTable's sort key"


@pytest.mark.parametrize("partition_key", TABLE_KEYS)
def test_every_table_is_on_demand_recoverable_encrypted_and_retained(template: Template, partition_key: str) -> None:
    resource = table(template, partition_key)
    properties = resource["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"


def test_the_delta_table_is_keyed_by_stream_position(template: Template) -> None:
    properties = table(template, "StreamShard")["Properties"]
    assert properties["KeySchema"] == [
        {"AttributeName": "StreamShard", "KeyType": "HASH"},
        {"AttributeName": "FirstSequenceNumber", "KeyType": "RANGE"},
    ]
    assert {"AttributeName": "FirstSequenceNumber", "AttributeType": "S"} in properties["AttributeDefinitions"]


def test_streams_and_ttl_per_table(template: Template) -> None:
    state, delta, aggregate, quarantine = (table(template, key)["Properties"] for key in TABLE_KEYS)
    assert state["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert "TimeToLiveSpecification" not in state
    assert delta["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert delta["TimeToLiveSpecification"] == {"AttributeName": "ExpiresAt", "Enabled": True}
    assert "StreamSpecification" not in aggregate
    assert aggregate["TimeToLiveSpecification"] == {"AttributeName": "ExpiresAt", "Enabled": True}
    assert "StreamSpecification" not in quarantine
    # Quarantined records expire `quarantineTtlDays` after they were written (the state function sets ExpiresAt).
    assert quarantine["TimeToLiveSpecification"] == {"AttributeName": "ExpiresAt", "Enabled": True}


def test_the_four_pipeline_functions_and_the_settings_guard(template: Template) -> None:
    """The one Lambda-backed custom resource is the settings guard, whose provider framework adds
    CDK's `framework.onEvent` function; none other (LogRetention, AwsCustomResource)."""
    functions = resources_of_type(template, "AWS::Lambda::Function")
    assert sorted(f["Properties"]["Handler"] for f in functions.values()) == sorted(
        [*HANDLERS.values(), SETTINGS_GUARD_HANDLER, "framework.onEvent"]
    )
    custom = [
        resource["Type"]
        for resource in template.to_json()["Resources"].values()
        if resource["Type"].startswith("Custom::") or resource["Type"] == "AWS::CloudFormation::CustomResource"
    ]
    assert custom == [STATE_SETTINGS_GUARD_TYPE]


@pytest.mark.parametrize("handler", HANDLERS.values())
def test_functions_share_runtime_architecture_code_and_powertools_layer(template: Template, handler: str) -> None:
    properties = function_properties(template, handler)
    assert properties["Runtime"] == "python3.14"
    assert properties["Architectures"] == ["arm64"]
    (layer,) = properties["Layers"]
    # The publisher's layer, its version resolved at deploy time from AWS's public parameter
    # (tests/stacks/test_stack_any_account.py).
    assert {"Ref": powertools_parameter_logical_id(template)} in layer["Fn::Join"][1][-1]["Fn::Select"][1]["Fn::Split"]
    codes = {str(function_properties(template, h)["Code"]) for h in HANDLERS.values()}
    assert len(codes) == 1, "all four functions must share the one lambdas/ asset"
    assert properties["Timeout"] <= STATE_TIMEOUT_SECONDS, "the state function's, sized by messages, is the longest"
    assert properties["MemorySize"] >= 256


@pytest.mark.parametrize("handler", HANDLERS.values())
def test_each_function_logs_to_its_own_retained_log_group(template: Template, handler: str) -> None:
    log_group_id = function_properties(template, handler)["LoggingConfig"]["LogGroup"]["Ref"]
    log_group = resources_of_type(template, "AWS::Logs::LogGroup")[log_group_id]
    assert log_group["Properties"]["RetentionInDays"] == 30
    assert log_group["DeletionPolicy"] == "Retain"


def test_environment_per_function(template: Template) -> None:
    zeros = dict.fromkeys(FAULT_INJECTION_VARIABLES, "0")
    state_id, delta_id, aggregate_id, quarantine_id = (
        table_logical_id(template, key) for key in ("TradeID", "StreamShard", "AggregateKey", "RecordId")
    )

    def environment(handler: str) -> dict[str, Any]:
        variables: dict[str, Any] = function_properties(template, handler)["Environment"]["Variables"]
        return variables

    assert environment(STATE_HANDLER) == {
        "POWERTOOLS_SERVICE_NAME": "state",
        "POWERTOOLS_METRICS_NAMESPACE": "ExactlyOnceAggregation/ExactlyOnceAggregation",
        "STATE_TABLE": {"Ref": state_id},
        "QUARANTINE_TABLE": {"Ref": quarantine_id},
        "QUARANTINE_TTL_DAYS": "30",
        "HIERARCHY_LEVELS": "RiskType,TradeDesk,Region",
        "STATE_WRITE_CONCURRENCY": "16",
        "VALUE_INTEGER_DIGITS": "18",
        "VALUE_FRACTION_DIGITS": "10",
        "STATE_VERSION_CACHE_SIZE": "100000",
        "FAILURE_STATE_LAMBDA_PCT": zeros["FAILURE_STATE_LAMBDA_PCT"],
        "FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT": "0",
    }
    assert environment(MAP_HANDLER) == {
        "POWERTOOLS_SERVICE_NAME": "map",
        "POWERTOOLS_METRICS_NAMESPACE": "ExactlyOnceAggregation/ExactlyOnceAggregation",
        "DELTA_TABLE": {"Ref": delta_id},
        "HIERARCHY_LEVELS": "RiskType,TradeDesk,Region",
        "DELTA_TTL_DAYS": "7",
        "FAILURE_MAP_LAMBDA_PCT": "0",
        "FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT": "0",
    }
    assert environment(REDUCE_HANDLER) == {
        "POWERTOOLS_SERVICE_NAME": "reduce",
        "POWERTOOLS_METRICS_NAMESPACE": "ExactlyOnceAggregation/ExactlyOnceAggregation",
        "AGGREGATE_TABLE": {"Ref": aggregate_id},
        "REDUCE_IDEMPOTENCY": "crt+marker",
        "MARKER_TTL_DAYS": "7",
        "AGGREGATE_SLICES": "1",
        "FAILURE_REDUCE_LAMBDA_PCT": "0",
        "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT": "0",
    }


@pytest.mark.parametrize("handler", HANDLERS.values())
def test_iterator_age_alarm_per_function(template: Template, handler: str) -> None:
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/Lambda",
            "MetricName": "IteratorAge",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": function_logical_id(template, handler)}}],
            "Statistic": "Maximum",
            "Threshold": 60000,
            "ComparisonOperator": "GreaterThanThreshold",
            "TreatMissingData": "notBreaching",
        },
    )


@pytest.mark.parametrize("metric_name", ["QuarantinedRecords", "ConflictingDuplicates"])
def test_alarm_on_any_quarantined_or_conflicting_record(template: Template, metric_name: str) -> None:
    template.resource_count_is("AWS::CloudWatch::Alarm", 8)
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "ExactlyOnceAggregation/ExactlyOnceAggregation",
            "MetricName": metric_name,
            "Dimensions": [{"Name": "service", "Value": "state"}],
            "Statistic": "Sum",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": 1,
        },
    )


def test_outputs_have_the_contract_keys(template: Template) -> None:
    outputs = template.to_json()["Outputs"]
    (stream_id,) = resources_of_type(template, "AWS::Kinesis::Stream")
    assert outputs["StreamName"]["Value"] == {"Ref": stream_id}
    expected = {
        "StateTableName": "TradeID",
        "DeltaTableName": "StreamShard",
        "AggregateTableName": "AggregateKey",
        "QuarantineTableName": "RecordId",
    }
    for output_key, partition_key in expected.items():
        assert outputs[output_key]["Value"] == {"Ref": table_logical_id(template, partition_key)}
    assert outputs["MetricsNamespace"]["Value"] == "ExactlyOnceAggregation/ExactlyOnceAggregation"
    assert set(outputs) == {
        "StreamName",
        "ArchiveBucketName",
        "DashboardUrl",
        "AlarmTopicArn",
        "MetricsNamespace",
        *expected,
    }
