"""Benchmark 1: DynamoDB requests and write units per ingested message, per stage, counted.

The standard workload (producer generator: 10 % duplicates, 5 % out-of-order, 20 %
modifications, no malformed records) goes through the real handlers against the
emulator's real tables and streams: state in Kinesis batches of 100, map in stream
batches of 100, reduce in batches of 10 delta records, the last once per idempotency
mode (`crt+marker`, `crt`) on the same delta records into two aggregate tables, and once more in
`crt+marker` in the invocations and over the slices `auto` chooses at 1,000,000 msg/s (issue 37:
the planner's model of that rate counts the same writes). Every
write request the handlers send is counted by `WriteCallCounter`; both aggregate
tables are then checked exactly against the generator's ground truth, so a figure
never comes from a run that computed the wrong totals.

The original design is computed for the same messages and the same batches: one
conditional write per message (duplicates and stale versions included), one put per
map batch (the same node deltas, without our ProducerTimestamps / RecordCount /
CreatedAt / ExpiresAt), one transaction per reduce batch over the union of its nodes,
without markers and without `#stats`.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from aggregation.delta_items import CREATED_AT, PRODUCER_TIMESTAMPS, RECORD_COUNT, decode_delta_batch
from aggregation.item_size import item_size_bytes
from aggregation.names import EXPIRES_AT, TOKEN_AND_MARKERS, TOKEN_ONLY
from benchmarks.archive_cost import ArchiveRun, run_archive_cost
from benchmarks.capacity import pipeline_settings
from benchmarks.harness import (
    all_stream_records,
    chunks,
    create_pipeline_tables,
    environment,
    handler_environment,
    median,
    pipeline_for,
    quiet_handlers,
)
from benchmarks.write_units import (
    MAX_TRANSACTION_ACTIONS_ORIGINAL,
    StageWriteCost,
    WriteCallCounter,
    write_units,
)
from function_support import aws
from local.emulator.control import advance_clock
from local.runner.inprocess import Pipeline, expected_totals
from producer.generator import GeneratorConfig, MessageGenerator

MODES = (TOKEN_AND_MARKERS, TOKEN_ONLY)
TOKEN_WINDOW_SECONDS = 600
STATE_BATCH_SIZE = 100
MAP_BATCH_SIZE = 100
REDUCE_BATCH_SIZE = 10
LARGE_MAP_BATCH_SIZE = 1000
LARGE_MAP_LABEL = f"{TOKEN_AND_MARKERS}, map batch {LARGE_MAP_BATCH_SIZE}"
AUTO_RATE = 1_000_000
"""The declared rate whose `auto` reduce shape (slices, batch size) the run also reduces in (issue 37)."""
OUR_DELTA_ONLY_ATTRIBUTES = (PRODUCER_TIMESTAMPS, RECORD_COUNT, CREATED_AT, EXPIRES_AT)

Progress = Callable[[str, float], None]


def standard_workload(count: int, seed: int = 7) -> GeneratorConfig:
    return GeneratorConfig(
        seed=seed, count=count, duplicates_pct=10.0, out_of_order_pct=5.0, modifications_pct=20.0, malformed_pct=0.0
    )


@dataclass(frozen=True)
class ReduceShape:
    """How `auto` reduces at a declared rate: `aggregateSlices` and `reduceBatchSize`."""

    rate: int
    slices: int
    batch_size: int

    @property
    def label(self) -> str:
        return f"{TOKEN_AND_MARKERS}, {self.slices} slices, batches of {self.batch_size}"


@functools.cache
def auto_reduce_shape(rate: int = AUTO_RATE) -> ReduceShape:
    """`aggregateSlices` and `reduceBatchSize` as `cdk synth` resolves cdk.json for a stack declaring `rate`."""
    settings = pipeline_settings({"targetMessagesPerSecond": rate})
    return ReduceShape(rate, settings.aggregate_slices, settings.reduce_batch_size)


@dataclass
class WorkloadEvents:
    """The handler inputs of the run, kept for the CPU-overhead benchmark."""

    state_batches: list[list[bytes]] = field(default_factory=list)
    map_batches: list[list[dict[str, Any]]] = field(default_factory=list)
    reduce_batches: list[list[dict[str, Any]]] = field(default_factory=list)
    large_reduce_batches: list[list[dict[str, Any]]] = field(default_factory=list)  # map batches of 1,000
    shard_of_event: dict[str, str] = field(default_factory=dict)  # StateTable record eventID -> shard id


@dataclass
class WriteCostResult:
    messages: int
    mean_record_bytes: float
    state_changes: int
    delta_batches: int
    reduce_invocations: int
    stages: dict[str, StageWriteCost]  # "state", "map", "reduce (crt+marker)", "reduce (crt)"
    original: dict[str, StageWriteCost]  # "state", "map", "reduce"
    original_large: dict[str, StageWriteCost]  # the same with map batches of LARGE_MAP_BATCH_SIZE
    exact: dict[str, bool]
    transaction_ms_median: float
    delta_item_bytes_median: float
    original_oversized_transactions: int
    events: WorkloadEvents
    archive: list[ArchiveRun] = field(default_factory=list)  # the archive's PUTs, per invocation size
    auto_shape: ReduceShape | None = None
    """The `auto` reduce shape at `AUTO_RATE` the same delta records were also reduced in (`crt+marker`):
    its stage is `reduce (<label>)`, its exactness `exact[<label>]`."""
    auto_invocations: tuple[int, ...] = ()  # delta records per reduce invocation in that shape

    def per_message(self, cost: StageWriteCost) -> tuple[float, float]:
        return cost.requests / self.messages, cost.write_units / self.messages

    def totals(self, mode: str | None, *, large_map_batches: bool = False) -> StageWriteCost:
        """Our total for one mode (or LARGE_MAP_LABEL), or the original's (mode None)."""
        map_stage = f"map ({mode})" if mode == LARGE_MAP_LABEL else "map"
        original = self.original_large if large_map_batches else self.original
        parts = (
            [original["state"], original["map"], original["reduce"]]
            if mode is None
            else [self.stages["state"], self.stages[map_stage], self.stages[f"reduce ({mode})"]]
        )
        return StageWriteCost(
            requests=sum(p.requests for p in parts),
            items=sum(p.items for p in parts),
            write_units=sum(p.write_units for p in parts),
        )


