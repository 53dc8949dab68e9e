"""The cheapest settings that carry a rate with room to spare: what the planner suggests.

`plan_design` says whether given settings keep up; this searches the settings a deployment
can change in `cdk.json` for the cheapest plan (this pipeline's monthly cost) in which

- every stage on the way to the totals uses at most `STAGE_BUSY_TARGET` of what its lanes
  carry (`StageTiming.busy`), runs on at least `MIN_LANES` lanes, and none is flagged as
  unable to keep up; the archive, a side consumer, is held to the same busy target, its
  busiest registry shard included (no hot object: `within_targets`);
- the hottest aggregate item takes at most `HOTTEST_ITEM_TARGET` write units a second (half
  of a partition's 1,000: hashes spread slices evenly only on average);
- optionally, the modelled p50 latency stays within a bound.

What it chooses: the stream's mode (the cheaper one, with a shard count that fills each
provisioned shard to 70 %), the state parallelization factor (the least that keeps the state
lanes within the target), map batching (batch size and window: fuller delta batches cost a
window's wait), the reducers (`reduceParallelizationFactor`), `reduceBatchSize` (fewer lanes
gather more delta batches per invocation, which share transactions; a larger batch size lets
them) and `reduceMemoryMb` (CPU scales with memory: at the default 256 MB building a
transaction's actions takes about as long as its round trip), `aggregateSlices` (in
`crt+marker` the slices cost no writes, an invocation's batches being planned together: they
cool the hottest item and spread the reducers' transactions, fewer conflicts; in `crt` each
slice an invocation's batches fall in is its own set of transactions), and
`archiveRegistryShards` (raised to the fewest that keep the busiest registry shard within the
target when the setting's do not; shards cost no requests, each invocation updates one) with
`archiveParallelizationFactor` (more archive lanes when the object writes keep them too busy).
Tables keep their capacity modes; the plan prices both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from planner.archive import archive_factor_needed, registry_shards_needed
from planner.ingest import stream_modes, suggested_provisioned_shards
from planner.inputs import MAX_PARALLELIZATION_FACTOR, ServiceTimes, Settings, StreamCapacity, Workload
from planner.model import OURS, REDUCE_MEMORY_CANDIDATES, plan_design, reduce_memory_candidates
from planner.plan import STAGE_BUSY_TARGET, DesignPlan
from planner.prices import PriceTable
from planner.reduce import batches_in_one_transaction_per_group

HOTTEST_ITEM_TARGET = 500.0
SCALE_OUT_RATE = 250_000
"""The rate of the scale-out plan docs/benchmarks.md carries, five times the reference design's."""
MIN_LANES = 2
"""No stage limited to one concurrent execution: one lane is one function instance, whose
failure or slow invocation holds up the whole stage."""
REDUCE_BATCH_CANDIDATES = (10, 20, 50, 100, 200, 500, 1000)
"""`reduceBatchSize` candidates, of `cheapest_settings` and of `auto`; the first is its value
before it could be `auto`, the fallback when no candidate keeps the p50 bound."""
AUTO_LATENCY_LIMIT_SECONDS = 1.0
"""The modelled p50 an `auto` reduce batch size is held to (issue 23: p50 at 50,000 msg/s <= 1 s)."""
SLICE_CANDIDATES = (1, 2, 4, 8, 16, 32, 64, 128)
MAP_BATCHING_CANDIDATES = ((100, 0), (500, 0), (1000, 1), (2000, 2), (5000, 5))
"""(mapBatchSize, mapBatchingWindowSeconds): without a window a map batch is what a quarter
second brings; a window lets it fill, and adds up to its length to the latency."""
AUTO_REDUCE_MEMORY_CANDIDATES = (256, *REDUCE_MEMORY_CANDIDATES)
"""`reduceMemoryMb` left `auto`: 256 MB (the setting's default before it could be `auto`) up to one
full vCPU. Not 128 MB: the model knows CPU, not the footprint of boto3 and Powertools, which a
128 MB function is close to."""


@dataclass(frozen=True)
class Choice:
    """Settings the search chose, and this pipeline's plan with them."""

    settings: Settings
    plan: DesignPlan


def within_targets(plan: DesignPlan, latency_limit_seconds: float | None, *, min_lanes: int = MIN_LANES) -> bool:
    """Every stage a total waits for within `STAGE_BUSY_TARGET` on at least `min_lanes` lanes,
    the archive (its lanes and its busiest registry shard) within `STAGE_BUSY_TARGET` too, the
    hottest item within its target, and the p50 within `latency_limit_seconds` (if given).

    The archive waits on no total, so its lane count is not held to `MIN_LANES` (it has the
    DeltaTable stream's shards); but a busier archive falls behind until records expire.
    """
    return _totals_within_targets(plan, latency_limit_seconds, min_lanes=min_lanes) and _archive_within_targets(plan)


