"""The cheapest settings that carry a rate with room to spare: what the planner suggests.

`plan_design` says whether given settings keep up; this searches the settings a deployment
can change in `cdk.json` for the cheapest plan (this pipeline's monthly cost) in which

- every stage on the way to the totals uses at most `STAGE_BUSY_TARGET` of what its lanes
  carry (`StageTiming.busy`), runs on at least `MIN_LANES` lanes, and none is flagged as
  unable to keep up; the archive, a side consumer, is held to the same busy target
  (`within_targets`; it shares no key between lanes, so no object is hot);
- the hottest aggregate item takes at most `HOTTEST_ITEM_TARGET` write units a second (half
  of a partition's 1,000: hashes spread slices evenly only on average);
- optionally, the modelled p50 latency stays within a bound.

What it chooses: the state parallelization factor (the least that keeps the state
lanes within the target), map batching (batch size and window: fuller delta batches cost a
window's wait), the reducers (`reduceParallelizationFactor`), `reduceBatchSize` (fewer lanes
gather more delta batches per invocation, which share transactions; a larger batch size lets
them) and `reduceMemoryMb` (CPU scales with memory: at the default 256 MB building a
transaction's actions takes about as long as its round trip), `aggregateSlices` (in
`crt+marker` the slices cost no writes, an invocation's batches being planned together: they
cool the hottest item and spread the reducers' transactions, fewer conflicts; in `crt` each
slice an invocation's batches fall in is its own set of transactions), and
`archiveParallelizationFactor` (more archive lanes when archiving the delta items keeps them too
busy).

Capacity modes (`planner.load_profile`): for spiky or unknown load the tables and the stream keep
the modes the settings give them (on-demand by default); for steady load (`CapacityChoice` `EVERY`)
each table takes the cheaper of on-demand and provisioned with auto scaling at the plan's load, and
the stream the cheaper of on-demand and provisioned with shards filled to 70 %. Every candidate is
ranked by what it costs with its tables in their cheaper modes, so the search weighs, say, more
AggregateTable writes at the provisioned price; both stream modes are searched, since more shards
mean idler state lanes whose records wait longer for Lambda's next read.
From a KPL-aggregating producer the state factor is always 1 (it does not work with Kinesis
aggregation) and the stream is given the shards its one state lane a shard needs instead
(`planner.state.state_lanes_per_shard`), whatever the load profile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Final

from planner.archive import archive_factor_needed
from planner.ingest import kinesis_shards, stream_modes, suggested_provisioned_shards
from planner.inputs import (
    MAX_PARALLELIZATION_FACTOR,
    ServiceTimes,
    Settings,
    StreamCapacity,
    TableCapacity,
    Workload,
)
from planner.load_profile import (
    KEEP,
    CapacityChoice,
    monthly_usd_with_cheaper_tables,
    stream_candidates,
    with_cheaper_tables,
)
from planner.model import OURS, REDUCE_MEMORY_CANDIDATES, plan_design, reduce_memory_candidates
from planner.plan import STAGE_BUSY_TARGET, DesignPlan
from planner.prices import PriceTable
from planner.reduce import batches_in_one_transaction_per_group
from planner.state import state_shards_needed
from planner.tables import PIPELINE_TABLES, TABLE_SETTINGS

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


PLAN_CACHE_SIZE = 1 << 14
"""Plans `_planned` keeps: more than one search's candidates (about 13,000 at 250,000 msg/s), so the
next search over the same candidates finds them; at about 7 KB a plan, at most some 120 MB."""


@lru_cache(maxsize=PLAN_CACHE_SIZE)
def _planned(workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable) -> DesignPlan:
    """Our plan of `settings` without suggestions, memoized by its frozen inputs: the searches plan
    the same candidates again for every latency bound, capacity choice and stream, and ask again
    for the plan of what they chose. The plans are shared, so only the searches read them (they
    never change a plan); `cheapest_settings` returns a plan of its own."""
    return plan_design(workload, settings, times, prices, OURS, suggest=False)


def within_targets(plan: DesignPlan, latency_limit_seconds: float | None, *, min_lanes: int = MIN_LANES) -> bool:
    """Every stage a total waits for within `STAGE_BUSY_TARGET` on at least `min_lanes` lanes,
    the archive's lanes within `STAGE_BUSY_TARGET` too, the
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
    """`within_targets` for the archive: its lanes, none flagged."""
    side = [timing for timing in plan.timings if not timing.on_latency_path]
    if any(flag.blocking and flag.side_stage for flag in plan.flags):
        return False
    return all(timing.busy <= STAGE_BUSY_TARGET for timing in side)


