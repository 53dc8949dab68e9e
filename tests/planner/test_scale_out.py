"""The settings search: the cheapest plan with every stage within 70 % and the hottest item within 500."""

import functools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.inputs import MAX_PARALLELIZATION_FACTOR, ServiceTimes, Settings, StreamCapacity, Workload
from planner.model import OURS, plan_capacity, plan_design, reducers_that_keep_up
from planner.plan import STAGE_BUSY_TARGET, DesignPlan
from planner.prices import load_price_table
from planner.reduce import batches_in_one_transaction_per_group
from planner.scale_out import (
    AUTO_LATENCY_LIMIT_SECONDS,
    AUTO_REDUCE_MEMORY_CANDIDATES,
    EVERY_SETTING_AUTO,
    HOTTEST_ITEM_TARGET,
    REDUCE_BATCH_CANDIDATES,
    SLICE_CANDIDATES,
    STATE_LANES_AUTO,
    Choice,
    _totals_within_targets,
    cheapest_settings,
    describe_choice,
    reduce_batch_candidates,
    settings_for_rate,
    within_targets,
)

PRICES = load_price_table()
TIMES = ServiceTimes()


@functools.cache
def from_the_defaults(rate: float, latency: float) -> Choice | None:
    """`cheapest_settings` from `Settings()` within a p50 of `latency`: several tests ask the same search."""
    return cheapest_settings(Workload(rate=rate), Settings(), TIMES, PRICES, latency_limit_seconds=latency)


@pytest.mark.parametrize(("rate", "latency"), [(50_000, 1.0), (50_000, 4.0), (250_000, 1.0), (250_000, 4.0)])
def test_the_choice_is_within_every_target_and_no_stage_runs_alone(rate: float, latency: float) -> None:
    workload = Workload(rate=rate)
    choice = from_the_defaults(rate, latency)
    assert choice is not None
    plan = choice.plan
    assert not plan.stalls
    path = [timing for timing in plan.timings if timing.on_latency_path]
    assert [timing.stage for timing in path] == ["state", "map", "reduce"]
    assert all(timing.busy <= STAGE_BUSY_TARGET for timing in plan.timings), "the archive included"
    assert all(timing.lanes > 1 for timing in path), "no stage limited to one concurrent execution"
    assert plan.hottest_item_write_units_per_second <= HOTTEST_ITEM_TARGET
    assert plan.latency_p50_seconds <= latency
    assert plan == plan_design(workload, choice.settings, TIMES, PRICES, OURS)


def test_a_looser_latency_bound_never_costs_more() -> None:
    fast, slow = from_the_defaults(50_000, 1.0), from_the_defaults(50_000, 4.0)
    assert fast is not None and slow is not None
    assert slow.plan.monthly_usd <= fast.plan.monthly_usd


def test_fixed_slices_are_kept_and_the_choice_is_within_the_targets_the_flags_fix_misses() -> None:
    """At 50,000 msg/s the flags alone ask for more reducers (`reducers_that_keep_up`, which holds them to
    80 % busy); the search, keeping 16 slices, holds every stage to 70 % and the p50 to 1 s, packs delta
    batches, and costs no more than the flags' fix whenever that is within the same targets."""
    workload = Workload(rate=50_000)
    flags_fix = reducers_that_keep_up(
        workload, Settings(state_parallelization_factor=3, aggregate_slices=16), TIMES, PRICES, OURS
    )
    assert flags_fix is not None
    choice = cheapest_settings(workload, flags_fix, TIMES, PRICES, latency_limit_seconds=1.0, aggregate_slices=16)
    assert choice is not None and choice.settings.aggregate_slices == 16
    assert within_targets(choice.plan, 1.0)
    before = plan_design(workload, flags_fix, TIMES, PRICES, OURS)
    assert choice.plan.monthly_usd < before.monthly_usd or not within_targets(before, 1.0)
    assert (
        choice.plan.aggregate_write_units_per_second / choice.plan.reduce_transactions_per_second
        >= before.aggregate_write_units_per_second / before.reduce_transactions_per_second * 0.5
    )


def test_within_targets_refuses_a_busy_stage_a_single_lane_and_a_slow_plan() -> None:
    plan = plan_design(Workload(rate=50_000), Settings(), TIMES, PRICES, OURS)  # the defaults fall behind
    assert not within_targets(plan, None)
    quiet = plan_design(Workload(rate=100), Settings(), TIMES, PRICES, OURS)
    assert quiet.busiest_stage.busy < STAGE_BUSY_TARGET and not quiet.stalls
    assert not within_targets(quiet, None), "one lane a stage"
    choice = from_the_defaults(50_000, 4.0)
    assert choice is not None and within_targets(choice.plan, 4.0)
    assert not within_targets(choice.plan, choice.plan.latency_p50_seconds / 2)


