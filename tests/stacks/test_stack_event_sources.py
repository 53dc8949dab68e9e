"""Event source mappings: retried until success, so no record is lost; map's names its shard."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from tests.stacks.stack_helpers import (
    HANDLERS,
    MAP_HANDLER,
    REDUCE_HANDLER,
    STATE_HANDLER,
    event_source_mapping,
    function_properties,
    resources_of_type,
    synthesize,
    table_logical_id,
)


def test_exactly_four_mappings(template: Template) -> None:
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 4)


@pytest.mark.parametrize("handler", HANDLERS.values())
def test_every_mapping_retries_a_failed_batch_until_it_succeeds(template: Template, handler: str) -> None:
    mapping = event_source_mapping(template, handler)
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["MaximumRetryAttempts"] == -1
    assert mapping["MaximumRecordAgeInSeconds"] == -1
    assert mapping["BisectBatchOnFunctionError"] is False
    assert "FunctionResponseTypes" not in mapping  # no ReportBatchItemFailures
    assert "DestinationConfig" not in mapping  # nothing is ever discarded to an on-failure target


def test_state_reads_the_kinesis_stream(template: Template) -> None:
    mapping = event_source_mapping(template, STATE_HANDLER)
    (stream_id,) = resources_of_type(template, "AWS::Kinesis::Stream")
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [stream_id, "Arn"]}
    assert mapping["BatchSize"] == 100
    assert mapping["ParallelizationFactor"] == 2, "auto: the planner's choice for the default 400 msg/s"
    assert "FilterCriteria" not in mapping


def test_map_reads_the_state_table_stream(template: Template) -> None:
    mapping = event_source_mapping(template, MAP_HANDLER)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [table_logical_id(template, "TradeID"), "StreamArn"]}
    assert mapping["BatchSize"] == 100
    assert "FilterCriteria" not in mapping  # every change, and a batch is a run of consecutive records
    # The only documented way for a DynamoDB stream event to carry its shardId.
    assert mapping["TumblingWindowInSeconds"] == 900


@pytest.fixture(scope="module")
def template_with_concurrent_state_batches() -> Template:
    """A stack declaring 50,000 msg/s with three state batches at once per Kinesis shard and map
    batching; the reducers and slices are the planner's (`auto`) for those settings."""
    return synthesize(
        {
            "targetMessagesPerSecond": 50000,
            "stateParallelizationFactor": 3,
            "mapBatchSize": 2000,
            "mapBatchingWindowSeconds": 2,
        }
    )[1]


@pytest.mark.parametrize("settings", ["default", "concurrent state batches"])
def test_map_mapping_processes_one_batch_per_shard_at_a_time(
    settings: str, template: Template, template_with_concurrent_state_batches: Template
) -> None:
    chosen = template if settings == "default" else template_with_concurrent_state_batches
    factor = event_source_mapping(chosen, MAP_HANDLER).get("ParallelizationFactor", 1)
    assert factor == 1, (
        f"the map mapping has ParallelizationFactor {factor}; it must stay 1 (unset is 1). Above 1, Lambda "
        "splits a shard's records into concurrent batches by item key (order kept per key only), so a batch is no "
        "longer a run of consecutive records of its shard: the DeltaTable's stream-position keys (StreamShard, "
        "FirstSequenceNumber..LastSequenceNumber) would cover records of other batches, which the coverage query "
        "would then skip: records lost"
    )


@pytest.mark.parametrize("handler", [STATE_HANDLER, REDUCE_HANDLER])
def test_only_the_map_mapping_has_a_tumbling_window(template: Template, handler: str) -> None:
    assert "TumblingWindowInSeconds" not in event_source_mapping(template, handler)


def test_reduce_reads_only_inserts_of_the_delta_table_stream(template: Template) -> None:
    mapping = event_source_mapping(template, REDUCE_HANDLER)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [table_logical_id(template, "StreamShard"), "StreamArn"]}
    assert mapping["BatchSize"] == 10, "reduceBatchSize auto: batches of 10 at the default 400 msg/s"
    (pattern,) = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
    assert pattern == {"dynamodb": {"NewImage": {"StreamShard": {"S": [{"exists": True}]}}}}


def test_a_stack_declaring_50000_reduces_batches_of_46_and_one_with_a_window_keeps_10(
    template_with_concurrent_state_batches: Template,
) -> None:
    """`reduceBatchSize` `auto` reaches the reduce mapping: at 50,000 msg/s batches of 46, the most full
    map batches one transaction per node group holds (`planner.reduce.batches_in_one_transaction_per_group`);
    with a 2 s map window no batch keeps the modelled p50 within 1 s, so 10."""
    declared = synthesize({"targetMessagesPerSecond": 50000})[1]
    assert event_source_mapping(declared, REDUCE_HANDLER)["BatchSize"] == 46
    assert event_source_mapping(template_with_concurrent_state_batches, REDUCE_HANDLER)["BatchSize"] == 10


def test_reduce_writes_slices_of_the_totals_from_every_lane(template: Template) -> None:
    """No reservation: one reducer per DeltaTable stream shard and parallelization lane, each transaction
    adding to the slice its token names (`AGGREGATE_SLICES`: `auto`, one at the default 400 msg/s)."""
    assert function_properties(template, REDUCE_HANDLER)["Environment"]["Variables"]["AGGREGATE_SLICES"] == "1"
    assert event_source_mapping(template, REDUCE_HANDLER)["ParallelizationFactor"] == 1
    for handler in HANDLERS.values():
        assert "ReservedConcurrentExecutions" not in function_properties(template, handler), handler


def test_slices_and_the_reduce_parallelization_factor_come_from_the_settings() -> None:
    _stack, chosen = synthesize({"aggregateSlices": "4", "reduceParallelizationFactor": "5"})
    assert function_properties(chosen, REDUCE_HANDLER)["Environment"]["Variables"]["AGGREGATE_SLICES"] == "4"
    assert event_source_mapping(chosen, REDUCE_HANDLER)["ParallelizationFactor"] == 5
    for handler in (STATE_HANDLER, MAP_HANDLER):
        assert "AGGREGATE_SLICES" not in function_properties(chosen, handler)["Environment"]["Variables"]
    assert event_source_mapping(chosen, MAP_HANDLER).get("ParallelizationFactor", 1) == 1
