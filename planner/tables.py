"""The tables: DynamoDB write and read units priced in either capacity mode, and the quotas and maxima they meet."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from planner.inputs import CapacityMode, Settings, TableCapacity
from planner.plan import Component, DesignPlan, Flag
from planner.prices import SECONDS_PER_HOUR, PriceTable

TABLE_WRITE_QUOTA_PER_SECOND = 40_000  # default on-demand per-table write request unit quota (adjustable)
TABLE_READ_QUOTA_PER_SECOND = 40_000  # default on-demand per-table read request unit quota (adjustable)
ACCOUNT_PROVISIONED_QUOTA = 80_000
"""The default account-level quota on provisioned capacity in a region, for writes and for reads alike: the
sum over every provisioned table of the account (adjustable; DynamoDB's "Service quotas" page)."""
PIPELINE_TABLES = ("StateTable", "DeltaTable", "AggregateTable")
"""The tables whose capacity mode is a setting (the quarantine is always on-demand: it is
written only for bad input, a load no one can plan)."""
READ_TABLES = ("DeltaTable",)
"""The tables the pipeline reads on its steady path: the map's coverage Query. (Stream
reads by Lambda are not billed; reduce reads markers only to resolve a refused token.)"""
TABLE_SETTINGS = {
    "StateTable": "stateTableCapacity",
    "DeltaTable": "deltaTableCapacity",
    "AggregateTable": "aggregateTableCapacity",
}
"""Each pipeline table and the cdk.json setting of its capacity mode."""


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


def table_monthly_usd(plan: DesignPlan, table: str, capacity: TableCapacity, prices: PriceTable) -> float:
    """One of `PIPELINE_TABLES` in `capacity`'s mode: its writes and reads, as the plan's lines add them up."""
    writes, reads = plan.write_units_per_second(table), plan.read_units_per_second(table)
    return table_writes_monthly_usd(writes, capacity, prices) + table_reads_monthly_usd(reads, capacity, prices)


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


def table_flags(plan: DesignPlan, settings: Settings) -> list[Flag]:
    """A provisioned table whose maximum is below its load, and any table over the default quota.

    A provisioned table cannot serve more than its maximum write (or read) capacity: beyond
    it requests are throttled and the stage that makes them falls behind. The per-table
    quotas (40,000 write and 40,000 read units a second, on-demand request units or
    provisioned capacity) are adjustable: those flags ask for an increase rather than
    another setting; so is the account's quota on all its provisioned tables together (80,000
    write and 80,000 read capacity units), which this stack's provisioned tables alone may pass.
    """
    flags = []
    held = {"write": 0.0, "read": 0.0}
    for table in PIPELINE_TABLES:
        capacity = settings.table_capacity(table)
        writes, reads = plan.write_units_per_second(table), plan.read_units_per_second(table)
        flags += throughput_flags(table, "write", writes, capacity.max_write_capacity, capacity)
        flags += throughput_flags(table, "read", reads, capacity.max_read_capacity, capacity)
        if capacity.provisioned:
            held["write"] += provisioned_write_capacity(writes, capacity)
            held["read"] += provisioned_read_capacity(reads, capacity)
    for kind, units in held.items():
        if units > ACCOUNT_PROVISIONED_QUOTA:
            flags.append(
                Flag(
                    f"the provisioned tables hold {units:,.0f} {kind} capacity units, over the default account "
                    f"quota of {ACCOUNT_PROVISIONED_QUOTA:,} in a region (every provisioned table's together)",
                    f"request an account-level {kind} capacity quota increase before deploying",
                    blocking=False,
                )
            )
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
                f"request a table-level {kind} throughput quota increase before going live"
                + (" (a provisioned table above it is refused at deploy)" if capacity.provisioned else ""),
                blocking=False,
            )
        )
    return flags


def table_components(plan: DesignPlan, settings: Settings, prices: PriceTable) -> list[Component]:
    """Each table's writes, then each read table's reads, in its configured capacity mode."""
    return [
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