def _original_design(
    messages: int, counter: WriteCallCounter, map_stage: str, reduce_batches: Sequence[Sequence[dict[str, Any]]]
) -> tuple[dict[str, StageWriteCost], int]:
    state_calls = [c for c in counter.calls if c.stage == "state" and c.operation == "BatchExecuteStatement"]
    units_per_state_write = sum(c.write_units for c in state_calls) / max(1, sum(c.items for c in state_calls))
    state = StageWriteCost(requests=messages, items=messages, write_units=round(messages * units_per_state_write))
    map_cost = StageWriteCost()
    for call in counter.calls:
        if call.stage == map_stage and call.operation == "PutItem":
            item = {k: v for k, v in call.params["Item"].items() if k not in OUR_DELTA_ONLY_ATTRIBUTES}
            map_cost.requests += 1
            map_cost.items += 1
            map_cost.write_units += write_units(item_size_bytes(item))
    reduce_cost = StageWriteCost()
    oversized = 0
    for batch in reduce_batches:
        nodes: set[str] = set()
        for record in batch:
            nodes.update(decode_delta_batch(record["dynamodb"]["NewImage"]).deltas)
        transactions = max(1, math.ceil(len(nodes) / MAX_TRANSACTION_ACTIONS_ORIGINAL))
        oversized += transactions > 1
        reduce_cost.requests += transactions
        reduce_cost.items += len(nodes)
        reduce_cost.write_units += 2 * len(nodes)  # aggregate items are far below 1 KB
    return {"state": state, "map": map_cost, "reduce": reduce_cost}, oversized


def _ground_truth(generator: MessageGenerator) -> dict[str, tuple[Decimal, int]]:
    return expected_totals({tid: (s.value, s.hierarchy) for tid, s in generator.trades.items()})


def _exact(pipeline_aggregates: dict[str, tuple[Decimal, int]], generator: MessageGenerator) -> bool:
    actual = {k: v for k, v in pipeline_aggregates.items() if v != (Decimal(0), 0)}
    return actual == _ground_truth(generator)


def _reduce_in_the_auto_shape(
    pipeline: Pipeline,
    names: dict[str, str],
    records: Sequence[dict[str, Any]],
    counter: WriteCallCounter,
    progress: Progress,
) -> tuple[ReduceShape, list[list[dict[str, Any]]]]:
    """The delta records reduced again (`crt+marker`) into a table of their own, in the invocations and
    over the slices `auto` chooses at `AUTO_RATE`: what the planner's model of that rate counts."""
    shape = auto_reduce_shape()
    advance_clock(os.environ["AWS_ENDPOINT_URL"], TOKEN_WINDOW_SECONDS + 60)
    batches = chunks(records, shape.batch_size)
    settings = {
        "AGGREGATE_TABLE": names["aggregate-auto"],
        "REDUCE_IDEMPOTENCY": TOKEN_AND_MARKERS,
        "AGGREGATE_SLICES": str(shape.slices),
    }
    with environment(settings), counter.labelled(f"reduce ({shape.label})"):
        for index, batch in enumerate(batches, start=1):
            pipeline.run_reduce(batch)
            progress(f"reduce ({shape.label})", index / len(batches))
    return shape, batches


