"""The capacity model: what a target message rate needs, what it costs, and what cannot keep up.

Pure (the standard library and the pure domain package `aggregation`, whose limits it
reads rather than restates) so that two very different callers share one model: the CDK
app, which refuses at synthesis settings that cannot carry the declared
`targetMessagesPerSecond` (`stacks/capacity.py`), and the planner's command line and
`make bench` (`python -m benchmarks.capacity`), which print the plan.

For our design and, alongside, the original design (one conditional write per message
including duplicates, ~100 messages/s per state instance, one put per map batch, one
transaction per reduce batch without markers or `#stats`), each described as data by a
`Design`, it derives from the workload and the settings:

- Kinesis: shards by the per-shard write limits (1,000 records/s, 1 MiB/s), on-demand cost;
- concurrent state, map and reduce executions by Little's law (arrival rate x time per
  invocation), from per-invocation rates that are parameters (`make bench` passes the
  ones it measured; the defaults are stated in `ServiceTimes`);
- DynamoDB write units per second per table and on the hottest item, transactions per
  second, the read units of map's coverage Query (a strongly consistent Query of the
  shard's newest delta items before every write), and monthly cost per component from the
  dated price table, each table in its capacity mode (on-demand, or provisioned with auto
  scaling; `capacity_modes` prices both);
- reduce scale-out (ours): one reducer per DeltaTable stream shard times
  `reduceParallelizationFactor`, each delta item adding to the slice of its StateTable stream
  shard (`aggregateSlices`): an invocation plans each slice its items fall in apart, so more
  slices spread the hottest items (`#stats` and the roots, one write per transaction of their
  slice) over more items but pack fewer delta batches per transaction (`reduce_slicing`);
- flags: a table over its default quota or its provisioned maximum, a shard whose state
  function cannot keep up (raise the parallelization factor), a reducer busier than it can be
  at the transaction latency, an item over DynamoDB's 1,000 WCU/s per-partition limit, the
  original's reduce transaction over 100 actions and its delta item over the 400 KB item
  limit (ours splits such a batch into several items, billed by bytes alike). Each flag names
  the `cdk.json` setting to change.

Why a model and not a load test: the pipeline cannot be run at 50,000 messages/s on a
laptop. The model's per-message write counts are checked against the write-cost
benchmark, which counts real calls on the same workload (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from aggregation.aggregate_items import MAX_SLICES
from aggregation.item_size import MAX_ITEM_BYTES
from aggregation.stream_positions import COVERAGE_QUERY_PAGE_ITEMS
from aggregation.transactions import MARKER_ACTIONS_PER_UNIT, MAX_TRANSACTION_ACTIONS, NODE_GROUPS, STATS_ACTIONS
from planner.prices import SECONDS_PER_HOUR, PriceTable, load_price_table

PER_ITEM_WRITE_UNITS_PER_SECOND = 1000  # DynamoDB's per-partition write throughput
TABLE_WRITE_QUOTA_PER_SECOND = 40_000  # default on-demand per-table write request unit quota (adjustable)
TABLE_READ_QUOTA_PER_SECOND = 40_000  # default on-demand per-table read request unit quota (adjustable)
SHARD_RECORDS_PER_SECOND = 1000
SHARD_BYTES_PER_SECOND = 1024 * 1024
MAX_PARALLELIZATION_FACTOR = 10
STREAM_POLLS_PER_SECOND = 4  # Lambda polls a DynamoDB stream shard about four times a second
GIGABYTE = 1024**3
KILOBYTE = 1024
READ_UNIT_BYTES = 4 * KILOBYTE  # a strongly consistent read unit: up to 4 KB (a Query: the items read, summed)
# Sizes of a DeltaTable item's parts (bytes, DynamoDB's item size rules), fitted to the items
# the write-cost benchmark records: fixed attributes, one Deltas map entry, one producer timestamp.
DELTA_ITEM_FIXED_BYTES = 170
DELTA_NODE_BYTES = 43
DELTA_TIMESTAMP_BYTES = 10
STATE_ITEM_OVERHEAD_BYTES = 110  # ContentDigest, attribute names, the Hierarchy map's overhead
LAMBDA_MB_PER_VCPU = 1769  # Lambda gives one full vCPU at 1,769 MB, proportionally less below
BUSY_LIMIT = 0.8  # a reducer busier than this falls behind on any burst
MAP_BATCH_CANDIDATES = (100, 200, 500, 1000, 2000, 5000, 10000)
REDUCE_MEMORY_CANDIDATES = (512, 1024, 1769)  # MB; 1,769 MB is one full vCPU
MAP_BATCHING_WINDOWS = (1, 2, 5, 10, 20, 30, 60, 120, 300)  # mapBatchingWindowSeconds candidates
PIPELINE_TABLES = ("StateTable", "DeltaTable", "AggregateTable")
"""The tables whose capacity mode is a setting (the quarantine is always on-demand: it is
written only for bad input, a load no one can plan)."""
READ_TABLES = ("DeltaTable",)
"""The tables the pipeline reads on its steady path: the map's coverage Query. (Stream
reads by Lambda are not billed; reduce reads markers only to resolve a refused token.)"""

CapacityMode = Literal["on-demand", "provisioned"]
TABLE_SETTINGS = {
    "StateTable": "stateTableCapacity",
    "DeltaTable": "deltaTableCapacity",
    "AggregateTable": "aggregateTableCapacity",
}
"""Each pipeline table and the cdk.json setting of its capacity mode."""


@dataclass(frozen=True)
class Workload:
    """The messages: rate, size and mix (percentages of messages)."""

    rate: float
    record_bytes: int = 300
    duplicates_pct: float = 10.0
    out_of_order_pct: float = 5.0  # messages that arrive after a newer version: stale, ignored
    modifications_pct: float = 20.0
    move_share: float = 0.3  # of modifications, those that move the trade to another node
    fan_out: tuple[int, ...] = (5, 5, 3)  # values per hierarchy level, root first
    # Ours only: conditional writes per message after dropping in-batch duplicates and
    # superseded versions (the write-cost benchmark measures it; 1.0 assumes no saving).
    state_writes_per_message: float = 1.0

    @property
    def applied_share(self) -> float:
        """State changes per message: everything but duplicates and stale versions."""
        return max(0.0, 1.0 - (self.duplicates_pct + self.out_of_order_pct) / 100.0)

    @property
    def paths_per_change(self) -> float:
        """Hierarchy paths one state change touches: a move touches the old and the new one."""
        if self.applied_share == 0:
            return 1.0
        return 1.0 + (self.modifications_pct / 100.0) / self.applied_share * self.move_share

    @property
    def nodes_per_level(self) -> tuple[int, ...]:
        return tuple(math.prod(self.fan_out[: depth + 1]) for depth in range(len(self.fan_out)))


@dataclass(frozen=True)
class TableCapacity:
    """One table's capacity mode (`stateTableCapacity`, `deltaTableCapacity`, `aggregateTableCapacity`).

    On-demand bills every write request. Provisioned bills capacity by the hour, which
    Application Auto Scaling keeps near `target_utilization_percent` of what is consumed,
    between the minimum and the maximum (the table starts at the minimum). The provisioned
    figures are kept for an on-demand table too: the planner prices the alternative with them.
    """

    mode: CapacityMode = "on-demand"
    min_write_capacity: int = 5
    max_write_capacity: int = 40_000
    min_read_capacity: int = 1
    max_read_capacity: int = 1000
    target_utilization_percent: int = 70

    @property
    def provisioned(self) -> bool:
        return self.mode == "provisioned"


@dataclass(frozen=True)
class Settings:
    """The deployment's settings (cdk.json context names in the comments).

    The defaults are cdk.json's (a test keeps them equal to what `stacks.capacity`
    reads from it); state and map memory are the stack's fixed function sizes.
    """

    state_batch_size: int = 100  # stateBatchSize
    state_parallelization_factor: int = 1  # stateParallelizationFactor
    map_batch_size: int = 100  # mapBatchSize
    map_batching_window_seconds: float = 0.0  # mapBatchingWindowSeconds
    reduce_batch_size: int = 10  # reduceBatchSize
    markers: bool = True  # reduceIdempotency crt+marker (True) or crt
    state_memory_mb: int = 512
    map_memory_mb: int = 256
    reduce_memory_mb: int = 256  # reduceMemoryMb
    aggregate_slices: int = 16  # aggregateSlices
    reduce_parallelization_factor: int = 1  # reduceParallelizationFactor
    state_table: TableCapacity = TableCapacity()  # stateTableCapacity
    delta_table: TableCapacity = TableCapacity()  # deltaTableCapacity
    aggregate_table: TableCapacity = TableCapacity()  # aggregateTableCapacity

    def table_capacity(self, table: str) -> TableCapacity:
        """The capacity of one of `PIPELINE_TABLES`."""
        by_table = {
            "StateTable": self.state_table,
            "DeltaTable": self.delta_table,
            "AggregateTable": self.aggregate_table,
        }
        return by_table[table]


@dataclass(frozen=True)
class ServiceTimes:
    """Per-invocation speeds the plan rests on. `make bench` passes measured values.

    CPU figures are per full vCPU; the plan slows them down by each function's memory
    (`cpu_slowdown`). Defaults: ours from the state-throughput benchmark at a 20 ms round
    trip (conservative for DynamoDB in-region); the original's 100 messages/s per instance is what its
    authors measured; a 20 ms single write and 25 ms transaction round trip; handler CPU
    from the overhead benchmark (the reduce's split into a per-transaction and a
    per-message part by fitting invocations of small and large delta batches). The
    original's reduce is given the same CPU figures.
    """

    state_messages_per_second: float = 700.0  # on one full core
    state_cpu_us_per_message: float = 250.0  # of which CPU, on one full core (slower in a 512 MB function)
    original_state_messages_per_second: float = 100.0
    write_round_trip_ms: float = 20.0
    transaction_round_trip_ms: float = 25.0
    map_cpu_us_per_record: float = 60.0
    reduce_cpu_us_per_action: float = 50.0  # building and serialising one transaction action
    reduce_cpu_us_per_message: float = 1.0  # a delta item's ProducerTimestamps, parsed and summed


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


@dataclass(frozen=True)
class TableModes:
    """One table's writes and reads priced in both capacity modes (`capacity_modes`)."""

    table: str
    write_units_per_second: float
    read_units_per_second: float
    on_demand_usd: float
    provisioned_write_capacity: float  # what auto scaling holds at the target utilisation
    provisioned_read_capacity: float
    provisioned_usd: float
    target_utilization_percent: int

    @property
    def cheaper(self) -> CapacityMode:
        return "provisioned" if self.provisioned_usd < self.on_demand_usd else "on-demand"


