"""The reduce stage: DeltaTable stream -> reducers -> sliced totals in the AggregateTable.

Its transactions, the reducers that run them and how busy they are, the slices, and the
hottest aggregate item. The advice when reducers cannot keep up searches whole plans, so it
lives with `planner.model.plan_design`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from aggregation.transactions import (
    MARKER_ACTIONS_PER_UNIT,
    MAX_NODES_PER_UNIT,
    MAX_TRANSACTION_ACTIONS,
    NODE_GROUPS,
    STATS_ACTIONS,
)
from planner.inputs import (
    PER_ITEM_WRITE_UNITS_PER_SECOND,
    PURE_FUNCTION_CACHE_SIZE,
    STREAM_POLLS_PER_SECOND,
    Settings,
    Workload,
    cpu_slowdown,
    distinct_nodes,
    lambda_monthly_usd,
    steady_batch,
)
from planner.plan import Component, DesignPlan, Flag, PlanInputs, ReducePacking, StageTiming

BUSY_LIMIT = 0.8  # a reducer busier than this falls behind on any burst
MAX_REDUCE_BATCH = 10_000
"""The largest `BatchSize` of a DynamoDB stream event source mapping."""
MAX_TRANSACTION_ATTEMPTS = 11
"""The reduce handler's tries of one transaction: the first and `CONFLICT_ATTEMPTS` (10) resends."""


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
    slices_per_lane: float  # the slices a lane's StateTable stream shards hash to (`crt`)
    slices_in_use: float  # the slices transactions write, over every lane
    by_transaction: bool = False
    """`crt+marker`: every delta batch of an invocation is planned together, and each transaction
    writes the slice its token hashes to (`aggregation.transactions.transaction_slice`); `crt`: a
    delta batch adds to the slice of its StateTable shard, each slice planned apart."""

    def planned_apart(self, batch: float) -> float:
        """The sets of delta batches an invocation of `batch` plans apart, each in its own transactions."""
        return 1.0 if self.by_transaction else expected_distinct(self.slices_per_lane, batch)

    def slices_written(self, batch: float, transactions: float) -> float:
        """The slices an invocation of `batch` delta batches, in `transactions` transactions, writes."""
        if self.by_transaction:
            return expected_distinct(self.slices_in_use, transactions)
        return self.planned_apart(batch)


UNSLICED = ReduceSlicing(delta_stream_shards=1, lanes=1, slices_per_lane=1.0, slices_in_use=1.0)
"""The original's reduce: one instance, one item per node."""


def reduce_slicing(settings: Settings, state_stream_shards: int, delta_write_units_per_second: float) -> ReduceSlicing:
    """Reducers, and the slices their transactions write, with hashes assumed even.

    The DeltaTable stream has about one shard per 1,000 WCU/s partition (as the StateTable's);
    Lambda runs `reduceParallelizationFactor` lanes per shard. In `crt+marker` an invocation
    plans all its delta batches together and each transaction writes the slice its token
    hashes to, so every slice is in use and the batches never split by slice. In `crt` a delta
    batch adds to `slice_of(StreamShard, aggregateSlices)`: a lane carries its share of the
    StateTable stream shards, an invocation's batches fall in as many slices as they hit, each
    planned apart, and the slices in use are those the StateTable shards hash to. The hottest
    slice takes its share of the transactions over the slices in use: an even spread.
    """
    delta_shards = max(1, math.ceil(delta_write_units_per_second / PER_ITEM_WRITE_UNITS_PER_SECOND))
    lanes = delta_shards * settings.reduce_parallelization_factor
    slices = settings.aggregate_slices
    if settings.markers:
        return ReduceSlicing(
            delta_stream_shards=delta_shards,
            lanes=lanes,
            slices_per_lane=float(slices),
            slices_in_use=float(slices),
            by_transaction=True,
        )
    return ReduceSlicing(
        delta_stream_shards=delta_shards,
        lanes=lanes,
        slices_per_lane=expected_distinct(slices, state_stream_shards / lanes),
        slices_in_use=expected_distinct(slices, state_stream_shards),
    )


