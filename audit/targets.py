"""Which aggregate table and archive bucket to audit, and how to reach them.

Two ways, as for the producer and verifier (docs/architecture.md):

* ``--stack-name NAME``: the CloudFormation outputs ``AggregateTableName`` and
  ``ArchiveBucketName`` of that stack (real AWS; the emulator when ``AWS_ENDPOINT_URL`` is set);
* otherwise ``.local/outputs.json`` (``make up``): keys ``aggregate_table``, ``archive_bucket``,
  ``endpoint_url``, ``region``.

``AWS_ENDPOINT_URL``, when set, wins over the file's endpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client

DEFAULT_OUTPUTS_PATH: Final = Path(".local/outputs.json")
LOCAL_DUMMY_CREDENTIAL: Final = "testing"
CLIENT_CONFIG: Final = Config(retries={"mode": "standard", "max_attempts": 8}, connect_timeout=5, read_timeout=30)


class AuditError(Exception):
    """Anything that stops an audit command; the message is one line for the operator."""


@dataclass(frozen=True)
class AuditTarget:
    """The aggregate table and archive bucket of one deployed pipeline."""

    aggregate_table: str
    archive_bucket: str
    region: str | None = None
    endpoint_url: str | None = None

    def _client_arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = {"config": CLIENT_CONFIG}
        if self.region:
            arguments["region_name"] = self.region
        if self.endpoint_url:
            arguments["endpoint_url"] = self.endpoint_url
            if not os.environ.get("AWS_ACCESS_KEY_ID") and not os.environ.get("AWS_PROFILE"):
                # The emulator accepts any credentials (docs/design.md, "Local runtime"); none are needed locally.
                arguments["aws_access_key_id"] = LOCAL_DUMMY_CREDENTIAL
                arguments["aws_secret_access_key"] = LOCAL_DUMMY_CREDENTIAL
        return arguments

    def s3(self) -> S3Client:
        return boto3.client("s3", **self._client_arguments())

    def dynamodb(self) -> DynamoDBClient:
        return boto3.client("dynamodb", **self._client_arguments())


def target_from_outputs_file(path: Path) -> AuditTarget:
    """The target `make up` wrote to ``.local/outputs.json``."""
    try:
        outputs = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AuditError(f"{path} does not exist: run `make up`, or name a deployed stack with --stack-name") from None
    except (OSError, ValueError) as error:
        raise AuditError(f"{path} is not readable JSON: {error}") from None
    if not isinstance(outputs, dict):
        raise AuditError(f"{path} is not a JSON object")
    missing = [key for key in ("aggregate_table", "archive_bucket") if not outputs.get(key)]
    if missing:
        raise AuditError(f"{path} lacks {', '.join(missing)} (is the archive deployed? run `make up` again)")
    return AuditTarget(
        aggregate_table=str(outputs["aggregate_table"]),
        archive_bucket=str(outputs["archive_bucket"]),
        region=str(outputs.get("region") or "") or None,
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or str(outputs.get("endpoint_url") or "") or None,
    )


def target_from_stack(stack_name: str, region: str | None) -> AuditTarget:
    """The target named by a deployed stack's CloudFormation outputs."""
    endpoint_url = os.environ.get("AWS_ENDPOINT_URL") or None
    probe = AuditTarget("", "", region=region, endpoint_url=endpoint_url)
    cloudformation = boto3.client("cloudformation", **probe._client_arguments())
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as error:
        raise AuditError(f"stack {stack_name}: {error.response.get('Error', {}).get('Message', error)}") from None
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}
    missing = [key for key in ("AggregateTableName", "ArchiveBucketName") if key not in outputs]
    if missing:
        raise AuditError(f"stack {stack_name} has no output {', '.join(missing)} (deployed before the archive?)")
    return AuditTarget(
        aggregate_table=outputs["AggregateTableName"],
        archive_bucket=outputs["ArchiveBucketName"],
        region=region,
        endpoint_url=endpoint_url,
    )