@dataclass
class DesignPlan:
    design: str
    kinesis_shards: int = 0
    state_executions: float = 0.0
    state_parallelization_needed: int = 1
    map_executions: float = 0.0
    effective_map_batch: float = 0.0
    delta_batches_per_second: float = 0.0
    reduce_transactions_per_second: float = 0.0
    state_stream_shards: int = 1
    delta_stream_shards: int = 1
    reduce_lanes: int = 1  # concurrent reducers: DeltaTable stream shards x reduceParallelizationFactor
    slices_per_invocation: float = 1.0  # slices an invocation's delta batches fall in
    slices_in_use: float = 1.0  # slices the StateTable stream shards hash to
    reduce_executions: float = 0.0  # reducers busy at once, on average
    reduce_busy_fraction: float = 0.0  # of each reducer
    actions_per_transaction: float = 0.0
    state_write_units_per_second: float = 0.0
    delta_write_units_per_second: float = 0.0
    delta_items_per_batch: int = 1
    delta_read_units_per_second: float = 0.0
    aggregate_write_units_per_second: float = 0.0
    hottest_item_write_units_per_second: float = 0.0
    components: list[Component] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)

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


@dataclass(frozen=True)
class CapacityPlan:
    workload: Workload
    settings: Settings
    times: ServiceTimes
    prices: PriceTable
    ours: DesignPlan
    original: DesignPlan
    modes: list[TableModes]  # ours, each table priced in both capacity modes