def _totals_within_targets(plan: DesignPlan, latency_limit_seconds: float | None, *, min_lanes: int) -> bool:
    """`within_targets` for the stages a total waits for and the hottest item (no flag but the archive's)."""
    path = [timing for timing in plan.timings if timing.on_latency_path]
    if any(flag.blocking and not flag.side_stage for flag in plan.flags):
        return False
    if any(timing.busy > STAGE_BUSY_TARGET or timing.lanes < min_lanes for timing in path):
        return False
    if plan.hottest_item_write_units_per_second > HOTTEST_ITEM_TARGET:
        return False
    return latency_limit_seconds is None or plan.latency_p50_seconds <= latency_limit_seconds


def _archive_within_targets(plan: DesignPlan) -> bool:
    """`within_targets` for the archive: its lanes and its busiest registry shard, none flagged."""
    side = [timing for timing in plan.timings if not timing.on_latency_path]
    if any(flag.blocking and flag.side_stage for flag in plan.flags):
        return False
    return all(timing.busy <= STAGE_BUSY_TARGET for timing in side) and plan.archive_registry_busy <= STAGE_BUSY_TARGET


def cheapest_settings(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    latency_limit_seconds: float | None = None,
    aggregate_slices: int | None = None,
    choose_stream: bool = True,
) -> Choice | None:
    """The cheapest settings within the targets (`within_targets`), or None when none is.

    `aggregate_slices` fixes the slice count instead of choosing it (to price a deployment
    whose slices are set: they cannot change over stored totals); `choose_stream` False keeps
    the stream's mode as `settings` has it.
    """
    base = _stream_and_state(workload, settings, times, prices, choose_stream=choose_stream)
    best: Choice | None = None
    for trial in _candidates(workload, base):
        choice = _fewest_slices(
            workload,
            trial,
            times,
            prices,
            aggregate_slices=aggregate_slices,
            latency_limit_seconds=latency_limit_seconds,
        )
        if choice is not None and (best is None or _rank(choice) < _rank(best)):
            best = choice
    if best is None:
        return None
    return Choice(best.settings, plan_design(workload, best.settings, times, prices, OURS))


def settings_for_rate(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    state_parallelization: bool,
    reduce_parallelization: bool,
    slices: bool,
    archive_parallelization: bool,
    reduce_memory: bool,
    reduce_batch: bool,
) -> Settings:
    """The settings a deployment leaves to the planner (`auto` in cdk.json), chosen for its rate.

    Chosen at `workload.rate` (`targetMessagesPerSecond`), every other setting as given: the
    least state parallelization factor that keeps the state lanes within `STAGE_BUSY_TARGET`;
    then, of the slice counts, reduce parallelization factors, reduce memory sizes
    (`AUTO_REDUCE_MEMORY_CANDIDATES`) and reduce batch sizes (`REDUCE_BATCH_CANDIDATES`, the ones
    `cheapest_settings` tries) that keep the reducers within it and the hottest item within
    `HOTTEST_ITEM_TARGET` (on however many lanes the rate fills: a quiet stream has one shard), the
    cheapest (then the faster, then the smaller batch); then the least archive parallelization
    factor that keeps the archive's lanes within the busy target. Slices, reducers, memory and
    batch size trade against each other: reducers that share few slices resend conflicting
    transactions (in `crt` each slice an invocation's batches fall in is also its own set of
    them), faster (larger) reducers wait less, so they gather fewer delta batches an invocation
    and write the totals more often, and the batch size caps how many delta batches an invocation
    folds into one write of the totals. The batch sizes tried are `reduce_batch_candidates`: the
    fixed ones and the most full map batches one transaction per node group holds (46 for the
    standard hierarchy), past which a group's nodes are written again in a second transaction.

    A larger batch can cost latency: fewer lanes gather for longer (at 250,000 msg/s batches of
    1,000 would model a p50 of 3.4 s). So when the batch size is left to the planner the choice is
    also held to a modelled p50 within `AUTO_LATENCY_LIMIT_SECONDS` (the issue's "p50 at 50,000
    msg/s <= 1 s"); when no candidate is, the batch size falls back to the first candidate (10,
    its value before it could be `auto`) and the rest is chosen without the bound, as it is when
    the batch size is set. With the batch size set no p50 bound is imposed: with the cdk.json
    batches of 10 and no window the choices' modelled p50 stays under 1 s (0.83 s at 400 msg/s,
    0.82 s at 50,000, 0.86 s at 250,000), so a bound would not change them.
    `tests/planner/test_scale_out.py` checks the p50 at both rates. When
    nothing is within the targets the largest candidates are returned, and the capacity check
    (`stacks.capacity`) says what still cannot keep up. Unlike `cheapest_settings`, map batches,
    windows, the stream and the registry shards stay as set: they change latency and what a
    deployment pays at rest, or stored state.
    """
    if state_parallelization:
        settings = _least_state_parallelization(workload, settings, times, prices)
    every_factor = tuple(range(1, MAX_PARALLELIZATION_FACTOR + 1))
    grid = _ReduceGrid(
        slice_counts=SLICE_CANDIDATES if slices else (settings.aggregate_slices,),
        factors=every_factor if reduce_parallelization else (settings.reduce_parallelization_factor,),
        memories=AUTO_REDUCE_MEMORY_CANDIDATES if reduce_memory else (settings.reduce_memory_mb,),
        batches=reduce_batch_candidates(workload, settings) if reduce_batch else (settings.reduce_batch_size,),
    )
    limit = AUTO_LATENCY_LIMIT_SECONDS if reduce_batch else None
    best = _cheapest_reducers(workload, settings, times, prices, grid, latency_limit_seconds=limit)
    if best is None and reduce_batch:
        grid = replace(grid, batches=REDUCE_BATCH_CANDIDATES[:1])
        best = _cheapest_reducers(workload, settings, times, prices, grid, latency_limit_seconds=None)
    if best is None:
        settings = replace(
            settings,
            aggregate_slices=grid.slice_counts[-1],
            reduce_parallelization_factor=grid.factors[-1],
            reduce_memory_mb=grid.memories[-1],
            reduce_batch_size=grid.batches[-1],
        )
    else:
        settings = best.settings
    if archive_parallelization:
        settings = _least_archive_parallelization(workload, settings, times, prices)
    return settings