def test_the_changes_are_named_as_cdk_json_settings() -> None:
    after = replace(
        Settings(),
        stream=StreamCapacity("provisioned", 72),
        reduce_batch_size=50,
        map_batching_window_seconds=2,
    )
    assert describe_choice(Settings(), after) == [
        "streamMode provisioned with 72 shards",
        "mapBatchingWindowSeconds 2",
        "reduceBatchSize 50",
    ]


def test_the_search_raises_the_archive_lanes_when_they_would_be_too_busy() -> None:
    one_lane = Settings(archive_parallelization_factor=1)
    workload = Workload(rate=250_000)
    choice = cheapest_settings(workload, one_lane, TIMES, PRICES, latency_limit_seconds=4.0)
    assert choice is not None and choice.settings.archive_parallelization_factor > 1
    assert f"archiveParallelizationFactor {choice.settings.archive_parallelization_factor}" in describe_choice(
        one_lane, choice.settings
    )
    assert choice.plan.archive_lane_busy <= STAGE_BUSY_TARGET
    busy = plan_design(workload, replace(choice.settings, archive_parallelization_factor=1), TIMES, PRICES, OURS)
    assert busy.archive_lane_busy > STAGE_BUSY_TARGET and not within_targets(busy, None)


def planned_for(
    rate: float, base: Settings | None = None, *, reduce_memory: bool = True, reduce_batch: bool = True
) -> Settings:
    """Every setting cdk.json leaves `auto`, chosen for `rate` (`reduceMemoryMb` and `reduceBatchSize`
    as `base` has them if `reduce_memory` or `reduce_batch` is False)."""
    return settings_for_rate(
        Workload(rate=rate),
        base or Settings(),
        TIMES,
        PRICES,
        auto=replace(EVERY_SETTING_AUTO, reduce_memory=reduce_memory, reduce_batch=reduce_batch),
    )


def test_the_defaults_are_what_the_planner_chooses_for_the_default_rate() -> None:
    """`planner.inputs.Settings` holds cdk.json's `auto` settings as synthesis resolves them at 400 msg/s."""
    assert planned_for(400) == Settings()
    assert (Settings().state_parallelization_factor, Settings().reduce_parallelization_factor) == (2, 1)
    assert (Settings().aggregate_slices, Settings().reduce_memory_mb) == (1, AUTO_REDUCE_MEMORY_CANDIDATES[0])
    assert Settings().reduce_batch_size == REDUCE_BATCH_CANDIDATES[0], "a quiet stream gains nothing from more"


def test_at_50000_the_defaults_keep_every_stage_on_the_way_to_the_totals_within_70_percent() -> None:
    """Issue 23: at cdk.json's defaults declaring 50,000 msg/s, with no map batching window, every stage a
    total waits for is at most 70 % busy, on more than one lane, the hottest item within 500 write units a
    second, p50 <= 1 s."""
    chosen = planned_for(50_000)
    assert chosen.map_batching_window_seconds == 0
    plan = plan_design(Workload(rate=50_000), chosen, TIMES, PRICES, OURS)
    assert within_targets(plan, 1.0), [(timing.stage, timing.busy, timing.lanes) for timing in plan.timings]


def test_at_250000_auto_finds_reducers_slices_and_memory_within_the_targets() -> None:
    """At 250,000 msg/s, with reduce batches of 10 set, no reducer and slice count is within the 70 %
    target at 256 MB; with the memory chosen too, one is, and the slices are what cool the hottest item.
    Faster reducers gather fewer delta batches an invocation, so the cheapest within the targets is not
    the largest memory."""
    workload = Workload(rate=250_000)
    chosen = planned_for(250_000, reduce_batch=False)
    plan = plan_design(workload, chosen, TIMES, PRICES, OURS)
    assert within_targets(plan, 1.0), [(timing.stage, timing.busy, timing.lanes) for timing in plan.timings]
    assert chosen.reduce_memory_mb > AUTO_REDUCE_MEMORY_CANDIDATES[0]
    biggest = plan_design(
        workload, replace(chosen, reduce_memory_mb=AUTO_REDUCE_MEMORY_CANDIDATES[-1]), TIMES, PRICES, OURS
    )
    assert plan.monthly_usd < biggest.monthly_usd
    one_slice = plan_design(workload, replace(chosen, aggregate_slices=1), TIMES, PRICES, OURS)
    assert one_slice.hottest_item_write_units_per_second > HOTTEST_ITEM_TARGET


