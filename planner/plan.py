"""The shapes a plan is made of: the lines, flags and figures every stage fills in, and what sets a design apart."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.inputs import ServiceTimes, Settings, Workload
from planner.prices import PriceTable

STAGE_BUSY_TARGET = 0.7
"""The most of its capacity a stage may use in a plan within the targets
(`planner.scale_out`): the margin for load that is uneven over seconds and lanes."""


@dataclass(frozen=True)
class Component:
    """One line of the plan: load, executions and monthly cost of a part of the pipeline."""

    name: str
    detail: str
    monthly_usd: float


@dataclass(frozen=True)
class Flag:
    """Something the settings do not carry, and the setting to change.

    `blocking` flags mean a stage cannot keep up (its backlog grows until stream records
    expire, or a write fails for ever); the others need an account-side action, such as a
    quota increase, rather than another setting.
    """

    problem: str
    change: str
    blocking: bool = True
    side_stage: bool = False  # about the archive, which no total waits for


@dataclass(frozen=True)
class ReducePacking:
    """How a design's reduce commits delta batches, and what its packing cannot do."""

    transactions_per_delta_batch: float
    actions_per_transaction: float
    flags: tuple[Flag, ...] = ()


@dataclass(frozen=True)
class Design:
    """What sets a design apart: `plan_design` plans ours and the original from this alone.

    Plain values where the designs differ in how much, functions where they differ in how
    (`OURS` and `ORIGINAL` below).
    """

    name: str
    state_rate: Callable[[ServiceTimes, Settings], float]
    """Messages a second one state instance applies."""
    selects_in_batch: bool
    """True: writes only what the in-batch selection keeps (`Workload.state_writes_per_message`);
    False: one conditional write per message, duplicates included."""
    timestamps_in_delta_items: bool
    """Each delta item carries its messages' producer timestamps (for the latency metric)."""
    reduce_packing: Callable[[Workload, float, float, Settings], ReducePacking]
    """Transactions per delta batch of `changes` state changes when an invocation plans
    `batches_together` delta batches together, and actions per transaction."""
    scales_out_reduce: bool
    """True: one reducer per DeltaTable stream shard and parallelization lane, over sliced totals
    (`reduce_slicing`); False: one reducer and one item per node."""
    coverage_query_items: int
    """DeltaTable items map reads (one strongly consistent Query) before writing a batch; 0: none."""
    splits_delta_items: bool
    """A batch whose delta item would exceed DynamoDB's item limit is written as several items;
    otherwise the put is refused on every retry (flagged)."""
    archives: bool
    """Every delta item is also kept as an S3 object (`planner.archive`)."""


@dataclass(frozen=True)
class PlanInputs:
    """What one design's plan is made from: every stage's model reads these."""

    workload: Workload
    settings: Settings
    times: ServiceTimes
    prices: PriceTable
    design: Design


@dataclass(frozen=True)
class StageTiming:
    """One stage's batches and timing in steady state: what the latency model adds up.

    A record waits for its lane's next invocation (half the `interval_seconds` between
    invocations, on average: its iterator age when read), then for that invocation to finish
    (`invocation_seconds`): a batch is committed whole. `busy` is the share of what the
    stage's lanes can carry that the rate uses, with full batches.
    """

    stage: str
    lanes: int
    batch: float  # records (delta batches for reduce) an invocation takes
    interval_seconds: float  # between two invocations of one lane
    invocation_seconds: float
    busy: float
    on_latency_path: bool = True  # False: a side consumer (the archive) no total waits for

    @property
    def iterator_age_seconds(self) -> float:
        """How long a record waits, on average, before an invocation reads it."""
        return self.interval_seconds / 2

    @property
    def seconds(self) -> float:
        """From a record's arrival on the stage's stream to its invocation's commit, on average."""
        return self.iterator_age_seconds + self.invocation_seconds


@dataclass
class DesignPlan:
    design: str
    kinesis_shards: int = 0
    state_executions: float = 0.0
    state_parallelization_needed: int = 1
    map_executions: float = 0.0
    effective_map_batch: float = 0.0
    delta_batches_per_second: float = 0.0
    reduce_transactions_per_second: float = 0.0  # committed
    reduce_conflicts_per_second: float = 0.0  # cancelled by a concurrent reducer and resent
    state_stream_shards: int = 1
    delta_stream_shards: int = 1
    reduce_lanes: int = 1  # concurrent reducers: DeltaTable stream shards x reduceParallelizationFactor
    slices_per_invocation: float = 1.0  # slices an invocation's transactions write (`planner.reduce.ReduceSlicing`)
    slices_in_use: float = 1.0  # slices the transactions write, over every reducer
    reduce_executions: float = 0.0  # reducers busy at once, on average
    reduce_busy_fraction: float = 0.0  # of each reducer, with full batches of reduceBatchSize
    effective_reduce_batch: float = 0.0  # delta batches an invocation takes in steady state
    actions_per_transaction: float = 0.0
    state_write_units_per_second: float = 0.0
    delta_write_units_per_second: float = 0.0
    delta_items_per_batch: int = 1
    delta_item_bytes: float = 0.0
    delta_read_units_per_second: float = 0.0
    aggregate_write_units_per_second: float = 0.0
    hottest_item_write_units_per_second: float = 0.0
    components: list[Component] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    timings: list[StageTiming] = field(default_factory=list)  # state, map, reduce, archive
    archive_items_per_second: float = 0.0  # delta items archived
    archive_objects_per_second: float = 0.0  # batch objects written: one per archive invocation
    archive_puts_per_second: float = 0.0  # the batch objects' PUTs and their receipts'
    archive_puts_per_message: float = 0.0
    archive_lane_busy: float = 0.0  # each archive lane, with full batches
    archive_gb_per_month: float = 0.0  # new batch objects and receipts
    archive_storage_after_year_usd: float = 0.0  # the storage bill after a year at this rate

    @property
    def latency_p50_seconds(self) -> float:
        """A message's time from the producer's put to its reduce commit, at the median.

        Each stage's wait is spread evenly over its interval, so the sum of the stages' means
        is the median as well. Left out: the put itself and how long a record takes to become
        readable on a stream (AWS publishes neither; both are well under a poll interval).
        Infinite when a stage cannot keep up: its backlog, and so every message's wait, grows.
        """
        on_path = [timing for timing in self.timings if timing.on_latency_path]
        if any(timing.busy > 1 for timing in on_path):
            return math.inf
        return sum(timing.seconds for timing in on_path)

    @property
    def busiest_stage(self) -> StageTiming:
        return max(self.timings, key=lambda timing: timing.busy)

    @property
    def monthly_usd(self) -> float:
        return sum(component.monthly_usd for component in self.components)

    @property
    def stalls(self) -> list[Flag]:
        """The flags that mean this design cannot keep up with these settings."""
        return [flag for flag in self.flags if flag.blocking]

    def write_units_per_second(self, table: str) -> float:
        """The write units per second one of `PIPELINE_TABLES` takes."""
        by_table = {
            "StateTable": self.state_write_units_per_second,
            "DeltaTable": self.delta_write_units_per_second,
            "AggregateTable": self.aggregate_write_units_per_second,
        }
        return by_table[table]

    def read_units_per_second(self, table: str) -> float:
        """The read units per second one of `PIPELINE_TABLES` takes (only `READ_TABLES` are read)."""
        return self.delta_read_units_per_second if table == "DeltaTable" else 0.0
