"""The CloudWatch dashboard a load test is watched on (its URL is the `DashboardUrl` output).

What a user deploying the stack and running `python -m producer send` wants to see, one graph
each: messages in and applied per second (is the pipeline keeping up?), end-to-end latency p50,
p99 and maximum, each mapping's iterator age, each function's errors, throttles and concurrency,
what the state stage quarantined, the reducers' transaction conflicts, each table's consumed
against provisioned capacity and its throttling, and Kinesis write throttling.

Every metric is one a handler of this stack emits (the stack's own namespace,
`aggregation.names.stack_metrics_namespace`, dimension `service`, names from `aggregation.names`)
or one AWS emits under exactly the namespace, name and dimensions used here, naming one of this
stack's resources: a graph of a metric nobody emits stays empty, and nothing would say so, so
`tests/stacks/test_stack_dashboard.py` checks each against the handlers' code and AWS's lists, and
`tests/stacks/test_stack_metrics_per_stack.py` that none reads another stack's series.
Provisioned capacity is drawn only for a table in provisioned mode: DynamoDB emits none
for an on-demand one.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from aggregation.names import (
    CONFLICTING_DUPLICATES,
    END_TO_END_LATENCY,
    MAP_SERVICE,
    MESSAGES_APPLIED,
    MESSAGES_RECEIVED,
    MESSAGES_WRITTEN,
    QUARANTINED_RECORDS,
    REDUCE_SERVICE,
    STATE_CHANGES_MAPPED,
    STATE_SERVICE,
    TRANSACTION_CONFLICTS_RETRIED,
    stack_metrics_namespace,
)

PERIOD = Duration.minutes(1)
WIDTH = 12
HEIGHT = 6


def pipeline_metric(
    namespace: str, service: str, name: str, statistic: str = cloudwatch.Stats.SUM
) -> cloudwatch.Metric:
    """One of our functions' own metrics (Powertools: the stack's namespace and the `service` dimension)."""
    return cloudwatch.Metric(
        namespace=namespace,
        metric_name=name,
        dimensions_map={"service": service},
        statistic=statistic,
        period=PERIOD,
    )


def per_second(metric_id: str, metric: cloudwatch.IMetric, label: str) -> cloudwatch.MathExpression:
    """A count metric's sum over each period, divided by the period: a rate whatever the zoom."""
    return cloudwatch.MathExpression(
        expression=f"{metric_id} / PERIOD({metric_id})", using_metrics={metric_id: metric}, label=label, period=PERIOD
    )


