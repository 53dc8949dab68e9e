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
  from a KPL-aggregating producer (`Workload.aggregated`), records carry full aggregates, so
  bytes bind and both modes bill per aggregate;
- concurrent state, map and reduce executions by Little's law (arrival rate x time per
  invocation), from per-invocation rates that are parameters (`make bench` passes the
  ones it measured; the defaults are stated in `ServiceTimes`);
- DynamoDB write units per second per table and on the hottest item, transactions per
  second, the read units of map's coverage Query (a strongly consistent Query of the
  shard's newest delta items before every write), and monthly cost per component from the
  dated price table, each table in its capacity mode (on-demand, or provisioned with auto
  scaling; `capacity_modes` prices both);
- reduce scale-out (ours): one reducer per DeltaTable stream shard times
  `reduceParallelizationFactor`, over `aggregateSlices` slices of the totals: in `crt+marker`
  an invocation plans all its delta batches together and each transaction writes the slice its
  token names, so more slices spread the hottest items (`#stats` and the roots, one write per
  transaction of their slice) and the reducers' conflicts at no cost in packing; in `crt` a
  delta item adds to the slice of its StateTable stream shard and an invocation plans each slice
  its items fall in apart, packing fewer delta batches per transaction (`reduce_slicing`);
- flags: a table over its default quota or its provisioned maximum, a shard whose state
  function cannot keep up (raise the parallelization factor), a reducer busier than it can be
  at the transaction latency, an item over DynamoDB's 1,000 WCU/s per-partition limit, the
  original's reduce transaction over 100 actions and its delta item over the 400 KB item
  limit (ours splits such a batch into several items, billed by bytes alike). Each flag names
  the `cdk.json` setting to change.

Each stage's model is its own module, and this one assembles them into a plan and searches
for settings that keep up:

- `planner.inputs`: the workload, the settings, the service times, Lambda's CPU and price;
- `planner.plan`: the plan's lines, flags and figures, and what sets a design apart;
- `planner.ingest`: the Kinesis stream; `planner.state`: the state function and StateTable;
- `planner.map`: map batches and delta items; `planner.reduce`: reducers, slices, transactions;
- `planner.tables`: each table's units in either capacity mode, quotas and maxima;
- `planner.load_profile`: the capacity modes a load profile chooses (steady: each the cheaper);
- `planner.archive`: the archive's lanes, S3 requests, storage and access logs;
- `planner.scale_out`: the cheapest settings within the busy, hot-item and latency targets.