def test_with_memory_set_and_nothing_within_the_targets_auto_takes_the_largest_candidates() -> None:
    """256 MB and batches of 10 set at 250,000 msg/s, over transactions of 75 ms: no reducer and slice
    count is within 70 % busy, so `auto` takes the largest, which keep up (nothing stalls, so synthesis
    accepts it); the capacity check says the rest."""
    workload = Workload(rate=250_000)
    slow = replace(TIMES, transaction_round_trip_ms=75.0)
    chosen = settings_for_rate(
        workload,
        Settings(),
        slow,
        PRICES,
        auto=replace(EVERY_SETTING_AUTO, reduce_memory=False, reduce_batch=False),
    )
    assert (chosen.reduce_parallelization_factor, chosen.aggregate_slices, chosen.reduce_memory_mb) == (
        MAX_PARALLELIZATION_FACTOR,
        SLICE_CANDIDATES[-1],
        256,
    )
    plan = plan_design(workload, chosen, slow, PRICES, OURS)
    assert plan.timings[2].busy > STAGE_BUSY_TARGET and not plan.stalls


def test_at_50000_auto_batches_fold_more_delta_batches_into_one_write_of_the_totals() -> None:
    """Issue 23's cheap plan: with `reduceBatchSize` left to the planner too, each invocation folds its
    delta batches into one write of the totals per node group, so one reducer a shard is within the
    targets, cheaper than the plan with batches of 10 and than the original design at cdk.json's former
    defaults (batches of 10). Issue 37: the batch size is the most full map batches one transaction per
    node group holds, and the slices cost no writes, so the cheapest count is the one that spreads the
    reducers' transactions most."""
    workload = Workload(rate=50_000)
    chosen = planned_for(50_000)
    plan = plan_design(workload, chosen, TIMES, PRICES, OURS)
    tens = plan_design(workload, planned_for(50_000, reduce_batch=False), TIMES, PRICES, OURS)
    original = plan_capacity(workload, Settings(), prices=PRICES).original
    assert within_targets(plan, AUTO_LATENCY_LIMIT_SECONDS)
    fitting = batches_in_one_transaction_per_group(workload, float(chosen.map_batch_size), markers=True)
    assert (chosen.reduce_batch_size, chosen.aggregate_slices, chosen.reduce_parallelization_factor) == (
        fitting,
        SLICE_CANDIDATES[-1],
        1,
    )
    assert plan.monthly_usd < tens.monthly_usd
    assert plan.monthly_usd < original.monthly_usd


def test_auto_holds_the_aggregate_writes_per_message_flat_from_50000_to_1000000() -> None:
    """Issue 37: an invocation plans all its delta batches together whatever their slices, and `auto`
    takes the batch size one transaction per node group holds, so the AggregateTable's write units per
    message at 1,000,000 msg/s are no more than at 50,000 (they were 11 times as many), and so is every
    cost but the archive's (another model), every stage on the way to the totals within 70 %; and the
    whole plan's $ per million messages, archive included (the issue's target)."""
    per_message = {}
    for rate in (50_000, 250_000, 1_000_000):
        workload = Workload(rate=rate)
        plan = plan_design(workload, planned_for(rate), TIMES, PRICES, OURS)
        assert _totals_within_targets(plan, AUTO_LATENCY_LIMIT_SECONDS, min_lanes=2), rate
        millions = PRICES.seconds_per_month * rate / 1e6
        without_archive = sum(c.monthly_usd for c in plan.components if not c.name.startswith("archive"))
        per_message[rate] = (
            plan.aggregate_write_units_per_second / rate,
            without_archive / millions,
            plan.monthly_usd / millions,
        )
    for rate in (250_000, 1_000_000):
        assert per_message[rate][0] <= per_message[50_000][0], rate
        assert per_message[rate][1] <= per_message[50_000][1], rate
        assert per_message[rate][2] <= per_message[50_000][2], rate


def test_at_250000_a_larger_batch_than_one_transaction_per_group_holds_saves_nothing() -> None:
    """Past the most batches one transaction per node group holds, a group's nodes are written again in
    a second transaction: at 250,000 msg/s one reducer lane a shard (at the most memory `auto` tries)
    gathers more than that, and there batches of 1,000 cost more than batches of that many, and wait
    longer."""
    workload = Workload(rate=250_000)
    one_lane = replace(
        planned_for(250_000), reduce_parallelization_factor=1, reduce_memory_mb=AUTO_REDUCE_MEMORY_CANDIDATES[-1]
    )
    fitting = batches_in_one_transaction_per_group(workload, float(one_lane.map_batch_size), one_lane.markers)
    assert fitting is not None
    capped = plan_design(workload, replace(one_lane, reduce_batch_size=fitting), TIMES, PRICES, OURS)
    larger = plan_design(workload, replace(one_lane, reduce_batch_size=1000), TIMES, PRICES, OURS)
    assert capped.timings[2].batch == fitting < larger.timings[2].batch, "the lane gathers more than fits"
    assert not larger.stalls and larger.monthly_usd > capped.monthly_usd
    assert larger.latency_p50_seconds > capped.latency_p50_seconds