def _larger_map_batches(
    source: Pipeline, state_changes: list[dict[str, Any]], counter: WriteCallCounter, progress: Progress
) -> tuple[Pipeline, list[list[dict[str, Any]]]]:
    """The same state changes mapped in batches of LARGE_MAP_BATCH_SIZE, reduced (crt+marker) afresh."""
    names = source.names
    tables = {**names, "delta": names["delta-large"], "aggregate": names["aggregate-large"]}
    pipeline = Pipeline(tables)
    pipeline.shard_of_event.update(source.shard_of_event)  # the same StateTable stream records
    settings = {
        "DELTA_TABLE": tables["delta"],
        "AGGREGATE_TABLE": tables["aggregate"],
        "REDUCE_IDEMPOTENCY": TOKEN_AND_MARKERS,
    }
    with environment(settings):
        with counter.labelled(f"map ({LARGE_MAP_LABEL})"):
            for batch in chunks(state_changes, LARGE_MAP_BATCH_SIZE):
                pipeline.run_map(batch)
        with counter.labelled(f"reduce ({LARGE_MAP_LABEL})"):
            batches = chunks(all_stream_records(pipeline, "delta"), REDUCE_BATCH_SIZE)
            for index, batch in enumerate(batches, start=1):
                pipeline.run_reduce(batch)
                progress(f"reduce ({LARGE_MAP_LABEL})", index / len(batches))
    return pipeline, batches


def run_write_cost(message_count: int, progress: Progress) -> WriteCostResult:
    """Needs the emulator running and AWS_ENDPOINT_URL pointing at it (harness.running_emulator)."""
    names = create_pipeline_tables(
        aggregate_tables=(*(f"aggregate-{mode}" for mode in MODES), "aggregate-large", "aggregate-auto"),
        extra_delta_tables=("delta-large",),
    )
    generator = MessageGenerator(standard_workload(message_count))
    payloads = [message.data for message in generator]
    events = WorkloadEvents(state_batches=chunks(payloads, STATE_BATCH_SIZE))
    counter = WriteCallCounter()
    exact: dict[str, bool] = {}
    with environment(handler_environment(names, f"aggregate-{MODES[0]}")), quiet_handlers():
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
        aws.prevalidated_write_client.cache_clear()
        counter.attach(aws.dynamodb_client())
        counter.attach(aws.state_update_client())
        counter.attach(aws.prevalidated_write_client())
        pipeline = pipeline_for(names, f"aggregate-{MODES[0]}")
        with counter.labelled("state"):
            for index, batch in enumerate(events.state_batches, start=1):
                pipeline.run_state(batch)
                progress("state", index / len(events.state_batches))
        state_changes = all_stream_records(pipeline, "state")
        events.shard_of_event = dict(pipeline.shard_of_event)
        events.map_batches = chunks(state_changes, MAP_BATCH_SIZE)
        with counter.labelled("map"):
            for index, records in enumerate(events.map_batches, start=1):
                pipeline.run_map(records)
                progress("map", index / len(events.map_batches))
        events.reduce_batches = chunks(all_stream_records(pipeline, "delta"), REDUCE_BATCH_SIZE)
        delta_records = [record for batch in events.reduce_batches for record in batch]
        archive = run_archive_cost(delta_records, _ground_truth(generator), progress)
        for mode in MODES:
            role = f"aggregate-{mode}"
            # Tokens are per account and region, not per table: without this, the second
            # mode's transactions that pack the same units as the first's would be taken
            # for replays of them (DynamoDB would do the same within 10 minutes).
            advance_clock(os.environ["AWS_ENDPOINT_URL"], TOKEN_WINDOW_SECONDS + 60)
            with (
                environment({"AGGREGATE_TABLE": names[role], "REDUCE_IDEMPOTENCY": mode}),
                counter.labelled(f"reduce ({mode})"),
            ):
                for index, records in enumerate(events.reduce_batches, start=1):
                    pipeline.run_reduce(records)
                    progress(f"reduce ({mode})", index / len(events.reduce_batches))
            exact[mode] = _exact(pipeline_for(names, role).aggregates(), generator)
        shape, auto_batches = _reduce_in_the_auto_shape(pipeline, names, delta_records, counter, progress)
        exact[shape.label] = _exact(pipeline_for(names, "aggregate-auto").aggregates(), generator)
        large, events.large_reduce_batches = _larger_map_batches(pipeline, state_changes, counter, progress)
        exact[LARGE_MAP_LABEL] = _exact(large.aggregates(), generator)
        counter.detach(aws.dynamodb_client())
        counter.detach(aws.state_update_client())
        counter.detach(aws.prevalidated_write_client())
    original, oversized = _original_design(len(payloads), counter, "map", events.reduce_batches)
    original_large, _ = _original_design(
        len(payloads), counter, f"map ({LARGE_MAP_LABEL})", events.large_reduce_batches
    )
    transactions = [c.seconds * 1000 for c in counter.calls if c.operation == "TransactWriteItems"]
    delta_sizes = [item_size_bytes(c.params["Item"]) for c in counter.calls if c.stage == "map"]
    return WriteCostResult(
        messages=len(payloads),
        mean_record_bytes=sum(map(len, payloads)) / len(payloads),
        state_changes=len(state_changes),
        delta_batches=len(delta_sizes),
        reduce_invocations=len(events.reduce_batches),
        stages=counter.by_stage(),
        original=original,
        original_large=original_large,
        exact=exact,
        transaction_ms_median=median(transactions),
        delta_item_bytes_median=median(delta_sizes),
        original_oversized_transactions=oversized,
        events=events,
        archive=archive,
        auto_shape=shape,
        auto_invocations=tuple(len(batch) for batch in auto_batches),
    )
