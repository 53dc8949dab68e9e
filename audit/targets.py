"""Which aggregate table and archive bucket to audit, and how to reach them.

The pipeline is found as every operator tool finds it (`toolkit.pipeline`): ``--stack-name``
(its ``AggregateTableName`` and ``ArchiveBucketName`` outputs), else ``.local/outputs.json``
or the ``--outputs`` file (``aggregate_table``, ``archive_bucket``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from botocore.config import Config

from toolkit.pipeline import DEFAULT_OUTPUTS_PATH, locate_pipeline, session

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client

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

    def s3(self) -> S3Client:
        client: S3Client = session(self.region, self.endpoint_url).client(
            "s3", endpoint_url=self.endpoint_url, config=CLIENT_CONFIG
        )
        return client

    def dynamodb(self) -> DynamoDBClient:
        client: DynamoDBClient = session(self.region, self.endpoint_url).client(
            "dynamodb", endpoint_url=self.endpoint_url, config=CLIENT_CONFIG
        )
        return client


def resolve_target(arguments: argparse.Namespace) -> AuditTarget:
    """The target the command line names (``--stack-name``, ``--outputs``, ``--region``)."""
    pipeline = locate_pipeline(
        arguments.stack_name,
        arguments.region,
        arguments.outputs,
        needs=("aggregate_table", "archive_bucket"),
        outputs_must_exist=arguments.outputs is not None,
    )
    if pipeline is None:
        raise AuditError(
            f"{DEFAULT_OUTPUTS_PATH} does not exist: run `make up`, or name a deployed stack with --stack-name"
        )
    return AuditTarget(pipeline.aggregate_table, pipeline.archive_bucket, pipeline.region, pipeline.endpoint_url)