@dataclass(frozen=True)
class _ReduceGrid:
    """The reduce settings `settings_for_rate` tries: one value each for those set, candidates for `auto`."""

    slice_counts: tuple[int, ...]
    factors: tuple[int, ...]
    memories: tuple[int, ...]
    batches: tuple[int, ...]


def _cheapest_reducers(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    grid: _ReduceGrid,
    *,
    latency_limit_seconds: float | None,
) -> Choice | None:
    """The cheapest (then faster) of `grid` within the targets for the reducers and the hottest
    item, the p50 within `latency_limit_seconds` if given; the first such in `grid`'s order on a
    tie (smaller batches first); None when none is."""
    best: Choice | None = None
    for batch in grid.batches:
        for count in grid.slice_counts:
            for factor in grid.factors:
                for memory in grid.memories:
                    trial = replace(
                        settings,
                        aggregate_slices=count,
                        reduce_parallelization_factor=factor,
                        reduce_memory_mb=memory,
                        reduce_batch_size=batch,
                    )
                    plan = plan_design(workload, trial, times, prices, OURS, suggest=False)
                    within = _totals_within_targets(plan, latency_limit_seconds, min_lanes=1)
                    if within and (best is None or _rank(Choice(trial, plan)) < _rank(best)):
                        best = Choice(trial, plan)
    return best


def _stream_and_state(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable, *, choose_stream: bool
) -> Settings:
    """The cheaper stream mode, then the least state parallelization within the busy target."""
    cheaper = stream_modes(workload, replace(settings, stream=StreamCapacity()), prices).cheaper
    if choose_stream and cheaper == "provisioned":
        settings = replace(settings, stream=StreamCapacity("provisioned", suggested_provisioned_shards(workload)))
    return _least_state_parallelization(workload, settings, times, prices)


def _least_state_parallelization(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable
) -> Settings:
    """The least state parallelization factor within `STAGE_BUSY_TARGET` (or the largest)."""
    return _least_factor(
        workload,
        settings,
        times,
        prices,
        with_factor=lambda trial, factor: replace(trial, state_parallelization_factor=factor),
        within=lambda plan: plan.timings[0].busy <= STAGE_BUSY_TARGET,
    )


def _least_archive_parallelization(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable
) -> Settings:
    """The least archive parallelization factor that keeps the archive within its targets (or the largest)."""
    return _least_factor(
        workload,
        settings,
        times,
        prices,
        with_factor=lambda trial, factor: replace(trial, archive_parallelization_factor=factor),
        within=_archive_within_targets,
    )


def _least_factor(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    with_factor: Callable[[Settings, int], Settings],
    within: Callable[[DesignPlan], bool],
) -> Settings:
    """`settings` with the least parallelization factor (1 to `MAX_PARALLELIZATION_FACTOR`, set by
    `with_factor`) whose plan is `within`, or the largest when none is."""
    for factor in range(1, MAX_PARALLELIZATION_FACTOR + 1):
        trial = with_factor(settings, factor)
        if within(plan_design(workload, trial, times, prices, OURS, suggest=False)):
            return trial
    return with_factor(settings, MAX_PARALLELIZATION_FACTOR)


