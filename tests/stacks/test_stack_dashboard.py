"""Every metric on the dashboard is one somebody emits, under exactly that namespace, name and dimensions.

A graph of a metric nobody emits stays empty, and nothing else would notice (a renamed metric, a
wrong statistic's dimension, provisioned capacity of an on-demand table). The dashboard body is
read from the synthesized template and each metric checked against one of two sources:

- ours: the namespace a deployed handler emits under and its `service` dimension, and a name that
  handler's code passes to `metrics.add_metric` (the scan of `test_stack_alarm_metrics`);
- AWS's: the metrics AWS documents emitting with exactly one dimension naming a resource of the
  stack of the right type (`AWS_METRICS`, from the Lambda Developer Guide "Types of metrics for
  Lambda functions" and "Monitoring concurrency": ConcurrentExecutions for every function; the
  DynamoDB Developer Guide "DynamoDB Metrics and dimensions": Provisioned*CapacityUnits only for
  provisioned capacity; the Kinesis Data Streams Developer Guide "Stream-level metrics").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk.assertions import Template

from aggregation.names import DASHBOARD_URL_OUTPUT, TRADE_ID, stack_metrics_namespace
from planner.load_test import CUSTOM_METRICS, IdleResources
from stacks import ExactlyOnceAggregationStack
from tests.stacks.stack_helpers import (
    HANDLERS,
    function_logical_id,
    load_cdk_json_context,
    resources_of_type,
    synthesize,
    table_logical_id,
)
from tests.stacks.test_stack_alarm_metrics import emitted_metric_names, emitted_namespaces, handler_modules

REGION_PLACEHOLDER = "region-of-the-stack"
REF_PREFIX = "ref:"

AWS_METRICS: dict[tuple[str, str], tuple[str, str]] = {
    **{
        ("AWS/Lambda", name): ("FunctionName", "AWS::Lambda::Function")
        for name in ("IteratorAge", "Errors", "Throttles", "ConcurrentExecutions", "Invocations", "Duration")
    },
    **{
        ("AWS/DynamoDB", name): ("TableName", "AWS::DynamoDB::Table")
        for name in (
            "ConsumedWriteCapacityUnits",
            "ConsumedReadCapacityUnits",
            "ProvisionedWriteCapacityUnits",
            "ProvisionedReadCapacityUnits",
            "WriteThrottleEvents",
            "ReadThrottleEvents",
        )
    },
    **{
        ("AWS/Kinesis", name): ("StreamName", "AWS::Kinesis::Stream")
        for name in ("IncomingRecords", "WriteProvisionedThroughputExceeded", "PutRecords.ThrottledRecords")
    },
}
"""(namespace, metric) AWS emits -> its one dimension, and the type of resource the dimension names."""

PROVISIONED_ONLY = frozenset({"ProvisionedWriteCapacityUnits", "ProvisionedReadCapacityUnits"})


@dataclass(frozen=True)
class DashboardMetric:
    widget: str
    namespace: str
    name: str
    dimensions: dict[str, str]
    options: dict[str, Any]


def resolved(value: Any) -> str:
    """A `Fn::Join` of strings and Refs as text, each Ref written `ref:<logical id>`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return REGION_PLACEHOLDER if value["Ref"] == "AWS::Region" else f"{REF_PREFIX}{value['Ref']}"
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return str(separator).join(resolved(part) for part in parts)
    raise AssertionError(f"the dashboard body holds a value this test cannot read: {value}")


def dashboard_body(template: Template) -> dict[str, Any]:
    (dashboard,) = resources_of_type(template, "AWS::CloudWatch::Dashboard").values()
    body: dict[str, Any] = json.loads(resolved(dashboard["Properties"]["DashboardBody"]))
    return body


def dashboard_metrics(template: Template) -> tuple[list[DashboardMetric], list[str]]:
    """The metrics of every graph, and the math expressions (each checked to use metrics of its graph)."""
    metrics: list[DashboardMetric] = []
    expressions: list[str] = []
    for widget in dashboard_body(template)["widgets"]:
        properties = widget["properties"]
        title = properties["title"]
        assert properties["region"] == REGION_PLACEHOLDER, title
        ids = set()
        widget_expressions = []
        for line in properties["metrics"]:
            if isinstance(line[0], dict):
                widget_expressions.append(line[0]["expression"])
                continue
            options = line[-1] if isinstance(line[-1], dict) else {}
            fields = line[:-1] if options else line
            namespace, name, *pairs = fields
            assert len(pairs) % 2 == 0, (title, line)
            dimensions = dict(zip(pairs[::2], pairs[1::2], strict=True))
            metrics.append(DashboardMetric(title, namespace, name, dimensions, options))
            if "id" in options:
                ids.add(options["id"])
        for expression in widget_expressions:
            used = {token for token in expression.replace("(", " ").replace(")", " ").split() if token.isidentifier()}
            assert used - {"PERIOD"} <= ids, (title, expression, ids)
        expressions.extend(widget_expressions)
    return metrics, expressions