class PipelineDashboard(Construct):
    """One dashboard of the whole pipeline; `url` opens it in the console of the stack's region."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stream: kinesis.IStream,
        functions: Mapping[str, lambda_.IFunction],
        tables: Mapping[str, dynamodb.Table],
        provisioned_tables: frozenset[str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            default_interval=Duration.hours(1),
            period_override=cloudwatch.PeriodOverride.AUTO,
        )
        region = Stack.of(self).region
        namespace = stack_metrics_namespace(Stack.of(self).stack_name)
        self.url = (
            f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
            f"#dashboards/dashboard/{self.dashboard.dashboard_name}"
        )
        self.dashboard.add_widgets(self._throughput(namespace, stream), self._latency(namespace))
        self.dashboard.add_widgets(
            self._per_function("Iterator age per mapping (ms)", functions, "IteratorAge", cloudwatch.Stats.MAXIMUM),
            self._per_function(
                "Concurrent executions per function", functions, "ConcurrentExecutions", cloudwatch.Stats.MAXIMUM
            ),
        )
        self.dashboard.add_widgets(
            self._per_function("Errors per function", functions, "Errors", cloudwatch.Stats.SUM),
            self._per_function("Throttles per function", functions, "Throttles", cloudwatch.Stats.SUM),
        )
        self.dashboard.add_widgets(self._anomalies(namespace), self._stream_throttles(stream))
        self.dashboard.add_widgets(
            self._capacity("Write capacity per table (units/s)", tables, provisioned_tables, "Write"),
            self._capacity("Read capacity per table (units/s)", tables, provisioned_tables, "Read"),
        )
        self.dashboard.add_widgets(self._table_throttles(tables))

    @staticmethod
    def _throughput(namespace: str, stream: kinesis.IStream) -> cloudwatch.GraphWidget:
        stages = [
            (
                "ingested",
                stream.metric_incoming_records(period=PERIOD, statistic=cloudwatch.Stats.SUM),
                "ingested (Kinesis records)",
            ),
            ("received", pipeline_metric(namespace, STATE_SERVICE, MESSAGES_RECEIVED), "read by state"),
            ("written", pipeline_metric(namespace, STATE_SERVICE, MESSAGES_WRITTEN), "new versions (state)"),
            ("mapped", pipeline_metric(namespace, MAP_SERVICE, STATE_CHANGES_MAPPED), "mapped (map)"),
            ("applied", pipeline_metric(namespace, REDUCE_SERVICE, MESSAGES_APPLIED), "applied to the totals (reduce)"),
        ]
        return cloudwatch.GraphWidget(
            title="Messages per second: ingested vs applied",
            left=[per_second(metric_id, metric, label) for metric_id, metric, label in stages],
            left_y_axis=cloudwatch.YAxisProps(label="msg/s", show_units=False, min=0),
            width=WIDTH,
            height=HEIGHT,
        )

    @staticmethod
    def _latency(namespace: str) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title="End-to-end latency: producer timestamp to totals committed (ms)",
            left=[
                pipeline_metric(namespace, REDUCE_SERVICE, END_TO_END_LATENCY, statistic).with_(label=label)
                for statistic, label in (
                    (cloudwatch.Stats.p(50), "p50"),
                    (cloudwatch.Stats.p(99), "p99"),
                    (cloudwatch.Stats.MAXIMUM, "max"),
                )
            ],
            left_y_axis=cloudwatch.YAxisProps(label="ms", show_units=False, min=0),
            width=WIDTH,
            height=HEIGHT,
        )

    @staticmethod
    def _per_function(
        title: str, functions: Mapping[str, lambda_.IFunction], name: str, statistic: str
    ) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title=title,
            left=[
                function.metric(name, statistic=statistic, period=PERIOD, label=stage)
                for stage, function in functions.items()
            ],
            left_y_axis=cloudwatch.YAxisProps(min=0),
            width=WIDTH,
            height=HEIGHT,
        )

    @staticmethod
    def _anomalies(namespace: str) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title="Quarantined records and transaction conflicts",
            left=[
                pipeline_metric(namespace, STATE_SERVICE, QUARANTINED_RECORDS).with_(label="quarantined (state)"),
                pipeline_metric(namespace, STATE_SERVICE, CONFLICTING_DUPLICATES).with_(
                    label="conflicting duplicates (state)"
                ),
                pipeline_metric(namespace, REDUCE_SERVICE, TRANSACTION_CONFLICTS_RETRIED).with_(
                    label="transactions resent after a conflict (reduce)"
                ),
            ],
            left_y_axis=cloudwatch.YAxisProps(min=0),
            width=WIDTH,
            height=HEIGHT,
        )

    @staticmethod
    def _stream_throttles(stream: kinesis.IStream) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title="Kinesis write throttles",
            left=[
                stream.metric_write_provisioned_throughput_exceeded(
                    period=PERIOD, statistic=cloudwatch.Stats.SUM, label="records throttled"
                ),
                stream.metric_put_records_throttled_records(
                    period=PERIOD, statistic=cloudwatch.Stats.SUM, label="PutRecords records throttled"
                ),
            ],
            left_y_axis=cloudwatch.YAxisProps(min=0),
            width=WIDTH,
            height=HEIGHT,
        )

    @staticmethod
    def _capacity(
        title: str, tables: Mapping[str, dynamodb.Table], provisioned_tables: frozenset[str], kind: str
    ) -> cloudwatch.GraphWidget:
        lines: list[cloudwatch.IMetric] = []
        for index, (name, table) in enumerate(tables.items()):
            consumed = table.metric(f"Consumed{kind}CapacityUnits", statistic=cloudwatch.Stats.SUM, period=PERIOD)
            lines.append(per_second(f"consumed{index}", consumed, f"{name} consumed"))
            if name in provisioned_tables:
                lines.append(
                    table.metric(
                        f"Provisioned{kind}CapacityUnits",
                        statistic=cloudwatch.Stats.AVERAGE,
                        period=PERIOD,
                        label=f"{name} provisioned",
                    )
                )
        return cloudwatch.GraphWidget(
            title=title, left=lines, left_y_axis=cloudwatch.YAxisProps(min=0), width=WIDTH, height=HEIGHT
        )

    @staticmethod
    def _table_throttles(tables: Mapping[str, dynamodb.Table]) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title="DynamoDB throttle events per table",
            left=[
                table.metric(
                    f"{kind}ThrottleEvents",
                    statistic=cloudwatch.Stats.SUM,
                    period=PERIOD,
                    label=f"{name} {kind.lower()}s",
                )
                for name, table in tables.items()
                for kind in ("Write", "Read")
            ],
            left_y_axis=cloudwatch.YAxisProps(min=0),
            width=2 * WIDTH,
            height=HEIGHT,
        )
