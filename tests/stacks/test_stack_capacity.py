"""Capacity settings: table modes with auto scaling, the map batching window, reduce memory, the version
cache size, and the target-rate check at synthesis."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from planner.inputs import TableCapacity
from stacks import ExactlyOnceAggregationStack, SettingsError
from stacks.capacity import capacity_flags
from stacks.settings import PipelineSettings, planned_settings
from tests.stacks.stack_helpers import (
    MAP_HANDLER,
    REDUCE_HANDLER,
    STATE_HANDLER,
    event_source_mapping,
    function_properties,
    resources_of_type,
    synthesize,
    table_logical_id,
)

PROVISIONED = {
    "mode": "provisioned",
    "minWriteCapacity": 50,
    "maxWriteCapacity": 4000,
    "minReadCapacity": 2,
    "maxReadCapacity": 20,
    "targetUtilizationPercent": 60,
}
OVERRIDES: dict[str, Any] = {
    "stateTableCapacity": json.dumps(PROVISIONED),  # as `-c stateTableCapacity='{...}'` passes it
    "aggregateTableCapacity": {"mode": "provisioned"},
    "mapBatchingWindowSeconds": "5",
    "reduceMemoryMb": 1024,
    "stateVersionCacheSize": 0,
}


def settings_from(context: dict[str, Any]) -> PipelineSettings:
    return PipelineSettings.from_context(context.get)


@pytest.fixture(scope="module")
def provisioned() -> tuple[ExactlyOnceAggregationStack, Template]:
    return synthesize(OVERRIDES)


def scaling(template: Template, partition_key: str) -> dict[str, dict[str, Any]]:
    """The table's scalable targets by dimension, each with the target value of its policy."""
    table_id = table_logical_id(template, partition_key)
    policies = resources_of_type(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    found = {}
    for target_id, target in resources_of_type(template, "AWS::ApplicationAutoScaling::ScalableTarget").items():
        properties = target["Properties"]
        if {"Ref": table_id} not in properties["ResourceId"]["Fn::Join"][1]:
            continue
        (policy,) = [
            p["Properties"] for p in policies.values() if p["Properties"]["ScalingTargetId"] == {"Ref": target_id}
        ]
        found[properties["ScalableDimension"]] = {
            "min": properties["MinCapacity"],
            "max": properties["MaxCapacity"],
            "target": policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"],
            "metric": policy["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"],
            "role": properties["RoleARN"],
        }
    return found


def test_defaults_keep_every_table_on_demand_without_auto_scaling(template: Template) -> None:
    template.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)
    settings = settings_from({})
    tables = (settings.state_table_capacity, settings.delta_table_capacity, settings.aggregate_table_capacity)
    assert {table.mode for table in tables} == {"on-demand"}
    assert (settings.map_batching_window_seconds, settings.reduce_memory_mb) == (0, 256), "auto at 400 msg/s"
    assert function_properties(template, REDUCE_HANDLER)["MemorySize"] == settings.reduce_memory_mb
    assert settings.state_version_cache_size == 100_000
    assert (settings.target_messages_per_second, settings.capacity_check) == (400, "refuse")
    assert "MaximumBatchingWindowInSeconds" not in event_source_mapping(template, MAP_HANDLER)