def cheapest_settings(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    latency_limit_seconds: float | None = None,
    aggregate_slices: int | None = None,
    capacity: CapacityChoice = KEEP,
) -> Choice | None:
    """The cheapest settings within the targets (`within_targets`), or None when none is.

    `aggregate_slices` fixes the slice count instead of choosing it (to price a deployment
    whose slices are set: they cannot change over stored totals); `capacity` names the tables
    and whether the stream whose capacity mode the search chooses (the cheaper one for a steady
    load, `planner.load_profile`); the others keep the mode `settings` gives them.
    """
    best: Choice | None = None
    best_rank = (0.0, 0.0)
    for stream in _streams(workload, settings, times, prices, capacity, aggregated_shards=True):
        base = _least_state_parallelization(workload, replace(settings, stream=stream), times, prices)
        for trial in _candidates(workload, base):
            choice = _cheapest_slices(
                workload,
                trial,
                times,
                prices,
                aggregate_slices=aggregate_slices,
                latency_limit_seconds=latency_limit_seconds,
            )
            if choice is None:
                continue
            rank = _rank(choice, prices, capacity)
            if best is None or rank < best_rank:
                best, best_rank = choice, rank
    if best is None:
        return None
    chosen = with_cheaper_tables(best.settings, best.plan, prices, capacity.tables)
    return Choice(chosen, plan_design(workload, chosen, times, prices, OURS))


def _streams(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    capacity: CapacityChoice,
    *,
    aggregated_shards: bool = False,
) -> tuple[StreamCapacity, ...]:
    """The stream as set, or, when its mode is the planner's, on-demand and (if cheaper) provisioned.

    A KPL-aggregating producer's stream, when its mode is the planner's or `aggregated_shards` (the
    cheapest-settings search) asks, is the one its one state lane a shard needs (`_aggregated_stream`):
    an on-demand stream adds shards for writes, not for readers."""
    if workload.aggregated and (capacity.stream or aggregated_shards):
        return (_aggregated_stream(workload, settings, times, prices),)
    return stream_candidates(workload, settings, prices) if capacity.stream else (settings.stream,)


@dataclass(frozen=True)
class AutoSettings:
    """Which of the settings `settings_for_rate` may choose are `auto` in cdk.json (the rest are kept)."""

    state_parallelization: bool = False
    reduce_parallelization: bool = False
    slices: bool = False
    archive_parallelization: bool = False
    reduce_memory: bool = False
    reduce_batch: bool = False


EVERY_SETTING_AUTO: Final = AutoSettings(True, True, True, True, True, True)
"""cdk.json's defaults: the planner chooses every one."""
STATE_LANES_AUTO: Final = AutoSettings(state_parallelization=True)
"""Only `stateParallelizationFactor` left to the planner."""


def settings_for_rate(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    auto: AutoSettings,
    capacity: CapacityChoice = KEEP,
) -> Settings:
    """The settings a deployment leaves to the planner (`auto`), chosen for its rate.

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

    From a KPL-aggregating producer the state factor is always 1: the factor does not work with
    Kinesis aggregation (`planner.state.KINESIS_AGGREGATION_RULE`), so the state lanes are the
    stream's shards, which stay as set; the reducers are then chosen as if the stream had as many
    as those lanes need (the shards change no other stage), and the capacity check asks for them
    when a shard's lane cannot keep up.

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
    windows and the stream stay as set: they change latency and what a deployment pays at rest.

    Capacity modes: `capacity` names the tables, and whether the stream, whose mode is the planner's
    (a steady `loadProfile`; `planner.load_profile`). Each such table takes the cheaper of on-demand
    and provisioned with auto scaling at the chosen plan's load, its minimums carrying that load at
    the target utilisation; the reduce choices are ranked by what they cost with the tables so
    priced. The whole choice is made with the stream on-demand and, when cheaper, provisioned with
    shards filled to 70 %, and the cheaper of the two within the targets is kept.
    """
    choices = [
        _settings_for_rate_and_stream(
            workload,
            replace(settings, stream=stream),
            times,
            prices,
            auto,
            tables=capacity.tables,
        )
        for stream in _streams(workload, settings, times, prices, capacity)
    ]
    return min(choices, key=lambda choice: _auto_rank(workload, choice, times, prices, reduce_batch=auto.reduce_batch))


def _auto_rank(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable, *, reduce_batch: bool
) -> tuple[bool, float, float]:
    """Within the targets first (the p50 bound included when the batch size is `auto`), then cheaper, then faster."""
    plan = _planned(workload, settings, times, prices)
    limit = AUTO_LATENCY_LIMIT_SECONDS if reduce_batch else None
    within = _totals_within_targets(plan, limit, min_lanes=1) and _archive_within_targets(plan)
    return not within, plan.monthly_usd, plan.latency_p50_seconds