@dataclass(frozen=True)
class ReduceLoad:
    """The reduce stage's work when each invocation takes `batch` delta batches (`reduce_load`)."""

    batch: float
    slices_per_invocation: float
    transactions_per_second: float  # committed
    conflicts_per_second: float  # attempts cancelled by a concurrent reducer's transaction, and resent
    actions_per_transaction: float
    executions: float  # reducers busy at once, on average (seconds of work a second)
    invocations_per_second: float
    flags: tuple[Flag, ...]

    @property
    def invocation_seconds(self) -> float:
        """How long one invocation runs: its transactions one after the other, and its CPU."""
        return self.executions / self.invocations_per_second


def reduce_load(
    plan: DesignPlan,
    slicing: ReduceSlicing,
    batch: float,
    given: PlanInputs,
) -> ReduceLoad:
    """Transactions, actions and reducer time when invocations take `batch` delta batches each."""
    batches_together = batch / slicing.planned_apart(batch)
    packing = given.design.reduce_packing(given.workload, plan.effective_map_batch, batches_together, given.settings)
    transactions = plan.delta_batches_per_second * packing.transactions_per_delta_batch
    slices_per_invocation = slicing.slices_written(batch, packing.transactions_per_delta_batch * batch)
    attempts = transaction_attempts(slicing, transactions, given.times.transaction_round_trip_ms / 1e3)
    slowdown = cpu_slowdown(given.settings.reduce_memory_mb)
    changes_per_second = given.workload.rate * given.workload.applied_share
    executions = (
        transactions * attempts * given.times.transaction_round_trip_ms / 1e3
        + transactions
        * attempts
        * packing.actions_per_transaction
        * given.times.reduce_cpu_us_per_action
        / 1e6
        * slowdown
        + changes_per_second * given.times.reduce_cpu_us_per_message / 1e6 * slowdown
    )
    return ReduceLoad(
        batch=batch,
        slices_per_invocation=slices_per_invocation,
        transactions_per_second=transactions,
        conflicts_per_second=transactions * (attempts - 1),
        actions_per_transaction=packing.actions_per_transaction,
        executions=executions,
        invocations_per_second=plan.delta_batches_per_second / batch,
        flags=packing.flags,
    )


def transaction_attempts(slicing: ReduceSlicing, transactions_per_second: float, round_trip_seconds: float) -> float:
    """Attempts per committed transaction when reducers of different lanes write one slice at once.

    Every transaction of a slice writes its `#stats` item, so two that overlap conflict and one
    is cancelled (`TransactionConflict`) and resent, up to `MAX_TRANSACTION_ATTEMPTS` tries
    (beyond them the invocation fails and Lambda retries the batch: the reducers fall behind).
    Another lane's transaction overlaps one of ours when it starts within half a round trip
    either side (a transaction holds its items for about half its round trip; the rest is the
    network, an assumption: AWS does not publish it). With those arrivals Poisson, a try
    succeeds with probability exp(-rate x round trip), so the expected tries are its inverse.
    One lane's transactions run one after the other and never conflict. In `crt+marker` each
    transaction picks its slice by its token, so the others' transactions in ours are the
    other lanes' share spread over every slice; in `crt` a slice is written by the lanes whose
    StateTable shards hash to it.
    """
    if slicing.by_transaction:
        others = transactions_per_second * (1.0 - 1.0 / slicing.lanes) / slicing.slices_in_use
    else:
        lanes_per_slice = max(1.0, slicing.lanes * slicing.slices_per_lane / slicing.slices_in_use)
        others = transactions_per_second / slicing.slices_in_use * (lanes_per_slice - 1) / lanes_per_slice
    return min(float(MAX_TRANSACTION_ATTEMPTS), math.exp(min(others * round_trip_seconds, 50.0)))


