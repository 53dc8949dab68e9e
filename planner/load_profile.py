"""Capacity modes for a load profile: on-demand for spiky or unknown load, the cheaper mode for steady load.

A deployment declares its rate (`targetMessagesPerSecond`) and how its load behaves
(`loadProfile`), and the planner chooses every table's and the stream's capacity mode from those:

- **spiky** (the default, also for unknown load and a trial): everything on-demand. Capacity
  follows any burst at once and nothing is billed at rest but the stream-hour.
- **steady**: each of `PIPELINE_TABLES` in the cheaper of on-demand and provisioned with auto
  scaling, priced at the plan's load (`cheaper_table_capacity`), and the stream in the cheaper of
  on-demand and provisioned with the shards that fill each to 70 % (`cheaper_stream`). A
  provisioned table's minimums hold the declared rate's load at its target utilisation, so auto
  scaling never scales in below what the declared rate needs (it would throttle the load's return
  for minutes); its maximums leave `MAXIMUM_HEADROOM` times that for growth. A provisioned stream
  has a fixed shard count: a rate above what its shards take is throttled at the producer.

Provisioned capacity is billed whether used or not, so a steady plan costs what it costs at the
declared rate even when the load is lower: `steady_break_even_share` finds the share of the declared
rate below which the spiky plan is the cheaper one.

Pure (the standard library), like every module of the planner.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, Literal

from planner.ingest import stream_modes, suggested_provisioned_shards
from planner.inputs import Settings, StreamCapacity, TableCapacity, Workload
from planner.plan import DesignPlan
from planner.prices import PriceTable
from planner.tables import PIPELINE_TABLES, table_monthly_usd

LoadProfile = Literal["spiky", "steady"]
LOAD_PROFILES: Final[tuple[LoadProfile, ...]] = ("spiky", "steady")
"""`loadProfile`'s values, the default first."""

MAXIMUM_HEADROOM: Final = 2.0
"""A steady plan's provisioned maximum, as a multiple of the minimum the declared rate needs (or the
table's default maximum if that is larger): room for the rate to double before writes are throttled
at the maximum. A maximum costs nothing; the capacity auto scaling holds does."""


@dataclass(frozen=True)
class CapacityChoice:
    """The capacity modes the planner chooses rather than keeps as set: the tables', and the stream's."""

    tables: frozenset[str] = frozenset()
    stream: bool = False


KEEP: Final = CapacityChoice()
"""Every table and the stream as the settings have them (spiky or unknown load: on-demand by default)."""
EVERY: Final = CapacityChoice(tables=frozenset(PIPELINE_TABLES), stream=True)
"""Every table and the stream in its cheaper mode (steady load)."""


def capacity_choice(profile: LoadProfile) -> CapacityChoice:
    """What a load profile leaves to the planner when every capacity setting is left to it."""
    return EVERY if profile == "steady" else KEEP


def _units_at_target(units_per_second: float, target_percent: int) -> int:
    """Capacity units that carry `units_per_second` at the target utilisation (at least 1)."""
    # Rounded first, so that a load of exactly N x target does not round up to N + 1 by a float's last bit.
    return max(1, math.ceil(round(units_per_second * 100 / target_percent, 6)))


def steady_table_capacity(
    write_units_per_second: float, read_units_per_second: float, base: TableCapacity
) -> TableCapacity:
    """Provisioned with auto scaling at `base`'s target utilisation: minimums that carry the load at
    the target, maximums `MAXIMUM_HEADROOM` times them (or `base`'s, if larger)."""
    target = base.target_utilization_percent
    min_write = _units_at_target(write_units_per_second, target)
    min_read = _units_at_target(read_units_per_second, target)
    return TableCapacity(
        mode="provisioned",
        min_write_capacity=min_write,
        max_write_capacity=max(base.max_write_capacity, math.ceil(min_write * MAXIMUM_HEADROOM)),
        min_read_capacity=min_read,
        max_read_capacity=max(base.max_read_capacity, math.ceil(min_read * MAXIMUM_HEADROOM)),
        target_utilization_percent=target,
    )


def table_capacities(plan: DesignPlan, table: str, base: TableCapacity) -> tuple[TableCapacity, TableCapacity]:
    """(on-demand, provisioned as a steady plan sizes it) for one table at the plan's load."""
    provisioned = steady_table_capacity(plan.write_units_per_second(table), plan.read_units_per_second(table), base)
    return replace(base, mode="on-demand"), provisioned