def test_when_no_batch_keeps_the_p50_bound_auto_falls_back_to_batches_of_10() -> None:
    """Map batches of 10,000 that a 5 s window lets fill put every candidate over 1 s at 400 msg/s: the
    batch size is then its former default and the rest is chosen as with it set."""
    windowed = replace(Settings(), map_batch_size=10_000, map_batching_window_seconds=5, reduce_batch_size=500)
    chosen = planned_for(400, windowed)
    assert plan_design(Workload(rate=400), chosen, TIMES, PRICES, OURS).latency_p50_seconds > 1
    assert chosen.reduce_batch_size == REDUCE_BATCH_CANDIDATES[0] == 10
    assert chosen == planned_for(400, replace(windowed, reduce_batch_size=10), reduce_batch=False)


def _reduce_candidates(workload: Workload, base: Settings, batches: tuple[int, ...]) -> list[DesignPlan]:
    """The plan of every slice count, reduce parallelization, reduce memory and batch size `auto` tries."""
    return [
        plan_design(
            workload,
            replace(
                base,
                aggregate_slices=count,
                reduce_parallelization_factor=factor,
                reduce_memory_mb=memory,
                reduce_batch_size=batch,
            ),
            TIMES,
            PRICES,
            OURS,
            suggest=False,
        )
        for batch in batches
        for count in SLICE_CANDIDATES
        for factor in range(1, MAX_PARALLELIZATION_FACTOR + 1)
        for memory in AUTO_REDUCE_MEMORY_CANDIDATES
    ]


@settings(max_examples=40)
@given(rate=st.integers(min_value=1, max_value=300_000), batch=st.sampled_from([None, 10, 50, 100]))
def test_the_choice_is_within_the_targets_whenever_a_candidate_is_and_none_is_cheaper(
    rate: int, batch: int | None
) -> None:
    """`batch` None leaves `reduceBatchSize` to the planner, held to the p50 bound; an integer sets it."""
    base = Settings() if batch is None else replace(Settings(), reduce_batch_size=batch)
    chosen = planned_for(rate, base, reduce_batch=batch is None)
    workload = Workload(rate=rate)
    plan = plan_design(workload, chosen, TIMES, PRICES, OURS)
    state = replace(
        base,
        state_parallelization_factor=chosen.state_parallelization_factor,
        archive_parallelization_factor=chosen.archive_parallelization_factor,
    )
    limit = AUTO_LATENCY_LIMIT_SECONDS if batch is None else None
    batches = reduce_batch_candidates(workload, base) if batch is None else (batch,)
    within = [c for c in _reduce_candidates(workload, state, batches) if within_targets(c, limit, min_lanes=1)]
    if not within and batch is None:
        assert chosen.reduce_batch_size == REDUCE_BATCH_CANDIDATES[0], "no batch keeps the p50: batches of 10"
        batches, limit = REDUCE_BATCH_CANDIDATES[:1], None
        within = [c for c in _reduce_candidates(workload, state, batches) if within_targets(c, None, min_lanes=1)]
    if within:
        assert within_targets(plan, limit, min_lanes=1)
        assert plan.monthly_usd <= min(candidate.monthly_usd for candidate in within)
        assert chosen.reduce_memory_mb in AUTO_REDUCE_MEMORY_CANDIDATES
        assert chosen.reduce_batch_size in batches
    else:
        assert (
            chosen.aggregate_slices,
            chosen.reduce_parallelization_factor,
            chosen.reduce_memory_mb,
            chosen.reduce_batch_size,
        ) == (
            SLICE_CANDIDATES[-1],
            MAX_PARALLELIZATION_FACTOR,
            AUTO_REDUCE_MEMORY_CANDIDATES[-1],
            batches[-1],
        )
    assert (chosen.map_batch_size, chosen.stream) == (base.map_batch_size, base.stream), (
        "only the settings left to the planner change"
    )
    if batch is not None:
        assert chosen.reduce_batch_size == batch


def test_settings_given_explicitly_are_kept() -> None:
    given_settings = replace(Settings(), aggregate_slices=16, reduce_parallelization_factor=3, reduce_memory_mb=768)
    chosen = settings_for_rate(
        Workload(rate=50_000),
        given_settings,
        TIMES,
        PRICES,
        auto=STATE_LANES_AUTO,
    )
    assert (chosen.aggregate_slices, chosen.reduce_parallelization_factor, chosen.reduce_memory_mb) == (16, 3, 768)
    assert chosen.state_parallelization_factor == 3