def reduce_batch_candidates(workload: Workload, settings: Settings) -> tuple[int, ...]:
    """`REDUCE_BATCH_CANDIDATES` and, in order among them, the most full map batches one transaction
    per node group holds (`planner.reduce.batches_in_one_transaction_per_group`): a reducer lane that
    gathers more than that per poll writes each group's nodes in two transactions for the last few."""
    fitting = batches_in_one_transaction_per_group(workload, float(settings.map_batch_size), settings.markers)
    first, *rest = REDUCE_BATCH_CANDIDATES
    if fitting is None or fitting <= first or fitting in rest:
        return REDUCE_BATCH_CANDIDATES
    return (first, *sorted({*rest, fitting}))


def _candidates(workload: Workload, settings: Settings) -> Iterator[Settings]:
    """Map batching x reducers x reduce batch size x reduce memory (as set, or more)."""
    for map_batch, window in MAP_BATCHING_CANDIDATES:
        batches = reduce_batch_candidates(workload, replace(settings, map_batch_size=map_batch))
        for factor in range(1, MAX_PARALLELIZATION_FACTOR + 1):
            for batch in batches:
                for memory in reduce_memory_candidates(settings):
                    yield replace(
                        settings,
                        map_batch_size=map_batch,
                        map_batching_window_seconds=window,
                        reduce_parallelization_factor=factor,
                        reduce_batch_size=batch,
                        reduce_memory_mb=memory,
                    )


def _fewest_slices(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    aggregate_slices: int | None,
    latency_limit_seconds: float | None,
) -> Choice | None:
    """The fewest slices within the targets (each slice more costs writes; more slices cool the
    hottest item and spread concurrent reducers' transactions), or `aggregate_slices` if
    given; None when no count is within them."""
    for count in (aggregate_slices,) if aggregate_slices is not None else SLICE_CANDIDATES:
        trial = replace(settings, aggregate_slices=count)
        plan = plan_design(workload, trial, times, prices, OURS, suggest=False)
        trial, plan = _archive_within_target(workload, trial, plan, times, prices)
        if within_targets(plan, latency_limit_seconds):
            return Choice(trial, plan)
    return None


def _archive_within_target(
    workload: Workload, settings: Settings, plan: DesignPlan, times: ServiceTimes, prices: PriceTable
) -> tuple[Settings, DesignPlan]:
    """Raise `archiveParallelizationFactor` (lanes writing objects) and `archiveRegistryShards`
    (keys taking their compare-and-swap updates) until the archive is within `STAGE_BUSY_TARGET`,
    or they reach their ceilings; more lanes make more concurrent updates, so it repeats a few times.
    Neither costs latency or requests."""
    for _ in range(3):
        factor = settings.archive_parallelization_factor
        if plan.archive_lane_busy > STAGE_BUSY_TARGET and factor < MAX_PARALLELIZATION_FACTOR:
            factor = max(factor + 1, archive_factor_needed(plan.archive_lane_busy, settings))
        shards = settings.archive_registry_shards
        if plan.archive_registry_busy > STAGE_BUSY_TARGET:
            shards = max(shards, registry_shards_needed(plan, times))
        if (factor, shards) == (settings.archive_parallelization_factor, settings.archive_registry_shards):
            break
        settings = replace(settings, archive_parallelization_factor=factor, archive_registry_shards=shards)
        plan = plan_design(workload, settings, times, prices, OURS, suggest=False)
    return settings, plan


def _rank(choice: Choice) -> tuple[float, float]:
    """Cheaper first, then faster."""
    return choice.plan.monthly_usd, choice.plan.latency_p50_seconds


def describe_choice(before: Settings, after: Settings) -> list[str]:
    """The cdk.json settings the choice changes, as `name value`."""
    names = (
        ("state_parallelization_factor", "stateParallelizationFactor"),
        ("map_batch_size", "mapBatchSize"),
        ("map_batching_window_seconds", "mapBatchingWindowSeconds"),
        ("reduce_parallelization_factor", "reduceParallelizationFactor"),
        ("reduce_batch_size", "reduceBatchSize"),
        ("reduce_memory_mb", "reduceMemoryMb"),
        ("aggregate_slices", "aggregateSlices"),
        ("archive_parallelization_factor", "archiveParallelizationFactor"),
        ("archive_registry_shards", "archiveRegistryShards"),
    )
    changes = [
        f"{name} {getattr(after, field):g}" for field, name in names if getattr(after, field) != getattr(before, field)
    ]
    if after.stream != before.stream:
        changes.insert(0, f"streamMode provisioned with {after.stream.shard_count} shards")
    return changes
