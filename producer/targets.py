"""Finding the pipeline: which stream and tables, at which endpoint and region.

Why one place: the producer, the verifier, the cleaner (and the frontend and
demo, which import this) must all talk to the same pipeline. The contract is in
docs/architecture.md:

* ``--stack-name`` → the CloudFormation outputs ``StreamName``,
  ``StateTableName``, ``DeltaTableName``, ``AggregateTableName``,
  ``QuarantineTableName`` of that stack (real AWS, or the emulator when
  ``AWS_ENDPOINT_URL`` is set);
* otherwise ``.local/outputs.json`` (written by ``make up``), whose
  ``endpoint_url`` and ``region`` apply to every client;
* otherwise, with ``AWS_ENDPOINT_URL`` set, the default stack's outputs there.

``AWS_ENDPOINT_URL``, when set, always wins over the file's endpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

DEFAULT_STACK_NAME = "ExactlyOnceAggregation"
DEFAULT_OUTPUTS_PATH = Path(".local/outputs.json")
LOCAL_DEFAULT_REGION = "us-east-1"
LOCAL_DUMMY_CREDENTIAL = "testing"
"""The emulator accepts any credentials (DESIGN.md); real ones are never needed locally."""

STACK_OUTPUT_KEYS = {
    "StreamName": "stream_name",
    "StateTableName": "state_table",
    "DeltaTableName": "delta_table",
    "AggregateTableName": "aggregate_table",
    "QuarantineTableName": "quarantine",
}
REQUIRED_FIELDS = ("stream_name", "state_table", "aggregate_table")


class TargetError(Exception):
    """The pipeline could not be located (no stack name, no outputs file, missing outputs)."""


@dataclass(frozen=True)
class PipelineTarget:
    """The resources of one deployed pipeline and how to reach them."""

    stream_name: str
    state_table: str
    aggregate_table: str
    delta_table: str = ""
    quarantine: str = ""
    region: str | None = None
    endpoint_url: str | None = None
    source: str = "explicit"
    """Where this came from (``stack X``, ``.local/outputs.json``), for messages."""

    @property
    def is_local(self) -> bool:
        """True when talking to an emulator rather than AWS."""
        return self.endpoint_url is not None

    def session(self) -> boto3.Session:
        """A session for this target; dummy credentials for an emulator without any."""
        if self.is_local and not os.environ.get("AWS_ACCESS_KEY_ID"):
            return boto3.Session(
                aws_access_key_id=LOCAL_DUMMY_CREDENTIAL,
                aws_secret_access_key=LOCAL_DUMMY_CREDENTIAL,
                region_name=self.region,
            )
        return boto3.Session(region_name=self.region)

    def _config(self, max_pool_connections: int, sdk_retries: int) -> Config:
        return Config(
            region_name=self.region,
            max_pool_connections=max(10, max_pool_connections),
            retries={"mode": "standard", "total_max_attempts": sdk_retries},
            connect_timeout=10,
            read_timeout=60,
        )

    def kinesis(self, max_pool_connections: int = 10, sdk_retries: int = 1) -> KinesisClient:
        """A Kinesis client; by default without SDK retries (the sender retries, and counts)."""
        return self.session().client(
            "kinesis", endpoint_url=self.endpoint_url, config=self._config(max_pool_connections, sdk_retries)
        )

    def dynamodb(self, max_pool_connections: int = 10, sdk_retries: int = 8) -> DynamoDBClient:
        """A low-level DynamoDB client: numbers stay exact strings until we make Decimals."""
        return self.session().client(
            "dynamodb", endpoint_url=self.endpoint_url, config=self._config(max_pool_connections, sdk_retries)
        )

    def client(self, service: str) -> Any:
        """A client of any other service (SQS for a queue quarantine), at this target."""
        return self.session().client(  # type: ignore[call-overload]
            service, endpoint_url=self.endpoint_url, config=self._config(10, 8)
        )


def _environment_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL") or None


def target_from_outputs(path: Path = DEFAULT_OUTPUTS_PATH) -> PipelineTarget:
    """The local runtime described by ``.local/outputs.json``."""
    try:
        outputs = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TargetError(f"cannot read {path}: {error}") from error
    if not isinstance(outputs, dict):
        raise TargetError(f"{path} is not a JSON object")
    missing = [name for name in (*REQUIRED_FIELDS, "endpoint_url") if not outputs.get(name)]
    if missing:
        raise TargetError(f"{path} lacks {', '.join(missing)}")
    region = outputs.get("region") or os.environ.get("AWS_DEFAULT_REGION") or LOCAL_DEFAULT_REGION
    return PipelineTarget(
        stream_name=str(outputs["stream_name"]),
        state_table=str(outputs["state_table"]),
        aggregate_table=str(outputs["aggregate_table"]),
        delta_table=str(outputs.get("delta_table") or ""),
        quarantine=str(outputs.get("quarantine") or ""),
        region=str(region),
        endpoint_url=_environment_endpoint() or str(outputs["endpoint_url"]),
        source=str(path),
    )


def target_from_stack(stack_name: str, region: str | None = None) -> PipelineTarget:
    """A deployed stack's outputs (``AWS_ENDPOINT_URL`` makes this work against the emulator)."""
    endpoint = _environment_endpoint()
    if endpoint is not None and region is None:
        region = os.environ.get("AWS_DEFAULT_REGION") or LOCAL_DEFAULT_REGION
    probe = PipelineTarget("", "", "", region=region, endpoint_url=endpoint)
    cloudformation: CloudFormationClient = probe.session().client(
        "cloudformation", endpoint_url=endpoint, config=probe._config(10, 8)
    )
    stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    if not stacks:
        raise TargetError(f"stack {stack_name} not found")
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}
    fields = {field: outputs.get(key, "") for key, field in STACK_OUTPUT_KEYS.items()}
    missing = [key for key, field in STACK_OUTPUT_KEYS.items() if field in REQUIRED_FIELDS and not fields[field]]
    if missing:
        raise TargetError(f"stack {stack_name} lacks the outputs {', '.join(missing)}")
    return PipelineTarget(
        region=region or cloudformation.meta.region_name,
        endpoint_url=endpoint,
        source=f"stack {stack_name}",
        **fields,
    )


def resolve_target(
    stack_name: str | None = None,
    region: str | None = None,
    outputs_path: Path = DEFAULT_OUTPUTS_PATH,
) -> PipelineTarget:
    """The pipeline the user means, following docs/architecture.md's lookup order."""
    if stack_name:
        return target_from_stack(stack_name, region)
    if outputs_path.exists():
        return target_from_outputs(outputs_path)
    if _environment_endpoint() is not None:
        return target_from_stack(DEFAULT_STACK_NAME, region)
    raise TargetError(
        f"no pipeline found: pass --stack-name NAME for a deployed stack, or run `make up` (it writes {outputs_path})"
    )