def _settings_for_rate_and_stream(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    auto: AutoSettings,
    *,
    tables: frozenset[str],
) -> Settings:
    """`settings_for_rate` with the stream as `settings` has it."""
    if auto.state_parallelization:
        settings = _least_state_parallelization(workload, settings, times, prices)
    # Aggregated: the reducers chosen as if the stream had the shards the state lanes need.
    given_stream, settings = settings.stream, _stream_carrying_the_state(workload, settings, times)
    every_factor = tuple(range(1, MAX_PARALLELIZATION_FACTOR + 1))
    grid = _ReduceGrid(
        slice_counts=SLICE_CANDIDATES if auto.slices else (settings.aggregate_slices,),
        factors=every_factor if auto.reduce_parallelization else (settings.reduce_parallelization_factor,),
        memories=AUTO_REDUCE_MEMORY_CANDIDATES if auto.reduce_memory else (settings.reduce_memory_mb,),
        batches=reduce_batch_candidates(workload, settings) if auto.reduce_batch else (settings.reduce_batch_size,),
    )
    limit = AUTO_LATENCY_LIMIT_SECONDS if auto.reduce_batch else None
    best = _cheapest_reducers(workload, settings, times, prices, grid, latency_limit_seconds=limit, tables=tables)
    if best is None and auto.reduce_batch:
        grid = replace(grid, batches=REDUCE_BATCH_CANDIDATES[:1])
        best = _cheapest_reducers(workload, settings, times, prices, grid, latency_limit_seconds=None, tables=tables)
    if best is None:
        settings = replace(
            settings,
            aggregate_slices=grid.slice_counts[-1],
            reduce_parallelization_factor=grid.factors[-1],
            reduce_memory_mb=grid.memories[-1],
            reduce_batch_size=grid.batches[-1],
        )
        best = Choice(settings, _planned(workload, settings, times, prices))
    # The archive's lanes write S3, not the tables: the tables' load is the reducers' choice.
    settings = with_cheaper_tables(best.settings, best.plan, prices, tables)
    settings = replace(settings, stream=given_stream)
    if auto.archive_parallelization:
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
    tables: frozenset[str],
) -> Choice | None:
    """The cheapest (then faster) of `grid` within the targets for the reducers and the hottest
    item, the p50 within `latency_limit_seconds` if given; the first such in `grid`'s order on a
    tie (smaller batches first); None when none is. Each of `tables` is priced in its cheaper mode."""
    capacity = CapacityChoice(tables=tables)
    best: Choice | None = None
    best_rank = (0.0, 0.0)
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
                    plan = _planned(workload, trial, times, prices)
                    if not _totals_within_targets(plan, latency_limit_seconds, min_lanes=1):
                        continue
                    rank = _rank(Choice(trial, plan), prices, capacity)
                    if best is None or rank < best_rank:
                        best, best_rank = Choice(trial, plan), rank
    return best


def _aggregated_stream(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable
) -> StreamCapacity:
    """A KPL-aggregating producer's stream: the cheaper of on-demand (only if the shards its writes
    fill are enough state lanes) and provisioned with the shards the state lanes, one a shard, need
    (at least `MIN_LANES`, and at least what the writes fill to 70 %)."""
    needed = max(MIN_LANES, state_shards_needed(workload, OURS.state_rate(times, settings)))
    provisioned = StreamCapacity("provisioned", max(needed, suggested_provisioned_shards(workload)))
    modes = stream_modes(workload, replace(settings, stream=provisioned), prices)
    if kinesis_shards(workload) >= needed and modes.cheaper == "on-demand":
        return StreamCapacity()
    return provisioned


def _stream_carrying_the_state(workload: Workload, settings: Settings, times: ServiceTimes) -> Settings:
    """`settings`, with a provisioned stream of the shards a KPL-aggregating producer's state lanes
    need (one a shard) when its own has fewer."""
    if not workload.aggregated:
        return settings
    needed = state_shards_needed(workload, OURS.state_rate(times, settings))
    shards = settings.stream.shard_count if settings.stream.provisioned else kinesis_shards(workload)
    return settings if shards >= needed else replace(settings, stream=StreamCapacity("provisioned", needed))


def _least_state_parallelization(
    workload: Workload, settings: Settings, times: ServiceTimes, prices: PriceTable
) -> Settings:
    """The least state parallelization factor within `STAGE_BUSY_TARGET` (or the largest); 1 from a
    KPL-aggregating producer, whose factor would not work (`planner.state.KINESIS_AGGREGATION_RULE`)."""
    if workload.aggregated:
        return replace(settings, state_parallelization_factor=1)
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
        if within(_planned(workload, trial, times, prices)):
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


