"""Helpers for the CDK app tests: build the app as `cdk synth` does, and navigate a template."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

from stacks import ExactlyOnceAggregationStack, build_app

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

Resource = dict[str, Any]


def load_cdk_json_context() -> dict[str, Any]:
    """The `context` of cdk.json: what the CDK CLI hands to the app."""
    context: dict[str, Any] = json.loads((REPOSITORY_ROOT / "cdk.json").read_text())["context"]
    return context


def synthesize(overrides: Mapping[str, Any] | None = None) -> tuple[ExactlyOnceAggregationStack, Template]:
    """Build the app from cdk.json's context plus `overrides` (like `-c key=value`)."""
    context = {**load_cdk_json_context(), **(overrides or {})}
    _app, stack = build_app(context)
    return stack, Template.from_stack(stack)


def run_app_py(environment: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`python app.py` as the CDK CLI runs it, with `environment` added (such as CDK_CONTEXT_JSON)."""
    return subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPOSITORY_ROOT,
        env={
            **os.environ,
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "16,18,20",
            "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
            **environment,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- helpers to navigate a synthesized template -------------------------------------------------


def resources_of_type(template: Template, resource_type: str) -> dict[str, Resource]:
    return {logical_id: dict(resource) for logical_id, resource in template.find_resources(resource_type).items()}


def table_logical_id(template: Template, partition_key: str) -> str:
    """The logical ID of the table whose partition key is `partition_key` (TradeID, StreamShard, ...)."""
    matches = [
        logical_id
        for logical_id, table in resources_of_type(template, "AWS::DynamoDB::Table").items()
        if table["Properties"]["KeySchema"][0] == {"AttributeName": partition_key, "KeyType": "HASH"}
    ]
    assert len(matches) == 1, f"expected one table keyed by {partition_key}, found {matches}"
    return matches[0]


def function_logical_id(template: Template, handler: str) -> str:
    matches = [
        logical_id
        for logical_id, function in resources_of_type(template, "AWS::Lambda::Function").items()
        if function["Properties"]["Handler"] == handler
    ]
    assert len(matches) == 1, f"expected one function with handler {handler}, found {matches}"
    return matches[0]


def function_properties(template: Template, handler: str) -> dict[str, Any]:
    properties: dict[str, Any] = resources_of_type(template, "AWS::Lambda::Function")[
        function_logical_id(template, handler)
    ]["Properties"]
    return properties


def event_source_mapping(template: Template, handler: str) -> dict[str, Any]:
    """The properties of the one event source mapping that invokes the function."""
    function_id = function_logical_id(template, handler)
    matches = [
        mapping["Properties"]
        for mapping in resources_of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if mapping["Properties"]["FunctionName"] == {"Ref": function_id}
    ]
    assert len(matches) == 1, f"expected one mapping for {handler}, found {len(matches)}"
    properties: dict[str, Any] = matches[0]
    return properties


def powertools_parameter_logical_id(template: Template) -> str:
    """The template parameter that resolves AWS's public Powertools layer parameter at deploy time."""
    matches = [
        str(logical_id)
        for logical_id, parameter in template.to_json().get("Parameters", {}).items()
        if str(parameter.get("Default", "")).startswith("/aws/service/powertools/")
    ]
    assert len(matches) == 1, f"expected one Powertools layer parameter, found {matches}"
    return matches[0]


def role_statements(template: Template, handler: str) -> list[dict[str, Any]]:
    """Every IAM policy statement attached to the function's execution role."""
    role_arn = function_properties(template, handler)["Role"]
    role_id = role_arn["Fn::GetAtt"][0]
    statements: list[dict[str, Any]] = []
    for policy in resources_of_type(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    role = resources_of_type(template, "AWS::IAM::Role")[role_id]["Properties"]
    for inline in role.get("Policies", []):
        statements.extend(inline["PolicyDocument"]["Statement"])
    return statements


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def actions_on(statements: list[dict[str, Any]], resource: Any) -> set[str]:
    """The actions the statements allow on exactly `resource` (a template expression)."""
    return {
        action
        for statement in statements
        if statement["Effect"] == "Allow" and resource in as_list(statement["Resource"])
        for action in as_list(statement["Action"])
    }


def referenced_logical_ids(value: Any) -> set[str]:
    """Every logical ID a template expression refers to (Ref / Fn::GetAtt), recursively."""
    found: set[str] = set()
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            found.add(value["Ref"])
        if "Fn::GetAtt" in value:
            found.add(value["Fn::GetAtt"][0])
        for inner in value.values():
            found |= referenced_logical_ids(inner)
    elif isinstance(value, list):
        for inner in value:
            found |= referenced_logical_ids(inner)
    return found


STATE_HANDLER = "state_function.handler.lambda_handler"
MAP_HANDLER = "map_function.handler.lambda_handler"
REDUCE_HANDLER = "reduce_function.handler.lambda_handler"
ARCHIVE_HANDLER = "archive_function.handler.lambda_handler"
HANDLERS = {"state": STATE_HANDLER, "map": MAP_HANDLER, "reduce": REDUCE_HANDLER, "archive": ARCHIVE_HANDLER}
SETTINGS_GUARD_HANDLER = "settings_guard_function.handler.lambda_handler"
"""Not a pipeline stage: the custom resource handler of the settings guard (`stacks/settings_guard.py`)."""
PROVIDER_HANDLER = "framework.onEvent"
"""CDK's provider function, which CloudFormation calls for the settings guard and which calls its handler."""


@functools.cache
def handler_metric_namespaces(environment_namespace: str) -> dict[str, str]:
    """Service -> the namespace its handler's `metrics` emit under when the function's environment
    sets POWERTOOLS_METRICS_NAMESPACE to `environment_namespace`.

    Read from the handler modules imported in a fresh interpreter with that environment, as Lambda
    imports them: this process imported them long ago, under the tests' namespace, and a handler
    that named its namespace in code would ignore the environment (every stack's metrics in one).
    """
    script = (
        "import importlib, json, sys\n"
        "handlers = json.loads(sys.argv[1])\n"
        "print(json.dumps({service: importlib.import_module(handler.rpartition('.')[0]).metrics.namespace"
        " for service, handler in handlers.items()}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(HANDLERS)],
        cwd=REPOSITORY_ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(REPOSITORY_ROOT / "lambdas"),
            "POWERTOOLS_METRICS_NAMESPACE": environment_namespace,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    namespaces: dict[str, str] = json.loads(result.stdout)
    return namespaces
