"""`loadProfile`: one setting for every capacity mode. Spiky (the default) deploys everything on-demand; steady
deploys each table and the stream in the planner's cheaper mode, provisioned tables with auto scaling from
minimums sized by the plan."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from planner.inputs import ServiceTimes, StreamCapacity, TableCapacity
from planner.load_profile import MAXIMUM_HEADROOM, steady_table_capacity
from planner.model import OURS, plan_design
from planner.prices import load_price_table
from stacks import ExactlyOnceAggregationStack, SettingsError
from stacks.settings import PipelineSettings, declared_workload, planned_settings
from stacks.template_lint import lint_template
from tests.stacks.stack_helpers import resources_of_type, synthesize, table_logical_id
from tests.stacks.test_stack_capacity import scaling

STEADY: dict[str, Any] = {"loadProfile": "steady", "targetMessagesPerSecond": 50_000}
TABLE_KEYS = {"StateTable": "TradeID", "DeltaTable": "StreamShard", "AggregateTable": "AggregateKey"}


def settings_from(context: dict[str, Any]) -> PipelineSettings:
    return PipelineSettings.from_context(context.get)


@pytest.fixture(scope="module")
def steady() -> tuple[ExactlyOnceAggregationStack, Template]:
    return synthesize(STEADY)


def test_the_default_profile_is_spiky_and_deploys_everything_on_demand(template: Template) -> None:
    settings = settings_from({"targetMessagesPerSecond": 50_000})
    assert settings.load_profile == "spiky"
    capacities = (settings.state_table_capacity, settings.delta_table_capacity, settings.aggregate_table_capacity)
    assert capacities == (TableCapacity(),) * 3 and settings.stream_mode == StreamCapacity()
    template.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)
    for table in resources_of_type(template, "AWS::DynamoDB::Table").values():
        assert table["Properties"]["BillingMode"] == "PAY_PER_REQUEST"
    template.has_resource_properties("AWS::Kinesis::Stream", {"StreamModeDetails": {"StreamMode": "ON_DEMAND"}})


def test_steady_provisions_each_table_from_the_minimums_the_plan_sizes(
    steady: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    """Each table's minimums carry the declared rate's load at 70 %, the maximums leave room to double; the
    table starts at its minimums, and auto scaling tracks 70 % from there."""
    _stack, template = steady
    settings = settings_from(STEADY)
    plan = plan_design(
        declared_workload(settings), planned_settings(settings), ServiceTimes(), load_price_table(), OURS
    )
    assert not plan.stalls
    tables = resources_of_type(template, "AWS::DynamoDB::Table")
    for table, key in TABLE_KEYS.items():
        capacity = planned_settings(settings).table_capacity(table)
        sized = steady_table_capacity(
            plan.write_units_per_second(table), plan.read_units_per_second(table), TableCapacity()
        )
        assert capacity == sized, table
        properties = tables[table_logical_id(template, key)]["Properties"]
        assert "BillingMode" not in properties, "CloudFormation's default, PROVISIONED"
        assert properties["ProvisionedThroughput"] == {
            "ReadCapacityUnits": capacity.min_read_capacity,
            "WriteCapacityUnits": capacity.min_write_capacity,
        }
        targets = scaling(template, key)
        write, read = targets["dynamodb:table:WriteCapacityUnits"], targets["dynamodb:table:ReadCapacityUnits"]
        assert (write["min"], write["max"], write["target"]) == (
            capacity.min_write_capacity,
            capacity.max_write_capacity,
            70,
        )
        assert write["max"] >= MAXIMUM_HEADROOM * write["min"] and read["min"] == capacity.min_read_capacity
        assert write["min"] * 0.7 >= plan.write_units_per_second(table), "the minimum carries the load at 70 %"
    quarantine = tables[table_logical_id(template, "RecordId")]["Properties"]
    assert quarantine["BillingMode"] == "PAY_PER_REQUEST" and scaling(template, "RecordId") == {}


def test_steady_provisions_the_stream_with_shards_filled_to_70_percent(
    steady: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    _stack, template = steady
    assert settings_from(STEADY).stream_mode == StreamCapacity("provisioned", 72)
    template.has_resource_properties(
        "AWS::Kinesis::Stream", {"StreamModeDetails": {"StreamMode": "PROVISIONED"}, "ShardCount": 72}
    )


def test_a_steady_stack_is_cdk_nag_and_cfn_lint_clean(steady: tuple[ExactlyOnceAggregationStack, Template]) -> None:
    stack, template = steady
    nag = Annotations.from_stack(stack).find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert nag == [], [error.entry.data for error in nag]
    assert lint_template(json.dumps(template.to_json())) == []


def test_a_capacity_set_explicitly_is_kept_whatever_the_profile() -> None:
    settings = settings_from(
        {**STEADY, "deltaTableCapacity": {"mode": "on-demand"}, "streamMode": '{"mode": "on-demand"}'}
    )
    assert settings.delta_table_capacity == TableCapacity() and settings.stream_mode == StreamCapacity()
    assert settings.state_table_capacity.provisioned and settings.aggregate_table_capacity.provisioned
    spiky = settings_from({"targetMessagesPerSecond": 50_000, "stateTableCapacity": {"mode": "provisioned"}})
    assert spiky.state_table_capacity == TableCapacity(mode="provisioned")
    assert spiky.delta_table_capacity == TableCapacity()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("loadProfile", "bursty", "'loadProfile' must be 'spiky' or 'steady'"),
        ("loadProfile", "", "'loadProfile' must be 'spiky' or 'steady'"),
        ("stateTableCapacity", "provisioned", "'stateTableCapacity' must be 'auto' or an object with 'mode'"),
        ("streamMode", "on-demand", "'streamMode' must be 'auto', {\"mode\": \"on-demand\"} or"),
    ],
)
def test_a_bad_profile_or_capacity_is_refused_in_one_line(key: str, value: Any, message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        settings_from({key: value})
    assert message in str(refused.value) and "\n" not in str(refused.value)
