"""Fixtures for the CDK app tests: the stack synthesized once per session, as `cdk synth` does.

Synthesis costs seconds, so the default stack is built once and shared; tests that need other
settings build their own app once per module. checkov takes seconds too: it runs once per session,
over every template its tests need (`checkov_scans`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from stacks import ExactlyOnceAggregationStack, build_app
from stacks.template_scan import HARDENED_CONTEXT, Scan, scan_templates
from tests.stacks.stack_helpers import load_cdk_json_context, synthesize

BARE_RESOURCES = ("BareFunction", "BareTable", "BareLogGroup", "BareBucket")
"""What `with_bare_resources` adds to a copy of the default stack, as a careless change would."""


@pytest.fixture(scope="session")
def cdk_json_context() -> dict[str, Any]:
    return load_cdk_json_context()


@pytest.fixture(scope="session")
def default_synthesis() -> tuple[ExactlyOnceAggregationStack, Template]:
    return synthesize()


@pytest.fixture(scope="session")
def default_stack(default_synthesis: tuple[ExactlyOnceAggregationStack, Template]) -> ExactlyOnceAggregationStack:
    return default_synthesis[0]


@pytest.fixture(scope="session")
def template(default_synthesis: tuple[ExactlyOnceAggregationStack, Template]) -> Template:
    return default_synthesis[1]


@pytest.fixture(scope="session")
def hardened_synthesis() -> tuple[ExactlyOnceAggregationStack, Template]:
    """The second template `make synth` checks: the customer-managed key and every optional protection on."""
    return synthesize(HARDENED_CONTEXT)


@pytest.fixture(scope="session")
def with_bare_resources() -> tuple[ExactlyOnceAggregationStack, Template]:
    """A copy of the default stack with a function, a table, a log group and a bucket added bare."""
    _app, stack = build_app(load_cdk_json_context())
    lambda_.Function(
        stack,
        "BareFunction",
        runtime=lambda_.Runtime.PYTHON_3_14,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
        timeout=Duration.seconds(3),
        environment={"TABLE_NAME": "bare"},
    )
    dynamodb.Table(stack, "BareTable", partition_key=dynamodb.Attribute(name="Id", type=dynamodb.AttributeType.STRING))
    logs.LogGroup(stack, "BareLogGroup")
    s3.Bucket(stack, "BareBucket")
    return stack, Template.from_stack(stack)


def without_checkov_skips(template: Template) -> str:
    """The template's JSON with every `checkov` Metadata entry removed: what checkov finds unreviewed."""
    body = template.to_json()
    for resource in body["Resources"].values():
        resource.get("Metadata", {}).pop("checkov", None)
    return json.dumps(body)


@pytest.fixture(scope="session")
def checkov_scans(
    template: Template,
    hardened_synthesis: tuple[ExactlyOnceAggregationStack, Template],
    with_bare_resources: tuple[ExactlyOnceAggregationStack, Template],
) -> dict[str, Scan]:
    """checkov's verdict, in one run, on: the default and hardened templates; both with their skips
    removed; and the default stack with bare resources added."""
    templates = {
        "default": json.dumps(template.to_json()),
        "hardened": json.dumps(hardened_synthesis[1].to_json()),
        "default without skips": without_checkov_skips(template),
        "hardened without skips": without_checkov_skips(hardened_synthesis[1]),
        "with bare resources": json.dumps(with_bare_resources[1].to_json()),
    }
    try:
        return scan_templates(templates)
    except FileNotFoundError as error:
        pytest.fail(str(error))
