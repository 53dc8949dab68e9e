"""What a load test costs on AWS, and what a deployed stack costs while it sits idle.

Trying the pipeline should cost cents: deploy, run one `python -m producer send`, `cdk destroy`.
Two figures say whether it does, both from the planner's dated list prices (`planner.prices`):

- `load_test_cost`: a test of `rate` messages a second for `seconds`. The pipeline's part is the
  capacity model's monthly cost at that rate (`plan_capacity`, this design), for the test's
  share of a month: it includes the on-demand stream's hours for that time. Added here, what
  the model leaves out because it does not grow with the rate: the functions' CloudWatch logs
  (a line and an EMF document per invocation, and one latency value per applied message: sizes
  measured in the local runner's log), the custom metrics the functions emit (billed by the
  hour, a metric-month each) and the producer's `GetMetricData` reads while it watches (the
  archive is a stage of the model: `planner/archive.py`).
  The pipeline keeps working for as long as it takes to drain, which costs the same per message.
- `idle_costs`: a month of a deployed stack that receives nothing: the on-demand stream's
  hours, the alarms, the dashboard and a customer managed key if there is one. Lambda, the
  on-demand tables and the stream consumers cost nothing without traffic; stored data (tables,
  the archive bucket, logs) costs cents a month at a trial's size and is left out.

Standard library and the planner's public functions only, like the rest of the planner; its command
line is the one every operator tool shares (`toolkit.cli`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from planner.inputs import Settings, Workload
from planner.model import plan_capacity
from planner.plan import Component
from planner.prices import SECONDS_PER_HOUR, PriceTable, load_price_table
from toolkit.cli import MAX_SECONDS as CLI_MAX_SECONDS
from toolkit.cli import OneLineArgumentParser, bounded, exit_with

LOG_BYTES_PER_INVOCATION = 1600
"""Log bytes of one invocation: the function's summary line and EMF document (1,050 to 1,530 bytes
per invocation in the local runner's log, 2026-11-25) and Lambda's START/END/REPORT lines."""
LOG_BYTES_PER_APPLIED_MESSAGE = 11
"""One `EndToEndLatency` value in reduce's EMF documents (10.8 bytes each in the same log)."""
CUSTOM_METRICS = 22
"""Metric names the four functions emit (7 + 4 + 6 + 5, `dimension service`; a stack test counts them)."""
WATCH_METRICS_PER_SECOND = 4 / 10
"""`producer send` on AWS asks CloudWatch for 4 metrics every 10 seconds (`producer.watch`)."""
FLAT_OUT_RATE = 5000.0
"""The rate assumed for a test sent as fast as possible (`--rate 0`): about what one producer
process puts with its default 16 concurrent calls."""
MIN_RATE, MAX_RATE = 1e-3, 10_000_000.0
"""The rates a load test is planned for (messages a second): the capacity model is in floats, and
Workload's per-second figures overflow to inf long before 1e300."""
MIN_SECONDS, MAX_SECONDS = 1e-3, float(CLI_MAX_SECONDS)
CONFIRM_ABOVE_USD = 1.0
"""`producer send` against AWS asks for `--yes` when the estimate is above this."""


@dataclass(frozen=True)
class IdleResources:
    """What a deployed stack bills by the month whether or not it receives anything (the defaults
    are the stack's with the default settings; a stack test keeps them equal)."""

    on_demand_streams: int = 1
    alarms: int = 8
    dashboards: int = 1
    customer_managed_keys: int = 1  # the alarm topic's: CloudWatch cannot publish under AWS's SNS key


@dataclass(frozen=True)
class LoadTestCost:
    rate: float
    seconds: float
    components: tuple[Component, ...]

    @property
    def messages(self) -> int:
        return round(self.rate * self.seconds)

    @property
    def usd(self) -> float:
        return sum(component.monthly_usd for component in self.components)