Why a model and not a load test: the pipeline cannot be run at 50,000 messages/s on a
laptop. The model's per-message write counts are checked against the write-cost
benchmark, which counts real calls on the same workload (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from aggregation.aggregate_items import MAX_SLICES
from aggregation.stream_positions import COVERAGE_QUERY_PAGE_ITEMS
from planner.archive import plan_archive
from planner.ingest import StreamModes, plan_ingest, stream_modes
from planner.inputs import (
    MAX_PARALLELIZATION_FACTOR,
    PER_ITEM_WRITE_UNITS_PER_SECOND,
    ServiceTimes,
    Settings,
    Workload,
    cpu_slowdown,
)
from planner.map import plan_map
from planner.plan import Design, DesignPlan, Flag, PlanInputs
from planner.prices import PriceTable, load_price_table
from planner.reduce import BUSY_LIMIT, original_reduce_packing, our_reduce_packing, plan_reduce
from planner.state import lambda_state_rate, original_state_rate, plan_state
from planner.tables import TableModes, capacity_modes, table_components, table_flags

MAP_BATCH_CANDIDATES = (100, 200, 500, 1000, 2000, 5000, 10000)
REDUCE_MEMORY_CANDIDATES = (512, 1024, 1769)  # MB; 1,769 MB is one full vCPU
MAP_BATCHING_WINDOWS = (1, 2, 5, 10, 20, 30, 60, 120, 300)  # mapBatchingWindowSeconds candidates


@dataclass(frozen=True)
class CapacityPlan:
    workload: Workload
    settings: Settings
    times: ServiceTimes
    prices: PriceTable
    ours: DesignPlan
    original: DesignPlan
    modes: list[TableModes]  # ours, each table priced in both capacity modes
    stream: StreamModes  # the Kinesis stream priced in both capacity modes


OURS = Design(
    name="this pipeline",
    state_rate=lambda_state_rate,
    selects_in_batch=True,
    timestamps_in_delta_items=True,
    reduce_packing=our_reduce_packing,
    coverage_query_items=COVERAGE_QUERY_PAGE_ITEMS,
    splits_delta_items=True,
    scales_out_reduce=True,
    archives=True,
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
    archives=False,
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
    given = PlanInputs(workload, settings, times, prices, design)
    kinesis = plan_ingest(plan, workload, settings, prices)
    state = plan_state(plan, given)
    mapping = plan_map(plan, given)
    reduce = plan_reduce(plan, given)
    if plan.reduce_busy_fraction > BUSY_LIMIT and suggest:
        plan.flags.append(busy_reducers_flag(plan, given))
    if plan.hottest_item_write_units_per_second > PER_ITEM_WRITE_UNITS_PER_SECOND:
        plan.flags.append(hot_item_flag(plan, given, suggest=suggest))
    archive = (
        plan_archive(
            plan, item_bytes=plan.delta_item_bytes, rate=workload.rate, settings=settings, times=times, prices=prices
        )
        if design.archives
        else []
    )
    plan.flags.extend(table_flags(plan, settings))
    plan.components = [kinesis, state, mapping, reduce, *table_components(plan, settings, prices), *archive]
    return plan


def busy_reducers_flag(plan: DesignPlan, given: PlanInputs) -> Flag:
    """The reducers cannot keep up: the least change that lets them (`reducers_that_keep_up`)."""
    reducers = "the single reduce instance" if plan.reduce_lanes == 1 else f"each of {plan.reduce_lanes} reducers"
    problem = (
        f"{reducers} would be {plan.reduce_busy_fraction:.0%} busy "
        f"({plan.reduce_transactions_per_second:,.1f} transactions/s at {given.times.transaction_round_trip_ms:g} ms)"
    )
    better = reducers_that_keep_up(given.workload, given.settings, given.times, given.prices, given.design)
    if better is None:
        change = (
            "no reduceParallelizationFactor up to 10, map batching up to 10,000 records / 300 s and 1,769 MB "
            "of reduce memory suffices"
        )
    else:
        change = " and ".join(changed_settings(given.settings, better))
        if better.map_batch_size != given.settings.map_batch_size:
            change += " (fewer, fuller delta batches)"
        if better.reduce_memory_mb != given.settings.reduce_memory_mb:
            change += (
                f" (CPU scales with memory: at {given.settings.reduce_memory_mb} MB its CPU work runs "
                f"{cpu_slowdown(given.settings.reduce_memory_mb):.1f}x slower than one vCPU)"
            )
    return Flag(problem, change)


def hot_item_flag(plan: DesignPlan, given: PlanInputs, *, suggest: bool) -> Flag:
    """An aggregate item over DynamoDB's per-partition limit: more slices, or fewer transactions."""
    problem = f"the hottest aggregate item takes {plan.hottest_item_write_units_per_second:,.0f} WCU/s (limit 1,000)"
    fewer = "raise mapBatchSize / reduceBatchSize to cut transactions per second"
    if not (given.design.scales_out_reduce and suggest):
        return Flag(problem, fewer)
    slices = given.settings.aggregate_slices * 2
    while slices <= MAX_SLICES:
        trial = plan_design(
            given.workload,
            replace(given.settings, aggregate_slices=slices),
            given.times,
            given.prices,
            given.design,
            suggest=False,
        )
        if trial.hottest_item_write_units_per_second <= PER_ITEM_WRITE_UNITS_PER_SECOND:
            return Flag(problem, f"raise aggregateSlices to {slices}, or {fewer}")
        slices *= 2
    return Flag(problem, fewer)


def reducers_that_keep_up(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable, design: Design
) -> Settings | None:
    """The least change that lets the reducers keep up. Candidates in order: reduce memory as it
    is, the map batch size and batching window as they are, then the smallest larger batch and
    the shortest window (a window adds its length to the latency), then more reduce memory (CPU
    scales with it) with the same search; for each, ours takes the smallest
    `reduceParallelizationFactor` that keeps up (more reducers cost no latency and no write).
    """
    memories = reduce_memory_candidates(settings)
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


def reduce_memory_candidates(settings: Settings) -> tuple[int, ...]:
    """`reduceMemoryMb` as set, then each larger candidate: the reduce's CPU work (building and
    serialising transaction actions) runs faster with memory, up to one full vCPU at 1,769 MB."""
    return (settings.reduce_memory_mb, *(m for m in REDUCE_MEMORY_CANDIDATES if m > settings.reduce_memory_mb))


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
        stream=stream_modes(workload, settings, prices),
    )