def assert_emitted(metric: DashboardMetric, template: Template) -> None:
    """The metric is one of our handlers' or one AWS emits, with exactly its dimensions."""
    if metric.namespace.startswith("AWS/"):
        assert (metric.namespace, metric.name) in AWS_METRICS, metric
        dimension, resource_type = AWS_METRICS[(metric.namespace, metric.name)]
        assert set(metric.dimensions) == {dimension}, metric
        reference = metric.dimensions[dimension]
        assert reference.startswith(REF_PREFIX), metric
        logical_id = reference.removeprefix(REF_PREFIX)
        resources = resources_of_type(template, resource_type)
        assert logical_id in resources, f"{metric.widget}: {reference} is not a {resource_type}"
        if metric.name in PROVISIONED_ONLY:
            assert resources[logical_id]["Properties"].get("BillingMode") != "PAY_PER_REQUEST", metric
        return
    modules = handler_modules(template)
    assert set(metric.dimensions) == {"service"}, metric
    module = modules[metric.dimensions["service"]]
    assert metric.namespace == emitted_namespaces(template)[metric.dimensions["service"]], metric
    assert metric.name in emitted_metric_names(module), metric


def test_every_dashboard_metric_is_emitted_by_a_handler_or_by_aws(template: Template) -> None:
    metrics, expressions = dashboard_metrics(template)
    for metric in metrics:
        assert_emitted(metric, template)
    assert expressions, "rates are drawn per second"
    names = {(metric.namespace, metric.name) for metric in metrics}
    own = stack_metrics_namespace(load_cdk_json_context()["stackName"])
    assert {
        ("AWS/Kinesis", "IncomingRecords"),
        (own, "MessagesApplied"),
        (own, "EndToEndLatency"),
        ("AWS/Lambda", "IteratorAge"),
        ("AWS/Lambda", "Errors"),
        ("AWS/Lambda", "Throttles"),
        ("AWS/Lambda", "ConcurrentExecutions"),
        (own, "QuarantinedRecords"),
        (own, "TransactionConflictsRetried"),
        ("AWS/DynamoDB", "ConsumedWriteCapacityUnits"),
        ("AWS/DynamoDB", "WriteThrottleEvents"),
        ("AWS/Kinesis", "WriteProvisionedThroughputExceeded"),
    } <= names
    latency = {metric.options.get("stat") for metric in metrics if metric.name == "EndToEndLatency"}
    assert latency == {"p50", "p99", "Maximum"}


def test_iterator_age_and_function_health_cover_every_stage(template: Template) -> None:
    metrics, _ = dashboard_metrics(template)
    stages = {function_logical_id(template, handler) for handler in HANDLERS.values()}
    for name in ("IteratorAge", "Errors", "Throttles", "ConcurrentExecutions"):
        drawn = {m.dimensions["FunctionName"].removeprefix(REF_PREFIX) for m in metrics if m.name == name}
        assert drawn == stages, name


def test_no_provisioned_capacity_is_drawn_for_on_demand_tables(template: Template) -> None:
    metrics, _ = dashboard_metrics(template)
    assert not [metric for metric in metrics if metric.name in PROVISIONED_ONLY]
    consumed = {m.dimensions["TableName"] for m in metrics if m.name == "ConsumedWriteCapacityUnits"}
    assert len(consumed) == len(resources_of_type(template, "AWS::DynamoDB::Table")) == 4


@pytest.fixture(scope="module")
def provisioned_synthesis() -> tuple[ExactlyOnceAggregationStack, Template]:
    capacity = {"mode": "provisioned", "minWriteCapacity": 5, "maxWriteCapacity": 1000}
    return synthesize({"stateTableCapacity": capacity})


def test_a_provisioned_table_shows_its_provisioned_capacity(
    provisioned_synthesis: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    _, template = provisioned_synthesis
    metrics, _ = dashboard_metrics(template)
    for metric in metrics:
        assert_emitted(metric, template)
    provisioned = {(m.name, m.dimensions["TableName"]) for m in metrics if m.name in PROVISIONED_ONLY}
    state_table = f"{REF_PREFIX}{table_logical_id(template, TRADE_ID)}"
    assert provisioned == {
        ("ProvisionedWriteCapacityUnits", state_table),
        ("ProvisionedReadCapacityUnits", state_table),
    }


def test_the_dashboard_url_is_a_stack_output(template: Template) -> None:
    output = template.to_json()["Outputs"][DASHBOARD_URL_OUTPUT]
    (dashboard,) = resources_of_type(template, "AWS::CloudWatch::Dashboard")
    url = resolved(output["Value"])
    assert url == (
        f"https://{REGION_PLACEHOLDER}.console.aws.amazon.com/cloudwatch/home?region={REGION_PLACEHOLDER}"
        f"#dashboards/dashboard/{REF_PREFIX}{dashboard}"
    )


def test_the_planner_prices_what_the_stack_bills_idle(template: Template) -> None:
    """`planner.load_test`'s idle resources and custom metrics are the stack's (README's idle cost)."""
    idle = IdleResources()
    streams = resources_of_type(template, "AWS::Kinesis::Stream").values()
    assert [stream["Properties"]["StreamModeDetails"] for stream in streams] == [{"StreamMode": "ON_DEMAND"}]
    assert idle.on_demand_streams == len(streams)
    assert idle.alarms == len(resources_of_type(template, "AWS::CloudWatch::Alarm"))
    assert idle.dashboards == len(resources_of_type(template, "AWS::CloudWatch::Dashboard"))
    assert idle.customer_managed_keys == len(resources_of_type(template, "AWS::KMS::Key"))
    emitted = sum(len(emitted_metric_names(module)) for module in handler_modules(template).values())
    assert emitted == CUSTOM_METRICS