def cpu_slowdown(memory_mb: int) -> float:
    """How much slower CPU work runs in a function of `memory_mb` than on one full vCPU.

    Lambda allocates CPU in proportion to memory, one vCPU at 1,769 MB; the handler CPU
    figures are measured on one full core.
    """
    return max(1.0, LAMBDA_MB_PER_VCPU / memory_mb)


def lambda_state_rate(times: ServiceTimes, settings: Settings) -> float:
    """Our state instance's messages/s in Lambda: the measured rate, its CPU part slowed down by memory."""
    batch = settings.state_batch_size
    measured_seconds = batch / times.state_messages_per_second
    extra_cpu = batch * times.state_cpu_us_per_message / 1e6 * (cpu_slowdown(settings.state_memory_mb) - 1.0)
    return batch / (measured_seconds + extra_cpu)


def distinct_nodes(workload: Workload, changes: float) -> float:
    """Expected aggregate nodes touched by `changes` state changes, hierarchy values uniform."""
    touches = changes * workload.paths_per_change
    return float(sum(nodes * (1.0 - (1.0 - 1.0 / nodes) ** touches) for nodes in workload.nodes_per_level))


def expected_distinct(bins: float, draws: float) -> float:
    """Expected distinct bins `draws` uniform draws hit (at least 1: there is always one draw)."""
    if bins <= 1 or draws <= 1:
        return 1.0
    missed: float = (1.0 - 1.0 / bins) ** draws
    return max(1.0, bins * (1.0 - missed))


@dataclass(frozen=True)
class ReduceSlicing:
    """How our reducers and slices share the delta batches (`reduce_slicing`)."""

    delta_stream_shards: int
    lanes: int
    slices_per_invocation: float
    slices_in_use: float


def reduce_slicing(settings: Settings, state_stream_shards: int, delta_write_units_per_second: float) -> ReduceSlicing:
    """Reducers, and the slices an invocation's delta batches fall in, with hashes assumed even.

    The DeltaTable stream has about one shard per 1,000 WCU/s partition (as the StateTable's);
    Lambda runs `reduceParallelizationFactor` lanes per shard, a partition key (`StreamShard`)
    always in the same lane. A lane carries its share of the StateTable stream shards, whose
    items add to `slice_of(StreamShard, aggregateSlices)`; the `reduceBatchSize` delta batches
    of an invocation fall in as many slices as they hit, each planned apart. The hottest slice
    takes its share of the transactions over `slices_in_use`, the slices the StateTable shards
    hash to: an even spread, which is why the default slice count aims at half the item limit.
    """
    delta_shards = max(1, math.ceil(delta_write_units_per_second / PER_ITEM_WRITE_UNITS_PER_SECOND))
    lanes = delta_shards * settings.reduce_parallelization_factor
    slices = settings.aggregate_slices
    slices_per_lane = expected_distinct(slices, state_stream_shards / lanes)
    return ReduceSlicing(
        delta_stream_shards=delta_shards,
        lanes=lanes,
        slices_per_invocation=expected_distinct(slices_per_lane, settings.reduce_batch_size),
        slices_in_use=expected_distinct(slices, state_stream_shards),
    )


