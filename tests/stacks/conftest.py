"""Fixtures for the CDK app tests: the stack synthesized once per session, as `cdk synth` does.

Synthesis costs seconds, so the default stack is built once and shared; tests that need other
settings build their own app once per module.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from stacks import ExactlyOnceAggregationStack
from tests.stacks.stack_helpers import load_cdk_json_context, synthesize


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
