"""Every metric an alarm watches is one a handler emits, under the namespace and service it alarms on.

An alarm on a metric nobody emits never fires, and nothing else would notice: the names are
read from the synthesized template on one side and from the handlers' own code on the other
(each `metrics.add_metric(name=...)` call, its name resolved in the handler module; the namespace
the handler emits under given its function's environment), so a renamed metric, service or
namespace on either side fails here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from types import ModuleType
from typing import Any

import pytest
from aws_cdk.assertions import Template

from tests.stacks.stack_helpers import HANDLERS, handler_metric_namespaces, resources_of_type

LAMBDA_NAMESPACE = "AWS/Lambda"
"""The functions' own metrics (IteratorAge), which Lambda emits, not our handlers."""


def emitted_metric_names(module: ModuleType) -> set[str]:
    """The names of every `add_metric` (Powertools) and `publish_metric_values`
    (`function_support.metrics`) call in the module's source, resolved in the module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(node, ast.Call):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if called not in ("add_metric", "publish_metric_values"):
            continue
        (name,) = [keyword.value for keyword in node.keywords if keyword.arg == "name"]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            names.add(name.value)
        elif isinstance(name, ast.Name) and isinstance(getattr(module, name.id, None), str):
            names.add(getattr(module, name.id))
        else:
            pytest.fail(f"{module.__name__}: cannot resolve the metric name {ast.unparse(name)}")
    return names


def pipeline_function_variables(template: Template) -> dict[str, dict[str, Any]]:
    """Each deployed stage function's environment, by its handler string."""
    functions = {}
    for function in resources_of_type(template, "AWS::Lambda::Function").values():
        properties = function["Properties"]
        if properties.get("Handler") in HANDLERS.values():  # not CDK's own helper functions
            functions[properties["Handler"]] = properties["Environment"]["Variables"]
    assert set(functions) == set(HANDLERS.values())
    return functions


def handler_modules(template: Template) -> dict[str, ModuleType]:
    """Each deployed function's handler module, by the service the template gives its metrics."""
    modules: dict[str, ModuleType] = {}
    for handler, variables in pipeline_function_variables(template).items():
        module = importlib.import_module(handler.rpartition(".")[0])
        assert variables["POWERTOOLS_SERVICE_NAME"] == module.SERVICE
        modules[module.SERVICE] = module
    return modules


def emitted_namespaces(template: Template) -> dict[str, str]:
    """Service -> the namespace its deployed function's metrics go to: the one its handler uses
    under the function's POWERTOOLS_METRICS_NAMESPACE (which must be that variable itself)."""
    namespaces = {}
    for variables in pipeline_function_variables(template).values():
        service, variable = variables["POWERTOOLS_SERVICE_NAME"], variables["POWERTOOLS_METRICS_NAMESPACE"]
        namespaces[service] = handler_metric_namespaces(variable)[service]
        assert namespaces[service] == variable, f"the {service} handler ignores its function's namespace"
    return namespaces


def custom_metric_alarms(template: Template) -> list[dict[str, Any]]:
    alarms = [alarm["Properties"] for alarm in resources_of_type(template, "AWS::CloudWatch::Alarm").values()]
    return [alarm for alarm in alarms if alarm["Namespace"] != LAMBDA_NAMESPACE]


def test_every_alarmed_metric_is_emitted_by_the_function_it_names(template: Template) -> None:
    modules = handler_modules(template)
    namespaces = emitted_namespaces(template)
    alarms = custom_metric_alarms(template)
    assert alarms, "the stack alarms on the handlers' own metrics"
    watched = set()
    for alarm in alarms:
        (dimension,) = alarm["Dimensions"]
        assert dimension["Name"] == "service"
        module = modules[dimension["Value"]]
        assert alarm["Namespace"] == namespaces[dimension["Value"]]
        assert alarm["MetricName"] in emitted_metric_names(module), (module.__name__, alarm["MetricName"])
        watched.add((dimension["Value"], alarm["MetricName"]))
    assert watched == {
        ("state", "QuarantinedRecords"),
        ("state", "ConflictingDuplicates"),
        ("reduce", "NonInsertRecordsSkipped"),
        ("archive", "NonInsertRecordsSkipped"),
    }


def test_the_scan_finds_what_each_handler_emits(template: Template) -> None:
    """The scan above is only as good as what it finds: it reads every metric docs/architecture.md lists."""
    emitted = {service: emitted_metric_names(module) for service, module in handler_modules(template).items()}
    assert emitted == {
        "state": {
            "MessagesReceived",
            "MessagesWritten",
            "DuplicateOrStaleMessages",
            "ConflictingDuplicates",
            "QuarantinedRecords",
            "WritesSkippedByVersionCache",
            "KinesisRecordsReceived",
        },
        "map": {"StateChangesMapped", "StateChangesAlreadyMapped", "DeltaItemsWritten", "StateImagesCountedInNoNode"},
        "reduce": {
            "TransactionsCommitted",
            "DeltaUnitsAlreadyApplied",
            "NonInsertRecordsSkipped",
            "TransactionConflictsRetried",
            "MessagesApplied",
            "EndToEndLatency",
        },
        "archive": {
            "BatchObjectsCreated",
            "BatchObjectsAlreadyArchived",
            "DeltaItemsArchived",
            "ConditionalWriteConflictsRetried",
            "NonInsertRecordsSkipped",
        },
    }