def cheaper_table_capacity(plan: DesignPlan, table: str, base: TableCapacity, prices: PriceTable) -> TableCapacity:
    """The cheaper of on-demand and provisioned (`steady_table_capacity`) at the plan's load; on-demand on a tie."""
    on_demand, provisioned = table_capacities(plan, table, base)
    if table_monthly_usd(plan, table, provisioned, prices) < table_monthly_usd(plan, table, on_demand, prices):
        return provisioned
    return on_demand


def with_table_capacity(settings: Settings, table: str, capacity: TableCapacity) -> Settings:
    """`settings` with one of `PIPELINE_TABLES` in `capacity`."""
    if table == "StateTable":
        return replace(settings, state_table=capacity)
    if table == "DeltaTable":
        return replace(settings, delta_table=capacity)
    if table == "AggregateTable":
        return replace(settings, aggregate_table=capacity)
    raise KeyError(table)


def with_cheaper_tables(settings: Settings, plan: DesignPlan, prices: PriceTable, tables: frozenset[str]) -> Settings:
    """`settings` with each of `tables` in its cheaper mode at `plan`'s load (the others as set)."""
    for table in PIPELINE_TABLES:
        if table in tables:
            cheaper = cheaper_table_capacity(plan, table, settings.table_capacity(table), prices)
            settings = with_table_capacity(settings, table, cheaper)
    return settings


def monthly_usd_with_cheaper_tables(
    plan: DesignPlan, settings: Settings, prices: PriceTable, tables: frozenset[str]
) -> float:
    """What `plan` (made with `settings`) costs a month once each of `tables` is in its cheaper mode:
    its total, less each table's cost as set, plus its cost in the cheaper mode. A table's mode changes
    nothing else in a plan but its flags (a provisioned maximum below the load: never, as sized)."""
    saved = 0.0
    for table in PIPELINE_TABLES:
        if table in tables:
            as_set = settings.table_capacity(table)
            cheaper = cheaper_table_capacity(plan, table, as_set, prices)
            saved += table_monthly_usd(plan, table, as_set, prices) - table_monthly_usd(plan, table, cheaper, prices)
    return plan.monthly_usd - saved


def stream_candidates(workload: Workload, settings: Settings, prices: PriceTable) -> tuple[StreamCapacity, ...]:
    """The stream modes a steady plan tries: on-demand, and provisioned with the suggested shards when that
    costs less. Both are tried: more shards mean more state lanes, each idler, whose records wait longer
    for Lambda's next read (up to its one-second poll), so the cheaper stream can cost latency."""
    cheaper = cheaper_stream(workload, settings, prices)
    return (StreamCapacity(), cheaper) if cheaper.provisioned else (StreamCapacity(),)


def cheaper_stream(workload: Workload, settings: Settings, prices: PriceTable) -> StreamCapacity:
    """Provisioned with the shards that fill each to 70 % (`suggested_provisioned_shards`) when that costs
    less than on-demand at the workload's rate, else on-demand."""
    modes = stream_modes(workload, replace(settings, stream=StreamCapacity()), prices)
    if modes.cheaper == "provisioned":
        return StreamCapacity("provisioned", suggested_provisioned_shards(workload))
    return StreamCapacity()


def steady_break_even_share(
    monthly_usd: Callable[[Settings, float], float], spiky: Settings, steady: Settings, *, rate: float
) -> float:
    """The share of the declared `rate` (0 to 1) above which the stack `steady` describes costs less a month
    than the one `spiky` describes, both deployed for `rate` and run at a lower one; `monthly_usd(settings,
    rate)` prices a stack's settings at a rate. 0 when steady is cheaper even idle, 1 when it never is
    below the declared rate. Provisioned capacity is billed as held (the minimums, sized for `rate`);
    on-demand by what the lower rate uses. Found by bisection: the difference grows with the rate."""

    def steady_cheaper(share: float) -> bool:
        load = max(rate * share, 1e-3)
        return monthly_usd(steady, load) < monthly_usd(spiky, load)

    if not steady_cheaper(1.0):
        return 1.0
    if steady_cheaper(0.0):
        return 0.0
    low, high = 0.0, 1.0
    for _ in range(20):
        middle = (low + high) / 2
        if steady_cheaper(middle):
            high = middle
        else:
            low = middle
    return high