def _cheapest_slices(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    aggregate_slices: int | None,
    latency_limit_seconds: float | None,
) -> Choice | None:
    """The slice count within the targets that costs least, or `aggregate_slices` if given; None
    when no count is within them.

    In `crt` each slice an invocation's batches fall in is its own set of transactions, so every
    slice more costs writes: the fewest within the targets is the cheapest. In `crt+marker` an
    invocation's batches are planned together whatever the slices, which cost no writes and only
    spread the reducers' transactions (fewer conflicts resent) and cool the hottest item: the cost
    falls as they grow, so the counts are tried from the most down and the fewest of the cheapest
    kept (fewer items for a reader to sum), stopping at the first that costs more or leaves them."""
    if aggregate_slices is not None:
        return _within_targets_with_slices(
            workload, settings, times, prices, count=aggregate_slices, latency_limit_seconds=latency_limit_seconds
        )
    if not settings.markers:
        for count in SLICE_CANDIDATES:
            choice = _within_targets_with_slices(
                workload, settings, times, prices, count=count, latency_limit_seconds=latency_limit_seconds
            )
            if choice is not None:
                return choice
        return None
    best: Choice | None = None
    for count in reversed(SLICE_CANDIDATES):
        choice = _within_targets_with_slices(
            workload, settings, times, prices, count=count, latency_limit_seconds=latency_limit_seconds
        )
        if choice is None and best is None:
            continue
        if choice is None or (best is not None and choice.plan.monthly_usd > best.plan.monthly_usd):
            break
        best = choice
    return best


def _within_targets_with_slices(
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    *,
    count: int,
    latency_limit_seconds: float | None,
) -> Choice | None:
    """`settings` with `count` slices and the archive lanes it needs, if that is within the targets."""
    trial = replace(settings, aggregate_slices=count)
    plan = _planned(workload, trial, times, prices)
    trial, plan = _archive_within_target(workload, trial, plan, times, prices)
    return Choice(trial, plan) if within_targets(plan, latency_limit_seconds) else None


def _archive_within_target(
    workload: Workload, settings: Settings, plan: DesignPlan, times: ServiceTimes, prices: PriceTable
) -> tuple[Settings, DesignPlan]:
    """Raise `archiveParallelizationFactor` (lanes archiving delta items) until the archive is within
    `STAGE_BUSY_TARGET`, or it reaches its ceiling. It costs no latency, and no requests: an
    invocation's two PUTs are the same however many lanes share the items."""
    factor = settings.archive_parallelization_factor
    if plan.archive_lane_busy > STAGE_BUSY_TARGET and factor < MAX_PARALLELIZATION_FACTOR:
        settings = replace(
            settings,
            archive_parallelization_factor=max(factor + 1, archive_factor_needed(plan.archive_lane_busy, settings)),
        )
        plan = _planned(workload, settings, times, prices)
    return settings, plan


def _rank(choice: Choice, prices: PriceTable, capacity: CapacityChoice) -> tuple[float, float]:
    """Cheaper first (each of `capacity`'s tables in its cheaper mode), then faster."""
    cost = monthly_usd_with_cheaper_tables(choice.plan, choice.settings, prices, capacity.tables)
    return cost, choice.plan.latency_p50_seconds


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
    )
    changes = [
        f"{name} {getattr(after, field):g}" for field, name in names if getattr(after, field) != getattr(before, field)
    ]
    for table in reversed(PIPELINE_TABLES):
        capacity = after.table_capacity(table)
        if capacity != before.table_capacity(table):
            changes.insert(0, f"{TABLE_SETTINGS[table]} {describe_table_capacity(capacity)}")
    if after.stream != before.stream:
        changes.insert(0, f"streamMode {describe_stream_capacity(after.stream)}")
    return changes


def describe_stream_capacity(stream: StreamCapacity) -> str:
    """The stream's capacity as the plan's lines name it."""
    if not stream.provisioned:
        return "on-demand"
    return f"provisioned with {stream.shard_count:,} shard{'s' if stream.shard_count > 1 else ''}"


def describe_table_capacity(capacity: TableCapacity) -> str:
    """A table's capacity as the plan's lines name it: `on-demand`, or provisioned with its auto scaling."""
    if not capacity.provisioned:
        return "on-demand"
    return (
        f"provisioned, {capacity.min_write_capacity:,}-{capacity.max_write_capacity:,} WCU and "
        f"{capacity.min_read_capacity:,}-{capacity.max_read_capacity:,} RCU at "
        f"{capacity.target_utilization_percent} %"
    )