def delta_item_bytes(workload: Workload, changes: float, *, with_timestamps: bool) -> float:
    timestamps = changes * DELTA_TIMESTAMP_BYTES if with_timestamps else 0.0
    return DELTA_ITEM_FIXED_BYTES + distinct_nodes(workload, changes) * DELTA_NODE_BYTES + timestamps


def write_units_of(size_bytes: float) -> int:
    return max(1, math.ceil(size_bytes / KILOBYTE))


def kinesis_shards(workload: Workload) -> int:
    by_records = workload.rate / SHARD_RECORDS_PER_SECOND
    by_bytes = workload.rate * workload.record_bytes / SHARD_BYTES_PER_SECOND
    return max(1, math.ceil(max(by_records, by_bytes)))


def kinesis_monthly_usd(workload: Workload, prices: PriceTable) -> float:
    """On-demand: the stream-hour, data in at 1-KB-rounded records, one consumer reading it back."""
    increment = prices.kinesis_record_increment_bytes
    billed_bytes = math.ceil(workload.record_bytes / increment) * increment
    seconds = prices.seconds_per_month
    ingest = workload.rate * billed_bytes * seconds / GIGABYTE * prices.kinesis_ingest_per_gb
    retrieval = workload.rate * workload.record_bytes * seconds / GIGABYTE * prices.kinesis_retrieval_per_gb
    return prices.hours_per_month * prices.kinesis_stream_hour + ingest + retrieval


def lambda_monthly_usd(executions: float, memory_mb: int, invocations_per_second: float, prices: PriceTable) -> float:
    gb_seconds = executions * memory_mb / 1024 * prices.seconds_per_month
    requests = invocations_per_second * prices.seconds_per_month
    return gb_seconds * prices.lambda_gb_second + requests * prices.lambda_request


def writes_monthly_usd(write_units_per_second: float, prices: PriceTable) -> float:
    """On-demand: every write request unit billed."""
    return write_units_per_second * prices.seconds_per_month * prices.dynamodb_write_unit


def reads_monthly_usd(read_units_per_second: float, prices: PriceTable) -> float:
    """On-demand: every read request unit billed."""
    return read_units_per_second * prices.seconds_per_month * prices.dynamodb_read_unit


def held_capacity(units_per_second: float, minimum: int, capacity: TableCapacity) -> float:
    """The capacity auto scaling holds for a steady load: consumption / target, at least the minimum.

    Not capped at the maximum: a load beyond it is flagged as one the table cannot carry
    (`table_flags`), and the cost shown is what carrying it takes.
    """
    return max(float(minimum), units_per_second / (capacity.target_utilization_percent / 100))


def provisioned_write_capacity(write_units_per_second: float, capacity: TableCapacity) -> float:
    return held_capacity(write_units_per_second, capacity.min_write_capacity, capacity)


def provisioned_read_capacity(read_units_per_second: float, capacity: TableCapacity) -> float:
    return held_capacity(read_units_per_second, capacity.min_read_capacity, capacity)


def provisioned_monthly_usd(
    write_units_per_second: float, read_units_per_second: float, capacity: TableCapacity, prices: PriceTable
) -> float:
    """Provisioned: write and read capacity by the hour, as auto scaling holds them.

    Operator scans (verify, reconcile) are left out: they are occasional, not the load.
    """
    writes = provisioned_write_capacity(write_units_per_second, capacity) * prices.dynamodb_write_capacity_unit_hour
    reads = provisioned_read_capacity(read_units_per_second, capacity) * prices.dynamodb_read_capacity_unit_hour
    return (writes + reads) * prices.hours_per_month


def table_writes_monthly_usd(write_units_per_second: float, capacity: TableCapacity, prices: PriceTable) -> float:
    """A table's write cost in its configured mode; provisioned, with its minimum read capacity."""
    if capacity.provisioned:
        return provisioned_monthly_usd(write_units_per_second, 0.0, capacity, prices)
    return writes_monthly_usd(write_units_per_second, prices)


def table_reads_monthly_usd(read_units_per_second: float, capacity: TableCapacity, prices: PriceTable) -> float:
    """A table's read cost in its configured mode; provisioned, the read capacity above the
    minimum (which `table_writes_monthly_usd` counts), so that the two add up to the table."""
    if capacity.provisioned:
        above_minimum = provisioned_read_capacity(read_units_per_second, capacity) - capacity.min_read_capacity
        return above_minimum * prices.dynamodb_read_capacity_unit_hour * prices.hours_per_month
    return reads_monthly_usd(read_units_per_second, prices)


def break_even_utilization(prices: PriceTable) -> float:
    """The average utilisation (consumed / provisioned) above which provisioned writes cost less.

    One provisioned write capacity unit serves up to one write unit every second of the hour
    it is billed for; on-demand bills each write unit. They cost the same when the capacity
    is used this fraction of the time.
    """
    if prices.dynamodb_write_unit == 0:
        return math.inf  # free on-demand writes: provisioned never pays off
    return prices.dynamodb_write_capacity_unit_hour / SECONDS_PER_HOUR / prices.dynamodb_write_unit


