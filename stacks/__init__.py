"""The CDK app of the exactly-once aggregation pipeline (see docs/architecture.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aws_cdk import App

from stacks.functions import TARGET_PARTITIONS_CONTEXT, require_supported_partitions
from stacks.nag import add_aws_solutions_checks
from stacks.pipeline_stack import ExactlyOnceAggregationStack
from stacks.settings import PipelineSettings, SettingsError

__all__ = ["ExactlyOnceAggregationStack", "PipelineSettings", "SettingsError", "build_app"]


def build_app(
    context: Mapping[str, Any] | None = None, outdir: str | None = None
) -> tuple[App, ExactlyOnceAggregationStack]:
    """Build the app exactly as `cdk synth` does: settings from context, one stack, cdk-nag.

    `context` adds to (or, for tests, replaces) what the CDK CLI passes from `cdk.json` and
    `-c key=value`. Raises `SettingsError` on an invalid setting, or when the app targets a
    partition (or the CLI a region) where the Powertools layer is not published.
    """
    app = App(context=dict(context) if context is not None else None, outdir=outdir)
    settings = PipelineSettings.from_context(app.node.try_get_context)
    require_supported_partitions(
        app.node.try_get_context(TARGET_PARTITIONS_CONTEXT), os.environ.get("CDK_DEFAULT_REGION")
    )
    stack = ExactlyOnceAggregationStack(
        app, "ExactlyOnceAggregationStack", settings=settings, stack_name=settings.stack_name
    )
    add_aws_solutions_checks(app)
    return app, stack
