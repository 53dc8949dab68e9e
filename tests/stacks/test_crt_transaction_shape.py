"""Issue 32, item 4: no setting change the guard accepts re-forms a reduce transaction in mode `crt`.

In `crt` a retried reduce batch is recognised by its ClientRequestToken alone, which names the
units of one transaction. So every pair of settings the settings guard accepts over stored state
must form the same transactions (tokens and requests) from the same DeltaTable records. The pairs
go through the real settings resolution (`PipelineSettings.from_context`, `auto` planned for the
declared rate with a release's planner defaults, `ServiceTimes`), the guard's rule
(`change_refusal` of their `state_settings`), the local runner's batching of a DynamoDB stream
shard (`local.runner.lanes`: lanes by item key, batches of `BatchSize`), and the reduce stage's
planning (`aggregation.transactions`, `reduce_function.handler.transaction_items`).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from aggregation.aggregate_items import slice_of
from aggregation.delta_items import DeltaItem, decode_delta_batch, decode_stream_run, encode_delta_item
from aggregation.deltas import NodeDelta
from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from aggregation.setting_changes import StateSettings, change_refusal
from aggregation.stream_positions import StreamRun
from aggregation.transactions import DeltaBatch, plan_transactions, split_into_units
from local.runner.discovery import MappingConfig
from local.runner.lanes import Lane, lane_of
from local.runner.stats import RunnerStats
from planner.inputs import ServiceTimes
from reduce_function.handler import IdempotencyMode, transaction_items
from stacks.settings import PipelineSettings

TABLE = "AggregateTable"
MARKER_TTL_SECONDS = 7 * 86400
SHAPE = (
    "reduce_batch_size",
    "reduce_parallelization_factor",
    "aggregate_slices",
    "node_groups",
    "nodes_per_unit",
    "transaction_actions",
)
"""What the guard carries of how a reduce transaction is formed (`aggregation.setting_changes`)."""


def shape(deployed: PipelineSettings) -> list[object]:
    return [getattr(deployed.state_settings, name) for name in SHAPE]


def resolved(context: dict[str, Any], times: ServiceTimes) -> PipelineSettings:
    return PipelineSettings.from_context(context.get, times)


def delta_records(count: int, nodes: int) -> list[dict[str, Any]]:
    """DeltaTable INSERT records of one stream shard, as Lambda delivers them: items of several
    StateTable shards (so of several slices), each touching some of `nodes` nodes."""
    records = []
    for index in range(count):
        run = StreamRun(f"state-stream/shardId-{index % 5}", 1000 * index, 1000 * index + 9)
        deltas = {
            f"Delta:Desk{(index * 7 + n) % nodes}": NodeDelta(Decimal(index + n), 1) for n in range(1 + index % 4)
        }
        batch = DeltaBatch(run.batch_hash, deltas, 10, (), created_at=1_700_000_000 + index)
        image = encode_delta_item(DeltaItem(run=run, batch=batch, expires_at=1_700_604_800))
        keys = {"StreamShard": image["StreamShard"], "FirstSequenceNumber": image["FirstSequenceNumber"]}
        records.append(
            {"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": image, "SequenceNumber": f"{100 + index}"}}
        )
    return records


def lane_batches(records: list[dict[str, Any]], batch_size: int, factor: int) -> list[list[dict[str, Any]]]:
    """The batches the reduce mapping delivers from one shard: each record in the lane its key
    hashes to, each lane's records cut into batches by the runner's own `Lane`."""
    mapping = MappingConfig(
        uuid="reduce",
        function_name="Reduce",
        event_source_arn="arn:aws:dynamodb:eu-west-1:111122223333:table/Delta/stream/1",
        batch_size=batch_size,
        maximum_batching_window_seconds=0,
        starting_position="TRIM_HORIZON",
        maximum_retry_attempts=-1,
        bisect_batch_on_function_error=False,
        report_batch_item_failures=False,
        filter_patterns=(),
        parallelization_factor=factor,
        tumbling_window_seconds=0,
        enabled=True,
    )
    batches = []
    for lane_index in range(factor):
        lane = Lane(
            name=f"lane-{lane_index}",
            mapping=mapping,
            shard_id="shardId-1",
            invoke=lambda _event: None,  # type: ignore[arg-type,return-value]
            stats=RunnerStats(None),
            stop=threading.Event(),
            commit=lambda _sequence: None,
            committed=None,
        )
        lane.add([record for record in records if lane_of(record, factor) == lane_index])
        while (batch := lane.take_batch(force=True)) is not None:
            batches.append(batch.records)
            del lane.buffer[: batch.consumed]
    return batches


def transactions(records: list[dict[str, Any]], deployed: PipelineSettings) -> list[tuple[str, list[Any]]]:
    """Every reduce transaction `deployed` forms from `records`: its token and its request."""
    mode = IdempotencyMode(deployed.reduce_idempotency)
    formed = []
    for batch in lane_batches(records, deployed.reduce_batch_size, deployed.reduce_parallelization_factor):
        units = []
        for record in batch:
            image = record["dynamodb"]["NewImage"]
            aggregate_slice = slice_of(decode_stream_run(image).stream_shard, deployed.aggregate_slices)
            units.extend(split_into_units(decode_delta_batch(image), aggregate_slice=aggregate_slice))
        for plan in plan_transactions(units, mode is IdempotencyMode.TOKEN_AND_MARKERS):
            formed.append((plan.client_request_token, transaction_items(plan, TABLE, mode, MARKER_TTL_SECONDS)))
    return sorted(formed, key=lambda transaction: transaction[0])


def test_a_new_declared_rate_in_crt_neither_re_plans_the_lanes_nor_passes_a_change_of_them() -> None:
    """The issue's deploy: 10,000 -> 20,000 msg/s took `auto` from 1 reduce lane to 3, the guard
    accepted it (slices and batch size unchanged), and a committed batch retried across the new
    lanes was applied twice. Now `auto` keeps 1 lane, and a factor of 3 set by hand is refused."""
    before = resolved({"reduceIdempotency": TOKEN_ONLY, "targetMessagesPerSecond": 10_000}, ServiceTimes())
    after = resolved(
        {"reduceIdempotency": TOKEN_ONLY, "targetMessagesPerSecond": 20_000, "capacityCheck": "warn"}, ServiceTimes()
    )
    assert change_refusal(before.state_settings, after.state_settings) is None
    assert shape(after) == shape(before)
    records = delta_records(30, nodes=12)
    assert transactions(records, after) == transactions(records, before)
    by_hand = replace(after, reduce_parallelization_factor=3)
    assert transactions(records, by_hand) != transactions(records, before), "3 lanes re-form the batches"
    refusal = change_refusal(before.state_settings, by_hand.state_settings)
    assert refusal is not None and refusal.startswith("reduceParallelizationFactor 1 -> 3 in reduceIdempotency crt")


def test_the_guard_carries_every_input_that_forms_a_reduce_transaction() -> None:
    """In `crt` a change of the batch size, the lanes, the slices or a transaction-shaping code
    constant is refused; with markers only a constant that renames markers is."""
    deployed = resolved({"reduceIdempotency": TOKEN_ONLY}, ServiceTimes()).state_settings
    changes: tuple[dict[str, Any], ...] = (
        {"reduce_batch_size": 25},
        {"reduce_parallelization_factor": 2},
        {"aggregate_slices": 4},
        {"node_groups": 3},
        {"nodes_per_unit": 50},
        {"transaction_actions": 25},
    )
    for change in changes:
        assert change_refusal(deployed, replace(deployed, **change)) is not None, change
        with_markers = replace(deployed, reduce_idempotency=TOKEN_AND_MARKERS)
        renames_markers = set(change) & {"node_groups", "nodes_per_unit"}
        assert (change_refusal(with_markers, replace(with_markers, **change)) is None) == (not renames_markers)


CONTEXT_VALUES = {
    "reduceBatchSize": st.sampled_from(["auto", 10, 25, 100]),
    "reduceParallelizationFactor": st.sampled_from(["auto", 1, 2, 3]),
    "aggregateSlices": st.sampled_from(["auto", 1, 2, 8]),
}


@st.composite
def contexts(draw: st.DrawFn) -> dict[str, Any]:
    """A cdk.json: a declared rate and the transaction-shaping settings `auto` or set (often all `auto`)."""
    context: dict[str, Any] = {
        "targetMessagesPerSecond": draw(st.sampled_from([400, 2_000, 10_000, 20_000, 50_000])),
        "capacityCheck": "warn",
    }
    for key, values in CONTEXT_VALUES.items():
        if draw(st.booleans()):
            context[key] = draw(values)
    return context


planner_defaults = st.builds(
    ServiceTimes,
    reduce_cpu_us_per_action=st.sampled_from([40.0, 80.0, 160.0]),
    transaction_round_trip_ms=st.sampled_from([10.0, 25.0, 60.0]),
    write_round_trip_ms=st.sampled_from([10.0, 20.0]),
)
"""A release's planner defaults: the ones of this release or of another, faster or slower."""


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(
    deployed=contexts(),
    new=contexts(),
    times=st.tuples(planner_defaults, planner_defaults),
    mode=st.sampled_from([TOKEN_ONLY, TOKEN_ONLY, TOKEN_AND_MARKERS]),
    records=st.integers(min_value=1, max_value=40).map(lambda count: delta_records(count, nodes=150)),
)
def test_every_change_the_guard_accepts_in_crt_forms_the_same_transactions_from_the_same_records(
    deployed: dict[str, Any],
    new: dict[str, Any],
    times: tuple[ServiceTimes, ServiceTimes],
    mode: str,
    records: list[dict[str, Any]],
) -> None:
    before = resolved(deployed | {"reduceIdempotency": mode}, times[0])
    after = resolved(new | {"reduceIdempotency": TOKEN_ONLY}, times[1])
    refusal = change_refusal(before.state_settings, after.state_settings)
    event("refused" if refusal is not None else "accepted")
    if refusal is not None:
        return
    assert mode == TOKEN_ONLY, "a change of mode is refused"
    assert shape(after) == shape(before)
    assert transactions(records, after) == transactions(records, before)


def test_a_guard_without_the_batch_shape_in_crt_is_refused_unless_declared_drained() -> None:
    """A release before this one carried neither the batch size nor the lanes: in `crt` nothing
    says how its batches in flight were formed (issue 32's stack is one), so only a drained
    pipeline may take the new settings."""
    new = resolved({"reduceIdempotency": TOKEN_ONLY}, ServiceTimes()).state_settings
    properties = {
        name: value
        for name, value in new.properties().items()
        if name not in ("ReduceBatchSize", "ReduceParallelizationFactor")
    }
    deployed = StateSettings.from_properties(properties)
    refusal = change_refusal(deployed, new)
    assert refusal is not None and "drain" in refusal and "-c upgradeDrained=true" in refusal
    assert change_refusal(deployed, new, drained=True) is None
    with_markers = replace(new, reduce_idempotency=TOKEN_AND_MARKERS)
    assert change_refusal(replace(deployed, reduce_idempotency=TOKEN_AND_MARKERS), with_markers) is None
