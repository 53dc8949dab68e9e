"""Small stacks for the runner tests, deployed through the real deployer.

`write_cloud_assembly` writes what `cdk synth` would (manifest, template, asset manifest,
asset directory), so the runner tests exercise the same path as `make up`: publish the
asset zip, create the stack in the emulator's CloudFormation, read it back, discover the
mappings and run the deployed code. `stream_stack_template` is one Kinesis stream (and,
optionally, a DynamoDB table with a stream) feeding the `recorder` test function.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FUNCTIONS_DIR = Path(__file__).parent / "runner_functions"
ASSET_HASH = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
BOOTSTRAP_BUCKET = "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"


def write_cloud_assembly(out_dir: Path, stack_name: str, template: Mapping[str, Any]) -> Path:
    """A cloud assembly directory with one stack and the test functions as its one zip asset."""
    out_dir.mkdir(parents=True, exist_ok=True)
    asset_dir = out_dir / f"asset.{ASSET_HASH}"
    if asset_dir.exists():
        shutil.rmtree(asset_dir)
    shutil.copytree(FUNCTIONS_DIR, asset_dir, ignore=shutil.ignore_patterns("__pycache__"))
    (out_dir / f"{stack_name}.template.json").write_text(json.dumps(template, indent=1))
    assets = {
        "version": "48.0.0",
        "files": {
            ASSET_HASH: {
                "displayName": "TestFunctions/Code",
                "source": {"path": asset_dir.name, "packaging": "zip"},
                "destinations": {
                    "current_account-current_region": {"bucketName": BOOTSTRAP_BUCKET, "objectKey": f"{ASSET_HASH}.zip"}
                },
            }
        },
        "dockerImages": {},
    }
    (out_dir / f"{stack_name}.assets.json").write_text(json.dumps(assets))
    manifest = {
        "version": "48.0.0",
        "artifacts": {
            f"{stack_name}.assets": {
                "type": "cdk:asset-manifest",
                "properties": {"file": f"{stack_name}.assets.json"},
            },
            stack_name: {
                "type": "aws:cloudformation:stack",
                "environment": "aws://unknown-account/unknown-region",
                "properties": {
                    "templateFile": f"{stack_name}.template.json",
                    "requiresBootstrapStackVersion": 6,
                    "bootstrapStackVersionSsmParameter": "/cdk-bootstrap/hnb659fds/version",
                },
                "dependencies": [f"{stack_name}.assets"],
            },
        },
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest))
    return out_dir


def stream_stack_template(
    *,
    record_log: Path,
    mapping: Mapping[str, Any] | None = None,
    function_environment: Mapping[str, Any] | None = None,
    timeout_seconds: int = 10,
    shard_count: int = 1,
    reserved_concurrency: int | None = None,
    table_mapping: Mapping[str, Any] | None = None,
    extra_resources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Kinesis stream -> recorder function (and optionally DynamoDB table stream -> same function);
    `extra_resources`: more resources for the template (an on-failure destination's queue)."""
    function: dict[str, Any] = {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Code": {"S3Bucket": {"Fn::Sub": BOOTSTRAP_BUCKET}, "S3Key": f"{ASSET_HASH}.zip"},
            "Handler": "recorder.handler",
            "Runtime": "python3.11",
            "Role": {"Fn::GetAtt": ["Role", "Arn"]},
            "Timeout": timeout_seconds,
            "MemorySize": 256,
            "Environment": {"Variables": {"RECORD_LOG": str(record_log), **(function_environment or {})}},
        },
    }
    if reserved_concurrency is not None:
        function["Properties"]["ReservedConcurrentExecutions"] = reserved_concurrency
    resources: dict[str, Any] = {
        "Role": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            },
        },
        "Stream": {"Type": "AWS::Kinesis::Stream", "Properties": {"ShardCount": shard_count}},
        "Recorder": function,
        "StreamMapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "FunctionName": {"Ref": "Recorder"},
                "EventSourceArn": {"Fn::GetAtt": ["Stream", "Arn"]},
                "StartingPosition": "TRIM_HORIZON",
                "BatchSize": 10,
                "MaximumRetryAttempts": -1,
                **(mapping or {}),
            },
        },
        "Alarm": {  # moto skips alarms; the deployer must tolerate that
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "ComparisonOperator": "GreaterThanThreshold",
                "EvaluationPeriods": 1,
                "MetricName": "Errors",
                "Namespace": "AWS/Lambda",
                "Period": 60,
                "Statistic": "Sum",
                "Threshold": 0,
            },
        },
    }
    outputs: dict[str, Any] = {"StreamName": {"Value": {"Ref": "Stream"}}}
    if table_mapping is not None:
        resources["Table"] = {
            "Type": "AWS::DynamoDB::Table",
            "Properties": {
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
                "BillingMode": "PAY_PER_REQUEST",
                "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
            },
        }
        resources["TableMapping"] = {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "FunctionName": {"Ref": "Recorder"},
                "EventSourceArn": {"Fn::GetAtt": ["Table", "StreamArn"]},
                "StartingPosition": "TRIM_HORIZON",
                "BatchSize": 10,
                **table_mapping,
            },
        }
        outputs["StateTableName"] = {"Value": {"Ref": "Table"}}
    resources.update(extra_resources or {})
    return {"Resources": resources, "Outputs": outputs}


def read_invocations(record_log: Path) -> list[dict[str, Any]]:
    """Every invocation the recorder logged, in order."""
    if not record_log.exists():
        return []
    return [json.loads(line) for line in record_log.read_text().splitlines() if line.strip()]


def wait_for(condition: Callable[[], bool], timeout_seconds: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_seconds} s waiting for {what}")
        time.sleep(0.05)