def test_a_provisioned_table_starts_at_its_minimum_and_auto_scales_on_utilisation(
    provisioned: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    _stack, template = provisioned
    state = resources_of_type(template, "AWS::DynamoDB::Table")[table_logical_id(template, "TradeID")]["Properties"]
    assert "BillingMode" not in state, "CloudFormation's default, PROVISIONED"
    assert state["ProvisionedThroughput"] == {"ReadCapacityUnits": 2, "WriteCapacityUnits": 50}
    assert state["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}, "only the billing changed"
    assert state["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    targets = scaling(template, "TradeID")
    write, read = targets["dynamodb:table:WriteCapacityUnits"], targets["dynamodb:table:ReadCapacityUnits"]
    assert (write["min"], write["max"], write["target"]) == (50, 4000, 60)
    assert (read["min"], read["max"], read["target"]) == (2, 20, 60)
    assert write["metric"] == {"PredefinedMetricType": "DynamoDBWriteCapacityUtilization"}
    assert "AWSServiceRoleForApplicationAutoScaling_DynamoDBTable" in json.dumps(write["role"])
    # Unset figures take the documented defaults.
    aggregate = scaling(template, "AggregateKey")["dynamodb:table:WriteCapacityUnits"]
    default = TableCapacity()
    assert (aggregate["min"], aggregate["max"], aggregate["target"]) == (
        default.min_write_capacity,
        default.max_write_capacity,
        default.target_utilization_percent,
    )
    # The delta and quarantine tables stay on demand.
    for key in ("StreamShard", "RecordId"):
        properties = resources_of_type(template, "AWS::DynamoDB::Table")[table_logical_id(template, key)]["Properties"]
        assert properties["BillingMode"] == "PAY_PER_REQUEST" and scaling(template, key) == {}


def test_batching_window_reduce_memory_and_cache_size_reach_the_template(
    provisioned: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    _stack, template = provisioned
    assert event_source_mapping(template, MAP_HANDLER)["MaximumBatchingWindowInSeconds"] == 5
    assert "MaximumBatchingWindowInSeconds" not in event_source_mapping(template, REDUCE_HANDLER)
    assert function_properties(template, REDUCE_HANDLER)["MemorySize"] == 1024
    assert function_properties(template, STATE_HANDLER)["Environment"]["Variables"]["STATE_VERSION_CACHE_SIZE"] == "0"


def test_a_provisioned_stack_is_cdk_nag_clean(provisioned: tuple[ExactlyOnceAggregationStack, Template]) -> None:
    stack, _template = provisioned
    annotations = Annotations.from_stack(stack)
    assert annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*")) == []
    assert annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*")) == []


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("stateTableCapacity", {"mode": "provisioned", "maxWriteCapacity": 4}, "'stateTableCapacity.maxWriteCapacity'"),
        ("deltaTableCapacity", {"mode": "PROVISIONED"}, "'deltaTableCapacity' must be 'auto' or an object with 'mode'"),
        ("deltaTableCapacity", "provisioned", "'deltaTableCapacity' must be 'auto' or an object with 'mode'"),
        ("aggregateTableCapacity", {"mode": "provisioned", "maxWCU": 9}, "must be 'auto' or an object with 'mode'"),
        ("aggregateTableCapacity", {"mode": "provisioned", "targetUtilizationPercent": 95}, "from 20 to 90"),
        ("aggregateTableCapacity", {"mode": "provisioned", "minReadCapacity": 0}, "'aggregateTableCapacity.minRead"),
        ("stateTableCapacity", {"mode": "provisioned", "minReadCapacity": 5, "maxReadCapacity": 4}, "at least min"),
        ("mapBatchingWindowSeconds", 301, "'mapBatchingWindowSeconds' must be an integer from 0 to 300"),
        ("mapBatchingWindowSeconds", 1.5, "'mapBatchingWindowSeconds' must be an integer"),
        ("reduceMemoryMb", 64, "'reduceMemoryMb' must be 'auto' or an integer from 128 to 10240"),
        ("reduceMemoryMb", "big", "'reduceMemoryMb' must be 'auto' or an integer from 128 to 10240"),
        ("stateVersionCacheSize", -1, "'stateVersionCacheSize' must be an integer from 0"),
        ("targetMessagesPerSecond", 0, "'targetMessagesPerSecond' must be an integer from 1"),
        ("capacityCheck", "ignore", "'capacityCheck' must be 'refuse' or 'warn'"),
    ],
)
def test_invalid_capacity_settings_are_refused_with_a_one_line_error(key: str, value: Any, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        settings_from({key: value})
    text = str(raised.value)
    assert message in text and "\n" not in text
    assert text.startswith(f"cdk.json context '{key}")


# --- the target-rate check ----------------------------------------------------------------------


def test_the_default_settings_carry_the_default_target_with_no_finding(
    default_stack: ExactlyOnceAggregationStack,
) -> None:
    assert capacity_flags(settings_from({})) == []
    assert Annotations.from_stack(default_stack).find_warning("*", Match.any_value()) == []


def test_the_check_plans_with_the_stack_s_own_settings(template: Template) -> None:
    settings = settings_from(
        {"mapBatchSize": 2000, "mapBatchingWindowSeconds": 2, "reduceMemoryMb": 512, "stateTableCapacity": PROVISIONED}
    )
    planned = planned_settings(settings)
    assert (planned.map_batch_size, planned.map_batching_window_seconds, planned.reduce_memory_mb) == (2000, 2, 512)
    assert (planned.aggregate_slices, planned.reduce_parallelization_factor) == (1, 1), "auto, at 400 msg/s"
    assert planned.reduce_batch_size == 10, "auto, at 400 msg/s"
    assert planned.state_table == settings.state_table_capacity and planned.state_table.provisioned
    assert (planned.state_memory_mb, planned.map_memory_mb) == (
        function_properties(template, STATE_HANDLER)["MemorySize"],
        function_properties(template, MAP_HANDLER)["MemorySize"],
    )


UNPLANNED = {
    "stateParallelizationFactor": 1,
    "reduceParallelizationFactor": 1,
    "aggregateSlices": 16,
    "reduceMemoryMb": 256,
    "reduceBatchSize": 10,
}
"""Settings set explicitly instead of left to the planner (`auto`): what a stack sized for less declares."""


def test_a_target_the_settings_cannot_carry_is_refused_in_one_line_naming_the_fix() -> None:
    with pytest.raises(SettingsError) as raised:
        synthesize({"targetMessagesPerSecond": 50_000, **UNPLANNED})
    text = str(raised.value)
    assert "\n" not in text
    assert text.startswith("cdk.json context 'targetMessagesPerSecond' (50,000 msg/s) is more than these settings")
    assert "each of 3 reducers would be" in text and "set reduceParallelizationFactor to" in text
    assert "set stateParallelizationFactor to 3" in text
    assert "set capacityCheck to 'warn'" in text
    assert "quota" not in text, "an account quota is a warning, never a refusal"


def test_capacity_check_warn_synthesizes_with_a_warning_per_finding() -> None:
    stack, _template = synthesize({"targetMessagesPerSecond": 50_000, "capacityCheck": "warn", **UNPLANNED})
    warnings = [str(w.entry.data) for w in Annotations.from_stack(stack).find_warning("*", Match.any_value())]
    assert any("cannot keep up" in w and "reducers would be" in w for w in warnings)
    assert any("needs an account-side change" in w and "quota" in w for w in warnings)


SET_TO = re.compile(r"set (\w+) to ([0-9.]+)")
MAP_BATCHED_50000 = {"targetMessagesPerSecond": 50_000, "mapBatchSize": 1000, "mapBatchingWindowSeconds": 1}
"""A stack declaring 50,000 msg/s with map batches of up to 1,000 records or a second, and
`UNPLANNED`'s state lanes, reducers and slices, which cannot carry it."""


def following_the_refusal(context: dict[str, Any]) -> dict[str, Any]:
    """`context` with every setting the capacity check's refusal names (`set <key> to <value>`) set to
    what it asks for, as a user following its one line would."""
    stalls = [flag for flag in capacity_flags(settings_from(context)) if flag.blocking]
    changes = {key: json.loads(value) for flag in stalls for key, value in SET_TO.findall(flag.change)}
    assert changes, [flag.change for flag in stalls]
    return {**context, **changes}


def test_the_settings_the_planner_asks_for_carry_50000_messages_per_second() -> None:
    context = following_the_refusal({**MAP_BATCHED_50000, **UNPLANNED})
    assert context["stateParallelizationFactor"] > UNPLANNED["stateParallelizationFactor"]
    assert context["reduceParallelizationFactor"] > UNPLANNED["reduceParallelizationFactor"]
    flags = capacity_flags(settings_from(context))
    assert [flag for flag in flags if flag.blocking] == []
    assert [flag.problem.split(" needs")[0] for flag in flags] == ["StateTable"], "only the quota advice is left"


def test_a_provisioned_maximum_below_the_target_s_load_is_refused() -> None:
    small = {"mode": "provisioned", "maxWriteCapacity": 100}
    with pytest.raises(SettingsError, match=r"StateTable needs 400 WCU/s, over its provisioned maximum of 100"):
        synthesize({"stateTableCapacity": small})


STREAM_SET_TO = re.compile(r"set streamMode to (\{.*?\}) \(")


def test_aggregated_producers_get_more_shards_not_more_state_lanes() -> None:
    """The Lambda Developer Guide's Kinesis page: "Note that parallelization factor will not work if
    you are using Kinesis aggregation." Full KPL aggregates put 147 messages in a record, so 15 shards
    carry 50,000 msg/s: a state factor above 1 is refused, `auto` plans 1, and the capacity check asks
    for the shards one state lane each needs; with them every stage keeps up."""
    plain = following_the_refusal({**MAP_BATCHED_50000, **UNPLANNED})
    assert plain["stateParallelizationFactor"] > 1
    assert [flag for flag in capacity_flags(settings_from(plain)) if flag.blocking] == []

    with pytest.raises(SettingsError) as raised:
        settings_from({**plain, "producerAggregation": True})
    text = str(raised.value)
    assert "\n" not in text
    assert text.startswith("cdk.json context 'stateParallelizationFactor' must be 1 or 'auto' with producerAggregation")
    assert "does not work with Kinesis aggregation" in text

    aggregated = {**plain, "producerAggregation": True, "stateParallelizationFactor": "auto"}
    assert settings_from(aggregated).state_parallelization_factor == 1
    assert settings_from({**aggregated, "stateParallelizationFactor": 1}).state_parallelization_factor == 1
    stalls = [flag for flag in capacity_flags(settings_from(aggregated)) if flag.blocking]
    (state,) = [flag for flag in stalls if flag.problem.startswith("one state instance")]
    assert "stateParallelizationFactor" not in state.change
    (stream,) = STREAM_SET_TO.findall(state.change)
    assert json.loads(stream)["mode"] == "provisioned"

    more_shards = {**aggregated, "streamMode": stream}  # as `-c streamMode='{...}'` passes it
    settings = settings_from(more_shards)
    assert settings.state_parallelization_factor == 1
    assert settings.stream_mode.shard_count == json.loads(stream)["shardCount"] > 15
    assert [flag for flag in capacity_flags(settings) if flag.blocking] == []
    with pytest.raises(SettingsError, match="'producerAggregation' must be true or false"):
        settings_from({"producerAggregation": "sometimes"})


def test_an_aggregated_stack_deploys_one_state_lane_a_shard() -> None:
    """Synthesized with `producerAggregation`, the state mapping's ParallelizationFactor is 1."""
    _stack, template = synthesize({"producerAggregation": True})
    assert event_source_mapping(template, STATE_HANDLER)["ParallelizationFactor"] == 1


@pytest.mark.parametrize("rate", [50_000, 250_000])
def test_a_stack_declaring_a_high_rate_is_sized_for_it_by_its_defaults(rate: int) -> None:
    """Issue 23: with cdk.json's defaults (`auto`) nothing that cannot keep up is flagged at 50,000 or
    250,000 msg/s; only account quotas are (warnings)."""
    flags = capacity_flags(settings_from({"targetMessagesPerSecond": rate}))
    assert [flag.problem for flag in flags if flag.blocking] == []
    assert all("quota" in flag.change for flag in flags)