def capacity_modes(plan: DesignPlan, settings: Settings, prices: PriceTable) -> list[TableModes]:
    """Every pipeline table's writes and reads in both modes, provisioned with the table's own min, max and target."""
    modes = []
    for table in PIPELINE_TABLES:
        capacity = settings.table_capacity(table)
        units = plan.write_units_per_second(table)
        reads = plan.read_units_per_second(table)
        modes.append(
            TableModes(
                table=table,
                write_units_per_second=units,
                read_units_per_second=reads,
                on_demand_usd=writes_monthly_usd(units, prices) + reads_monthly_usd(reads, prices),
                provisioned_write_capacity=provisioned_write_capacity(units, capacity),
                provisioned_read_capacity=provisioned_read_capacity(reads, capacity),
                provisioned_usd=provisioned_monthly_usd(units, reads, capacity, prices),
                target_utilization_percent=capacity.target_utilization_percent,
            )
        )
    return modes


def transactions_per_delta_batch(
    workload: Workload, changes: float, batches_per_invocation: float, markers: bool
) -> tuple[float, float]:
    """(transactions per delta batch, actions per transaction) of our reduce packing.

    The reduce stage (`aggregation.transactions`) splits nodes into `NODE_GROUPS` fixed
    groups and plans per group across every delta batch of an invocation: each node is
    written once per invocation, with one marker per (batch, group) unit and the `#stats`
    update per transaction. Whole groups share a transaction while they fit in 100
    actions; a larger group is packed greedily over several. `batches_per_invocation` is how
    many are planned together: those of one slice (`reduce_slicing`), a mean, so not whole.
    """
    per_unit_overhead = MARKER_ACTIONS_PER_UNIT if markers else 0
    nodes_per_group = distinct_nodes(workload, changes * batches_per_invocation) / NODE_GROUPS
    group_actions = nodes_per_group + batches_per_invocation * per_unit_overhead
    room = MAX_TRANSACTION_ACTIONS - STATS_ACTIONS
    if group_actions <= room:
        groups_per_transaction = min(NODE_GROUPS, int(room // group_actions))
        transactions = math.ceil(NODE_GROUPS / groups_per_transaction)
    else:
        transactions = NODE_GROUPS * math.ceil(group_actions / room)
    actions = NODE_GROUPS * group_actions + transactions * STATS_ACTIONS
    return transactions / batches_per_invocation, actions / transactions


def our_reduce_packing(
    workload: Workload, changes: float, batches_together: float, settings: Settings
) -> ReducePacking:
    """Node groups planned across the delta batches of one slice (`transactions_per_delta_batch`)."""
    per_batch, actions = transactions_per_delta_batch(workload, changes, batches_together, settings.markers)
    return ReducePacking(per_batch, actions)


def original_reduce_packing(
    workload: Workload, changes: float, batches_together: float, settings: Settings
) -> ReducePacking:
    """One transaction for the union of a reduce batch's nodes, without markers or `#stats`.

    Its totals are not sliced: `batches_together` is the whole reduce batch.

    A union over the action limit does not fit one transaction: the original would have to
    split it, losing the single token that made the batch idempotent.
    """
    union = distinct_nodes(workload, changes * settings.reduce_batch_size)
    transactions_per_batch = math.ceil(union / MAX_TRANSACTION_ACTIONS)
    flags: tuple[Flag, ...] = ()
    if union > MAX_TRANSACTION_ACTIONS:
        flags = (
            Flag(
                f"a reduce batch touches {union:.0f} nodes: more than one transaction holds "
                f"({MAX_TRANSACTION_ACTIONS} actions)",
                "the original must split it (and loses one-token idempotency); lower reduceBatchSize",
            ),
        )
    return ReducePacking(transactions_per_batch / settings.reduce_batch_size, union / transactions_per_batch, flags)


def original_state_rate(times: ServiceTimes, settings: Settings) -> float:
    """What the original's authors measured per instance, whatever the memory."""
    return times.original_state_messages_per_second


OURS = Design(
    name="this pipeline",
    state_rate=lambda_state_rate,
    selects_in_batch=True,
    timestamps_in_delta_items=True,
    reduce_packing=our_reduce_packing,
    coverage_query_items=COVERAGE_QUERY_PAGE_ITEMS,
    splits_delta_items=True,
    scales_out_reduce=True,
)
ORIGINAL = Design(
    name="original design",
    state_rate=original_state_rate,
    selects_in_batch=False,
    timestamps_in_delta_items=False,
    reduce_packing=original_reduce_packing,
    coverage_query_items=0,
    splits_delta_items=False,
    scales_out_reduce=False,
)


def plan_design(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    design: Design,
    *,
    suggest: bool = True,
) -> DesignPlan:
    """The plan of one design; `suggest` False skips searching for settings that would keep up."""
    plan = DesignPlan(design=design.name)
    rate = workload.rate
    changes_per_second = rate * workload.applied_share

    # Kinesis and the state function.
    plan.kinesis_shards = kinesis_shards(workload)
    instance_rate = design.state_rate(times, settings)
    plan.state_executions = rate / instance_rate
    per_shard_rate = rate / plan.kinesis_shards
    plan.state_parallelization_needed = math.ceil(per_shard_rate / instance_rate)
    if plan.state_parallelization_needed > settings.state_parallelization_factor:
        if plan.state_parallelization_needed > MAX_PARALLELIZATION_FACTOR:
            change = "more shards (provisioned mode) or a faster state function: no factor up to 10 suffices"
        else:
            change = f"set stateParallelizationFactor to {plan.state_parallelization_needed}"
        plan.flags.append(
            Flag(
                f"one state instance does {instance_rate:,.0f} msg/s but a shard brings {per_shard_rate:,.0f} msg/s",
                change,
            )
        )
    state_item = write_units_of(workload.record_bytes + STATE_ITEM_OVERHEAD_BYTES)
    # One conditional write per message, duplicates included (a failed condition is billed),
    # except those an in-batch selection never sends.
    writes_per_message = workload.state_writes_per_message if design.selects_in_batch else 1.0
    plan.state_write_units_per_second = rate * writes_per_message * state_item
    state_invocations = rate / settings.state_batch_size

    _plan_map(plan, workload, settings, times, design)

    # Reduce: ours, one reducer per DeltaTable stream shard and lane over sliced totals; the
    # original, one instance over one item per node.
    if design.scales_out_reduce:
        slicing = reduce_slicing(settings, plan.state_stream_shards, plan.delta_write_units_per_second)
        plan.delta_stream_shards, plan.reduce_lanes = slicing.delta_stream_shards, slicing.lanes
        plan.slices_per_invocation, plan.slices_in_use = slicing.slices_per_invocation, slicing.slices_in_use
    batches_together = settings.reduce_batch_size / plan.slices_per_invocation
    packing = design.reduce_packing(workload, plan.effective_map_batch, batches_together, settings)
    plan.reduce_transactions_per_second = plan.delta_batches_per_second * packing.transactions_per_delta_batch
    plan.actions_per_transaction = packing.actions_per_transaction
    plan.flags.extend(packing.flags)
    plan.aggregate_write_units_per_second = plan.reduce_transactions_per_second * plan.actions_per_transaction * 2
    # The hottest items (a slice's `#stats`, and the root nodes every batch touches) take one
    # transactional write (2 units) per transaction of their slice.
    plan.hottest_item_write_units_per_second = plan.reduce_transactions_per_second * 2 / plan.slices_in_use
    reduce_slowdown = cpu_slowdown(settings.reduce_memory_mb)
    plan.reduce_executions = (
        plan.reduce_transactions_per_second * times.transaction_round_trip_ms / 1e3
        + plan.reduce_transactions_per_second
        * plan.actions_per_transaction
        * times.reduce_cpu_us_per_action
        / 1e6
        * reduce_slowdown
        + changes_per_second * times.reduce_cpu_us_per_message / 1e6 * reduce_slowdown
    )
    plan.reduce_busy_fraction = plan.reduce_executions / plan.reduce_lanes
    reduce_invocations = plan.delta_batches_per_second / settings.reduce_batch_size
    if plan.reduce_busy_fraction > BUSY_LIMIT and suggest:
        flag = busy_reducers_flag(plan, workload=workload, settings=settings, times=times, prices=prices, design=design)
        plan.flags.append(flag)
    if plan.hottest_item_write_units_per_second > PER_ITEM_WRITE_UNITS_PER_SECOND:
        plan.flags.append(
            hot_item_flag(
                plan, workload=workload, settings=settings, times=times, prices=prices, design=design, suggest=suggest
            )
        )
    plan.flags.extend(table_flags(plan, settings))

    plan.components = [
        Component(
            "Kinesis (on-demand)",
            f"{plan.kinesis_shards} shards' worth of writes",
            kinesis_monthly_usd(workload, prices),
        ),
        Component(
            "state λ",
            f"{plan.state_executions:,.1f} concurrent, {state_invocations:,.0f} invocations/s",
            lambda_monthly_usd(plan.state_executions, settings.state_memory_mb, state_invocations, prices),
        ),
        Component(
            "map λ",
            f"{plan.map_executions:,.1f} concurrent, {plan.delta_batches_per_second:,.1f} invocations/s",
            lambda_monthly_usd(plan.map_executions, settings.map_memory_mb, plan.delta_batches_per_second, prices),
        ),
        Component(
            "reduce λ",
            f"{plan.reduce_lanes} reducer{'s' if plan.reduce_lanes > 1 else ''}, {plan.reduce_busy_fraction:.0%} busy"
            + (" each" if plan.reduce_lanes > 1 else ""),
            lambda_monthly_usd(
                min(float(plan.reduce_lanes), plan.reduce_executions),
                settings.reduce_memory_mb,
                reduce_invocations,
                prices,
            ),
        ),
        *(
            Component(
                f"{table} writes",
                f"{plan.write_units_per_second(table):,.0f} WRU/s, {settings.table_capacity(table).mode}",
                table_writes_monthly_usd(plan.write_units_per_second(table), settings.table_capacity(table), prices),
            )
            for table in PIPELINE_TABLES
        ),
        *(
            Component(
                f"{table} reads",
                f"{plan.read_units_per_second(table):,.0f} RRU/s, {settings.table_capacity(table).mode}",
                table_reads_monthly_usd(plan.read_units_per_second(table), settings.table_capacity(table), prices),
            )
            for table in READ_TABLES
        ),
    ]
    return plan


def _plan_map(plan: DesignPlan, workload: Workload, settings: Settings, times: ServiceTimes, design: Design) -> None:
    """The map stage's batches, delta items and their reads into `plan`, with its flags."""
    changes_per_second = workload.rate * workload.applied_share
    # Map: the StateTable stream has about one shard per 1,000 WCU/s partition.
    plan.state_stream_shards = max(1, math.ceil(plan.state_write_units_per_second / PER_ITEM_WRITE_UNITS_PER_SECOND))
    per_stream_shard = changes_per_second / plan.state_stream_shards
    fill_seconds = max(1.0 / STREAM_POLLS_PER_SECOND, settings.map_batching_window_seconds)
    plan.effective_map_batch = max(1.0, min(float(settings.map_batch_size), per_stream_shard * fill_seconds))
    plan.delta_batches_per_second = changes_per_second / plan.effective_map_batch
    map_cpu = plan.effective_map_batch * times.map_cpu_us_per_record / 1e6 * cpu_slowdown(settings.map_memory_mb)
    map_seconds = map_cpu + times.write_round_trip_ms / 1e3
    plan.map_executions = plan.delta_batches_per_second * map_seconds
    delta_bytes = delta_item_bytes(workload, plan.effective_map_batch, with_timestamps=design.timestamps_in_delta_items)
    if delta_bytes > MAX_ITEM_BYTES and not design.splits_delta_items:
        plan.flags.append(
            Flag(
                f"a delta item would be {delta_bytes / KILOBYTE:,.0f} KB, over DynamoDB's 400 KB item limit",
                "lower mapBatchSize",
            )
        )
    item_bytes = delta_bytes
    while design.splits_delta_items and item_bytes > MAX_ITEM_BYTES:  # halved, as `delta_items` does
        plan.delta_items_per_batch *= 2
        item_bytes = delta_item_bytes(
            workload,
            plan.effective_map_batch / plan.delta_items_per_batch,
            with_timestamps=design.timestamps_in_delta_items,
        )
    plan.delta_write_units_per_second = (
        plan.delta_batches_per_second * plan.delta_items_per_batch * write_units_of(item_bytes)
    )
    # The coverage Query reads the shard's newest items, each as large as this batch's.
    query_bytes = design.coverage_query_items * item_bytes
    plan.delta_read_units_per_second = plan.delta_batches_per_second * math.ceil(query_bytes / READ_UNIT_BYTES)
    fill_seconds_per_batch = plan.effective_map_batch / per_stream_shard
    if map_seconds > fill_seconds_per_batch:
        plan.flags.append(
            Flag(
                f"a map invocation takes {map_seconds:.2f} s but its stream shard fills a batch every "
                f"{fill_seconds_per_batch:.2f} s",
                "give the map function more memory (CPU scales with it) or a longer batching window",
            )
        )


def busy_reducers_flag(
    plan: DesignPlan, *, workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable, design: Design
) -> Flag:
    """The reducers cannot keep up: the least change that lets them (`reducers_that_keep_up`)."""
    reducers = "the single reduce instance" if plan.reduce_lanes == 1 else f"each of {plan.reduce_lanes} reducers"
    problem = (
        f"{reducers} would be {plan.reduce_busy_fraction:.0%} busy "
        f"({plan.reduce_transactions_per_second:,.1f} transactions/s at {times.transaction_round_trip_ms:g} ms)"
    )
    better = reducers_that_keep_up(workload, settings, times, prices, design)
    if better is None:
        change = (
            "no reduceParallelizationFactor up to 10, map batching up to 10,000 records / 300 s and 1,769 MB "
            "of reduce memory suffices"
        )
    else:
        change = " and ".join(changed_settings(settings, better))
        if better.map_batch_size != settings.map_batch_size:
            change += " (fewer, fuller delta batches)"
        if better.reduce_memory_mb != settings.reduce_memory_mb:
            change += (
                f" (CPU scales with memory: at {settings.reduce_memory_mb} MB its CPU work runs "
                f"{cpu_slowdown(settings.reduce_memory_mb):.1f}x slower than one vCPU)"
            )
    return Flag(problem, change)


def hot_item_flag(
    plan: DesignPlan,
    *,
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    design: Design,
    suggest: bool,
) -> Flag:
    """An aggregate item over DynamoDB's per-partition limit: more slices, or fewer transactions."""
    problem = f"the hottest aggregate item takes {plan.hottest_item_write_units_per_second:,.0f} WCU/s (limit 1,000)"
    fewer = "raise mapBatchSize / reduceBatchSize to cut transactions per second"
    if not (design.scales_out_reduce and suggest):
        return Flag(problem, fewer)
    slices = settings.aggregate_slices * 2
    while slices <= MAX_SLICES:
        trial = plan_design(workload, replace(settings, aggregate_slices=slices), times, prices, design, suggest=False)
        if trial.hottest_item_write_units_per_second <= PER_ITEM_WRITE_UNITS_PER_SECOND:
            return Flag(problem, f"raise aggregateSlices to {slices}, or {fewer}")
        slices *= 2
    return Flag(problem, fewer)


def table_flags(plan: DesignPlan, settings: Settings) -> list[Flag]:
    """A provisioned table whose maximum is below its load, and any table over the default quota.

    A provisioned table cannot serve more than its maximum write (or read) capacity: beyond
    it requests are throttled and the stage that makes them falls behind. The per-table
    quotas (40,000 write and 40,000 read units a second, on-demand request units or
    provisioned capacity) are adjustable: those flags ask for an increase rather than
    another setting.
    """
    flags = []
    for table in PIPELINE_TABLES:
        capacity = settings.table_capacity(table)
        writes, reads = plan.write_units_per_second(table), plan.read_units_per_second(table)
        flags += throughput_flags(table, "write", writes, capacity.max_write_capacity, capacity)
        flags += throughput_flags(table, "read", reads, capacity.max_read_capacity, capacity)
    return flags


def throughput_flags(
    table: str, kind: Literal["write", "read"], units: float, maximum: int, capacity: TableCapacity
) -> list[Flag]:
    """`table_flags` for one kind of throughput."""
    flags = []
    if capacity.provisioned and units > maximum:
        wanted = math.ceil(units / (capacity.target_utilization_percent / 100))
        flags.append(
            Flag(
                f"{table} needs {units:,.0f} {kind[0].upper()}CU/s, over its provisioned maximum of {maximum:,}",
                f"raise max{kind.title()}Capacity of {TABLE_SETTINGS[table]} to {wanted:,} "
                "(the load at its target utilisation)",
            )
        )
    minimum = capacity.min_write_capacity if kind == "write" else capacity.min_read_capacity
    used = held_capacity(units, minimum, capacity) if capacity.provisioned else units
    quota = TABLE_WRITE_QUOTA_PER_SECOND if kind == "write" else TABLE_READ_QUOTA_PER_SECOND
    if used > quota:
        flags.append(
            Flag(
                f"{table} needs {used:,.0f} {kind} units/s ({capacity.mode}), over the default table quota "
                f"of {quota:,}",
                f"request a table-level {kind} throughput quota increase before going live",
                blocking=False,
            )
        )
    return flags


def reducers_that_keep_up(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable, design: Design
) -> Settings | None:
    """The least change that lets the reducers keep up. Candidates in order: reduce memory as it
    is, the map batch size and batching window as they are, then the smallest larger batch and
    the shortest window (a window adds its length to the latency), then more reduce memory (CPU
    scales with it) with the same search; for each, ours takes the smallest
    `reduceParallelizationFactor` that keeps up (more reducers cost no latency and no write).
    """
    memories = [settings.reduce_memory_mb, *(m for m in REDUCE_MEMORY_CANDIDATES if m > settings.reduce_memory_mb)]
    factors = range(
        settings.reduce_parallelization_factor,
        (MAX_PARALLELIZATION_FACTOR if design.scales_out_reduce else settings.reduce_parallelization_factor) + 1,
    )
    for memory in memories:
        for candidate in (settings.map_batch_size, *MAP_BATCH_CANDIDATES):
            if candidate < settings.map_batch_size:
                continue
            for window in (settings.map_batching_window_seconds, *MAP_BATCHING_WINDOWS):
                for factor in factors:
                    trial = replace(
                        settings,
                        map_batch_size=candidate,
                        map_batching_window_seconds=window,
                        reduce_memory_mb=memory,
                        reduce_parallelization_factor=factor,
                    )
                    trial_plan = plan_design(workload, trial, times, prices, design, suggest=False)
                    if trial_plan.reduce_busy_fraction <= BUSY_LIMIT:
                        return trial
    return None


def changed_settings(before: Settings, after: Settings) -> list[str]:
    """The cdk.json settings `after` changes, as `set <name> to <value>`."""
    return [
        f"set {name} to {getattr(after, field):g}"
        for field, name in (
            ("reduce_parallelization_factor", "reduceParallelizationFactor"),
            ("map_batch_size", "mapBatchSize"),
            ("map_batching_window_seconds", "mapBatchingWindowSeconds"),
            ("reduce_memory_mb", "reduceMemoryMb"),
        )
        if getattr(after, field) != getattr(before, field)
    ]


def plan_capacity(
    workload: Workload,
    settings: Settings | None = None,
    times: ServiceTimes | None = None,
    prices: PriceTable | None = None,
) -> CapacityPlan:
    settings = settings or Settings()
    times = times or ServiceTimes()
    prices = prices or load_price_table()
    ours = plan_design(workload, settings, times, prices, OURS)
    return CapacityPlan(
        workload=workload,
        settings=settings,
        times=times,
        prices=prices,
        ours=ours,
        original=plan_design(workload, settings, times, prices, ORIGINAL),
        modes=capacity_modes(ours, settings, prices),
    )