@lru_cache(maxsize=PURE_FUNCTION_CACHE_SIZE, typed=True)
def transactions_per_delta_batch(
    workload: Workload, changes: float, batches_per_invocation: float, markers: bool
) -> tuple[float, float]:
    """(transactions per delta batch, actions per transaction) of our reduce packing.

    The reduce stage (`aggregation.transactions`) splits nodes into `NODE_GROUPS` fixed
    groups and plans per group across every delta batch it plans together: each node is
    written once per transaction that holds it, with one marker per (batch, group) unit and
    the `#stats` update per transaction. Whole groups share a transaction while they fit in 100
    actions. A larger group is packed greedily, unit by unit: each full transaction holds as
    many units as fit beside the group nodes they touch, and writes those nodes again, so past
    a transaction's worth of batches a node is written once per transaction, not once per
    invocation (`_group_split`). `batches_per_invocation` is how many are planned together:
    an invocation's (`crt+marker`) or one slice's of it (`crt`, `reduce_slicing`), a mean, so
    not whole.

    Memoized like `distinct_nodes`: every plan asks it at each step of the steady-batch fixed
    point, and the searches plan the same reducers again for every slice count and bound.
    """
    marker_actions = MARKER_ACTIONS_PER_UNIT if markers else 0
    room = MAX_TRANSACTION_ACTIONS - STATS_ACTIONS

    def group_nodes(batches: float) -> float:
        return distinct_nodes(workload, changes * batches) / NODE_GROUPS

    group_actions = group_nodes(batches_per_invocation) + batches_per_invocation * marker_actions
    if group_actions <= room:
        groups_per_transaction = min(NODE_GROUPS, int(room // group_actions))
        transactions = math.ceil(NODE_GROUPS / groups_per_transaction)
        actions = NODE_GROUPS * group_actions + transactions * STATS_ACTIONS
        return transactions / batches_per_invocation, actions / transactions
    group_transactions, split_actions = _group_split(group_nodes, marker_actions, batches_per_invocation, room)
    split_transactions = NODE_GROUPS * group_transactions
    split_total = NODE_GROUPS * split_actions + split_transactions * STATS_ACTIONS
    return split_transactions / batches_per_invocation, split_total / split_transactions


def _group_split(
    group_nodes: Callable[[float], float], marker_actions: int, batches: float, room: int
) -> tuple[float, float]:
    """(transactions, actions without `#stats`) of one node group too large for one transaction,
    packed greedily as `aggregation.transactions` packs it.

    Each full transaction holds the most units whose group nodes and markers fit in `room`; the
    batches left over take one more, smaller, transaction. A unit larger than a transaction (a
    hierarchy whose group part of one batch exceeds it) is split into parts of
    `MAX_NODES_PER_UNIT` nodes, each a unit with its marker and a transaction of its own.
    """

    def actions_of(units: float) -> float:
        return group_nodes(units) + units * marker_actions

    if actions_of(1) > room:
        parts = math.ceil(group_nodes(1) / MAX_NODES_PER_UNIT)
        return batches * parts, batches * (group_nodes(1) + parts * marker_actions)
    per_transaction = 1
    while per_transaction < batches and actions_of(per_transaction + 1) <= room:
        per_transaction += 1
    full = math.floor(batches / per_transaction)
    rest = batches - full * per_transaction
    if rest < 1e-9:
        return float(full), full * actions_of(per_transaction)
    return float(full + 1), full * actions_of(per_transaction) + actions_of(rest)


def batches_in_one_transaction_per_group(workload: Workload, changes: float, markers: bool) -> int | None:
    """The most delta batches of `changes` state changes that one transaction per node group holds
    (each group's nodes, a marker per batch and `#stats` within `MAX_TRANSACTION_ACTIONS`), or None
    when not even one batch's group fits, or without markers (`crt`: a group's actions stop growing
    once its nodes are all touched, so no batch count makes it take another transaction).

    Past it a group takes a second transaction that writes its nodes again for the few batches
    left over (`transactions_per_delta_batch`), so an invocation of this many batches writes the
    fewest units per batch until several transactions' worth: the reduce batch size `auto` tries
    beside `planner.scale_out.REDUCE_BATCH_CANDIDATES`.
    """
    if not markers:
        return None
    room = MAX_TRANSACTION_ACTIONS - STATS_ACTIONS

    def fits(batches: int) -> bool:
        return distinct_nodes(workload, changes * batches) / NODE_GROUPS + batches * MARKER_ACTIONS_PER_UNIT <= room

    if not fits(1):
        return None
    batches = 1
    while batches < MAX_REDUCE_BATCH and fits(batches + 1):
        batches += 1
    return batches


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

    Its totals are not sliced: `batches_together` is the whole reduce invocation.

    A union over the action limit does not fit one transaction: the original would have to
    split it, losing the single token that made the batch idempotent.
    """
    union = distinct_nodes(workload, changes * batches_together)
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
    return ReducePacking(transactions_per_batch / batches_together, union / transactions_per_batch, flags)


def plan_reduce(
    plan: DesignPlan,
    given: PlanInputs,
) -> Component:
    """Reducers, slices, transactions and AggregateTable writes into `plan`; its line of the plan."""
    # Ours, one reducer per DeltaTable stream shard and lane over sliced totals; the
    # original, one instance over one item per node.
    slicing = UNSLICED
    if given.design.scales_out_reduce:
        slicing = reduce_slicing(given.settings, plan.state_stream_shards, plan.delta_write_units_per_second)
    plan.delta_stream_shards, plan.reduce_lanes = slicing.delta_stream_shards, slicing.lanes
    plan.slices_in_use = slicing.slices_in_use

    def load(batch: float) -> ReduceLoad:
        return reduce_load(plan, slicing, batch, given)

    # How busy the reducers would be with full batches: what they can carry. In steady state
    # an invocation takes what its lane gathered (`steady_batch`): cost and latency
    # follow from that batch.
    plan.reduce_busy_fraction = load(given.settings.reduce_batch_size).executions / slicing.lanes
    per_lane = plan.delta_batches_per_second / slicing.lanes
    poll_seconds = 1.0 / STREAM_POLLS_PER_SECOND
    steady = load(
        steady_batch(given.settings.reduce_batch_size, per_lane, poll_seconds, lambda b: load(b).invocation_seconds)
    )
    plan.effective_reduce_batch = steady.batch
    plan.timings.append(
        StageTiming(
            "reduce",
            lanes=slicing.lanes,
            batch=steady.batch,
            interval_seconds=steady.batch / per_lane,
            invocation_seconds=steady.invocation_seconds,
            busy=plan.reduce_busy_fraction,
        )
    )
    plan.slices_per_invocation = steady.slices_per_invocation
    plan.reduce_transactions_per_second = steady.transactions_per_second
    plan.reduce_conflicts_per_second = steady.conflicts_per_second
    plan.actions_per_transaction = steady.actions_per_transaction
    plan.reduce_executions = steady.executions
    plan.flags.extend(steady.flags)
    # Billed per attempt: a cancelled transaction is counted as if it wrote (the pricing pages
    # do not say otherwise), which errs on the dear side.
    attempted = plan.reduce_transactions_per_second + plan.reduce_conflicts_per_second
    plan.aggregate_write_units_per_second = attempted * plan.actions_per_transaction * 2
    # The hottest items (a slice's `#stats`, and the root nodes every batch touches) take one
    # transactional write (2 units) per transaction of their slice.
    plan.hottest_item_write_units_per_second = plan.reduce_transactions_per_second * 2 / plan.slices_in_use
    return Component(
        "reduce λ",
        f"{plan.reduce_lanes} reducer{'s' if plan.reduce_lanes > 1 else ''}, {plan.reduce_busy_fraction:.0%} busy"
        + (" each" if plan.reduce_lanes > 1 else ""),
        lambda_monthly_usd(
            min(float(plan.reduce_lanes), plan.reduce_executions),
            given.settings.reduce_memory_mb,
            steady.invocations_per_second,
            given.prices,
        ),
    )
