"""The reduce stage: DeltaTable stream -> reducers -> sliced totals in the AggregateTable.

Its transactions, the reducers that run them and how busy they are, the slices, and the
hottest aggregate item. The advice when reducers cannot keep up searches whole plans, so it
lives with `planner.model.plan_design`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aggregation.transactions import MARKER_ACTIONS_PER_UNIT, MAX_TRANSACTION_ACTIONS, NODE_GROUPS, STATS_ACTIONS
from planner.inputs import (
    PER_ITEM_WRITE_UNITS_PER_SECOND,
    ServiceTimes,
    Settings,
    Workload,
    cpu_slowdown,
    distinct_nodes,
    lambda_monthly_usd,
)
from planner.plan import Component, Design, DesignPlan, Flag, ReducePacking
from planner.prices import PriceTable

BUSY_LIMIT = 0.8  # a reducer busier than this falls behind on any burst


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


def plan_reduce(
    plan: DesignPlan,
    *,
    workload: Workload,
    settings: Settings,
    times: ServiceTimes,
    prices: PriceTable,
    design: Design,
) -> Component:
    """Reducers, slices, transactions and AggregateTable writes into `plan`; its line of the plan."""
    changes_per_second = workload.rate * workload.applied_share
    # Ours, one reducer per DeltaTable stream shard and lane over sliced totals; the
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
    return Component(
        "reduce λ",
        f"{plan.reduce_lanes} reducer{'s' if plan.reduce_lanes > 1 else ''}, {plan.reduce_busy_fraction:.0%} busy"
        + (" each" if plan.reduce_lanes > 1 else ""),
        lambda_monthly_usd(
            min(float(plan.reduce_lanes), plan.reduce_executions),
            settings.reduce_memory_mb,
            reduce_invocations,
            prices,
        ),
    )
