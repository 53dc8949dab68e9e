"""The functions' code asset: `lambdas/` and protobuf's pure-Python source, built with no Docker.

What the issue asks of a dependency in the asset: that it deploys to arm64 without a Docker
build. Shown here by what the synthesized asset holds (no compiled file at all) and by reading
a KPL aggregate with a Python that sees nothing but the asset and the standard library.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aws_cdk import Stage
from aws_cdk.assertions import Template

from stacks import ExactlyOnceAggregationStack
from tests.lambdas.kpl_helpers import kpl_aggregate
from tests.stacks.stack_helpers import function_properties

READ_WITH_THE_ASSET_ONLY = """
import sys
from google.protobuf.internal import api_implementation
from aggregation.kpl import user_records
records = user_records(sys.stdin.buffer.read())
print(api_implementation.Type(), [r.data.decode() for r in records])
"""


def state_function_asset(stack: ExactlyOnceAggregationStack, template: Template) -> Path:
    code = function_properties(template, "state_function.handler.lambda_handler")["Code"]
    outdir = Stage.of(stack)
    assert outdir is not None
    return Path(outdir.outdir) / f"asset.{code['S3Key'].removesuffix('.zip')}"


def test_the_asset_holds_the_handlers_and_protobuf_and_nothing_compiled(
    default_stack: ExactlyOnceAggregationStack, template: Template
) -> None:
    asset = state_function_asset(default_stack, template)
    files = {path.relative_to(asset).as_posix() for path in asset.rglob("*") if path.is_file()}
    assert "state_function/handler.py" in files
    assert "aggregation/kpl.py" in files
    assert "google/protobuf/internal/python_message.py" in files, "protobuf's pure-Python implementation"
    assert not [name for name in files if name.endswith((".so", ".pyd", ".pyc"))]
    assert not [name for name in files if "/tests/" in name or name.split("/")[-1].startswith("test_")]


def test_a_python_with_only_the_asset_reads_an_aggregate_in_pure_python(
    default_stack: ExactlyOnceAggregationStack, template: Template
) -> None:
    asset = state_function_asset(default_stack, template)
    aggregate = kpl_aggregate([b'{"n": 1}', b'{"n": 2}'])
    read = subprocess.run(
        [
            sys.executable,
            "-S",
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(asset)!r})\n{READ_WITH_THE_ASSET_ONLY}",
        ],
        input=aggregate,
        capture_output=True,
        check=True,
    )
    assert read.stdout.decode().strip() == """python ['{"n": 1}', '{"n": 2}']"""
