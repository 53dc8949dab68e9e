"""Two stacks in one account and region: no alarm or dashboard graph of one reads the other's metrics.

CloudWatch keys a series by namespace, metric name and dimensions. Two stacks of this app deployed
side by side (staging beside production) each emit series; an alarm or graph of one that reads a
series the other emits fires on, or adds, the other's data. Both stacks are synthesized in one app,
and for each:

- the series its functions emit: our handlers' metrics under the namespace each handler uses with
  its function's environment (imported in a fresh interpreter, as Lambda does), with its `service`
  dimension; AWS's metrics (`AWS_METRICS`) under the name of each of its functions, tables and
  stream: a name CloudFormation generates from the stack's name, written here as
  `<stack>/<logical id>`, unless the template fixes one (then the fixed name, shared);
- the series its alarms and dashboard read, their `Ref`s resolved the same way.

Every series a stack reads must be one it emits itself, and none the other emits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template

from stacks import ExactlyOnceAggregationStack, PipelineSettings
from tests.stacks.stack_helpers import load_cdk_json_context, resources_of_type
from tests.stacks.test_stack_alarm_metrics import emitted_metric_names, emitted_namespaces, handler_modules
from tests.stacks.test_stack_dashboard import AWS_METRICS, REF_PREFIX, dashboard_metrics

STACK_NAMES = ("Production", "Staging")
NAME_PROPERTIES = {
    "AWS::Lambda::Function": "FunctionName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::Kinesis::Stream": "Name",
}
"""The property that would fix a resource's physical name (and with it AWS's metric dimension)."""

Series = tuple[str, str, frozenset[tuple[str, str]]]
"""(namespace, metric name, dimensions): what CloudWatch keys a series by."""


@pytest.fixture(scope="module")
def templates() -> dict[str, Template]:
    """Both stacks from the same settings, as `cdk deploy -c stackName=...` twice would deploy them."""
    app = App(context=load_cdk_json_context())
    settings = PipelineSettings.from_context(app.node.try_get_context)
    stacks = {name: ExactlyOnceAggregationStack(app, name, settings=settings, stack_name=name) for name in STACK_NAMES}
    return {name: Template.from_stack(stack) for name, stack in stacks.items()}


def physical_name(stack: str, template: Template, logical_id: str) -> str:
    """The name a resource gets when deployed in `stack`: its fixed name, else one unique to the stack."""
    for resource_type, name_property in NAME_PROPERTIES.items():
        resource = resources_of_type(template, resource_type).get(logical_id)
        if resource is not None:
            fixed = resource["Properties"].get(name_property)
            return str(fixed) if fixed is not None else f"{stack}/{logical_id}"
    raise AssertionError(f"{logical_id} is no function, table or stream")


def dimension_value(stack: str, template: Template, value: Any) -> str:
    """A dimension value as deployed: a literal as written, a reference as the resource's name."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return physical_name(stack, template, value["Ref"])
    if isinstance(value, str) and value.startswith(REF_PREFIX):
        return physical_name(stack, template, value.removeprefix(REF_PREFIX))
    assert isinstance(value, str), value
    return value


def emitted_series(stack: str, template: Template) -> set[Series]:
    series: set[Series] = set()
    namespaces = emitted_namespaces(template)
    for service, module in handler_modules(template).items():
        for name in emitted_metric_names(module):
            series.add((namespaces[service], name, frozenset({("service", service)})))
    for (namespace, name), (dimension, resource_type) in AWS_METRICS.items():
        for logical_id in resources_of_type(template, resource_type):
            series.add((namespace, name, frozenset({(dimension, physical_name(stack, template, logical_id))})))
    return series


def read_series_unresolved(template: Template) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(namespace, name, dimensions as written) of every alarm's metric and every graph's line."""
    for alarm in resources_of_type(template, "AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        assert "Metrics" not in properties, "an alarm on metric math: read its metrics here too"
        dimensions = {dimension["Name"]: dimension["Value"] for dimension in properties.get("Dimensions", [])}
        yield properties["Namespace"], properties["MetricName"], dimensions
    metrics, _expressions = dashboard_metrics(template)
    for metric in metrics:
        yield metric.namespace, metric.name, dict(metric.dimensions)


def read_series(stack: str, template: Template) -> set[Series]:
    series: set[Series] = set()
    for namespace, name, dimensions in read_series_unresolved(template):
        resolved = frozenset((key, dimension_value(stack, template, value)) for key, value in dimensions.items())
        series.add((namespace, name, resolved))
    return series


@pytest.mark.parametrize(("stack", "other"), [STACK_NAMES, tuple(reversed(STACK_NAMES))])
def test_no_alarm_or_graph_of_one_stack_reads_a_series_of_the_other(
    templates: dict[str, Template], stack: str, other: str
) -> None:
    read = read_series(stack, templates[stack])
    assert {namespace for namespace, _, _ in read} >= {"AWS/Lambda", "AWS/DynamoDB", "AWS/Kinesis"}
    assert len(read) > 40, "every alarm and graph line is read"
    theirs = read & emitted_series(other, templates[other])
    assert not theirs, f"{stack} reads {other}'s series: {sorted(theirs, key=str)[:5]}"
    assert read <= emitted_series(stack, templates[stack]), sorted(read - emitted_series(stack, templates[stack]))