def load_test_cost(
    rate: float, seconds: float, *, settings: Settings | None = None, prices: PriceTable | None = None
) -> LoadTestCost:
    """A load test of `rate` messages a second for `seconds` (module docstring); each component's
    `monthly_usd` holds its cost for the test, not for a month."""
    if not (MIN_RATE <= rate <= MAX_RATE and MIN_SECONDS <= seconds <= MAX_SECONDS):  # False for NaN too
        raise ValueError(
            f"a load test's rate must be from {MIN_RATE:g} to {MAX_RATE:g} msg/s and its duration from "
            f"{MIN_SECONDS:g} s to a year ({MAX_SECONDS:g} s)"
        )
    settings = settings or Settings()
    prices = prices or load_price_table()
    plan = plan_capacity(Workload(rate=rate), settings, prices=prices).ours
    share = seconds / prices.seconds_per_month
    components = [Component(c.name, c.detail, c.monthly_usd * share) for c in plan.components]
    invocations_per_second = (
        rate / settings.state_batch_size
        + plan.delta_batches_per_second
        + plan.delta_batches_per_second / settings.reduce_batch_size  # reduce
        + plan.archive_objects_per_second  # one batch object an archive invocation
    )
    applied_per_second = rate * Workload(rate=rate).applied_share
    log_bytes = seconds * (
        invocations_per_second * LOG_BYTES_PER_INVOCATION + applied_per_second * LOG_BYTES_PER_APPLIED_MESSAGE
    )
    hours = max(1.0, seconds / SECONDS_PER_HOUR)  # a metric is billed for each hour it is emitted in
    components += [
        Component(
            "CloudWatch logs",
            f"{log_bytes / 1e6:,.1f} MB ({invocations_per_second:,.1f} invocations/s and a latency value per message)",
            log_bytes / 1024**3 * prices.logs_ingestion_per_gb,
        ),
        Component(
            "CloudWatch metrics",
            f"{CUSTOM_METRICS} custom metrics for {hours:,.0f} h, the producer's reads",
            CUSTOM_METRICS * hours / prices.hours_per_month * prices.custom_metric_month
            + WATCH_METRICS_PER_SECOND * seconds * prices.get_metric_data_per_metric,
        ),
    ]
    return LoadTestCost(rate=rate, seconds=seconds, components=tuple(components))


def idle_costs(resources: IdleResources | None = None, prices: PriceTable | None = None) -> list[Component]:
    """A month of a deployed stack without traffic, by what bills it (module docstring)."""
    resources = resources or IdleResources()
    prices = prices or load_price_table()
    return [
        Component(
            "Kinesis on-demand stream",
            f"{resources.on_demand_streams} x {prices.hours_per_month:g} stream-hours",
            resources.on_demand_streams * prices.hours_per_month * prices.kinesis_stream_hour,
        ),
        Component("CloudWatch alarms", f"{resources.alarms} standard", resources.alarms * prices.standard_alarm_month),
        Component(
            "CloudWatch dashboard",
            f"{resources.dashboards}; an account's first three are free",
            resources.dashboards * prices.dashboard_month,
        ),
        Component(
            "KMS customer managed keys",
            f"{resources.customer_managed_keys}; the alarm topic's, the AWS managed aws/kinesis key has no fee",
            resources.customer_managed_keys * prices.kms_customer_managed_key_month,
        ),
    ]


def flat_out_seconds(messages: int) -> float:
    """The duration assumed for `messages` sent as fast as possible (`FLAT_OUT_RATE`)."""
    return messages / FLAT_OUT_RATE


def describe(cost: LoadTestCost, prices: PriceTable | None = None) -> list[str]:
    """The estimate as lines: the total, what makes it up, and the idle cost beside it."""
    prices = prices or load_price_table()
    idle = sum(component.monthly_usd for component in idle_costs(prices=prices))
    lines = [
        f"load test: {cost.messages:,} messages at {cost.rate:,.0f} msg/s for {cost.seconds:,.0f} s "
        f"costs about ${cost.usd:,.2f} (list prices of {prices.region}, {prices.as_of})"
    ]
    lines += [f"  {c.name}: ${c.monthly_usd:,.4f} ({c.detail})" for c in cost.components]
    lines.append(
        f"the deployed stack costs ${idle:,.2f} a month idle (${idle / prices.hours_per_month:,.3f} an hour), "
        "test or not, until `cdk destroy`"
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m planner.load_test",
        description="What a load test on AWS costs, and the stack's idle cost.",
        error_prefix="planner: error: ",
    )
    parser.add_argument(
        "--rate",
        type=bounded(float, MIN_RATE, MAX_RATE),
        required=True,
        help=f"messages per second (at most {MAX_RATE:g})",
    )
    parser.add_argument(
        "--duration", type=bounded(float, MIN_SECONDS, MAX_SECONDS), required=True, help="seconds (at most a year)"
    )
    arguments = parser.parse_args(argv)
    try:
        cost = load_test_cost(arguments.rate, arguments.duration)
    except ValueError as error:
        print(f"planner: error: {error}", file=sys.stderr)
        return 2
    print("\n".join(describe(cost)))
    for component in idle_costs():
        print(f"  idle: {component.name}: ${component.monthly_usd:,.2f} a month ({component.detail})")
    return 0


if __name__ == "__main__":
    exit_with(main)
