"""Which AggregateTable to watch, and how to reach it.

Three ways, most explicit first: ``--table-name`` (with ``AWS_ENDPOINT_URL``
for an emulator), ``--stack-name`` (the ``AggregateTableName`` output of the
deployed CloudFormation stack), or the local runtime's ``.local/outputs.json``
written by ``make up``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource

#: Written by ``make up`` (docs/design.md, "Local runtime").
DEFAULT_OUTPUTS_PATH = Path(".local/outputs.json")

#: The CloudFormation output naming the table (architecture.md, stack outputs).
AGGREGATE_TABLE_OUTPUT = "AggregateTableName"

#: A dashboard must stay responsive when the endpoint goes away: fail fast, retry next refresh.
_CLIENT_CONFIG = Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"})


class TargetError(Exception):
    """The table cannot be found from what the user gave; the message says what to do."""


@dataclass(frozen=True)
class TableTarget:
    """A resolved AggregateTable and how to reach it."""

    table_name: str
    region: str | None
    endpoint_url: str | None
    description: str
    emulator: bool = False

    def dynamodb(self) -> DynamoDBServiceResource:
        """A DynamoDB resource for this target (numbers come back as exact ``Decimal``).

        The emulator accepts any credentials; dummy ones keep real ones away from it.
        """
        session = (
            boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local")
            if self.emulator
            else boto3.session.Session()
        )
        return session.resource(
            "dynamodb", region_name=self.region, endpoint_url=self.endpoint_url, config=_CLIENT_CONFIG
        )


def resolve_target(
    *,
    table_name: str | None,
    stack_name: str | None,
    outputs_path: Path | None,
    region: str | None,
) -> TableTarget:
    """The table to watch; raises :class:`TargetError` with a one-line explanation otherwise."""
    if table_name is not None:
        if not table_name.strip():
            raise TargetError("--table-name must not be empty")
        return TableTarget(table_name, region, None, f"table {table_name}")
    if stack_name is not None:
        return _from_stack(stack_name, region)
    path = outputs_path if outputs_path is not None else DEFAULT_OUTPUTS_PATH
    if path.exists():
        return _from_outputs(path)
    if outputs_path is not None:
        raise TargetError(f"{path} does not exist")
    raise TargetError(
        f"no pipeline to watch: {DEFAULT_OUTPUTS_PATH} does not exist (run `make up`), "
        "and neither --stack-name nor --table-name was given"
    )


def _from_outputs(path: Path) -> TableTarget:
    try:
        outputs = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TargetError(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise TargetError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(outputs, dict):
        raise TargetError(f"{path} is not a JSON object")
    table_name = outputs.get("aggregate_table")
    if not isinstance(table_name, str) or not table_name:
        raise TargetError(f"{path} has no aggregate_table (is `make up` still deploying?)")
    endpoint_url = outputs.get("endpoint_url")
    region = outputs.get("region")
    return TableTarget(
        table_name=table_name,
        region=region if isinstance(region, str) and region else "us-east-1",
        endpoint_url=endpoint_url if isinstance(endpoint_url, str) and endpoint_url else None,
        description=f"local runtime ({path})",
        emulator=True,
    )


def _from_stack(stack_name: str, region: str | None) -> TableTarget:
    try:
        cloudformation = boto3.session.Session().client("cloudformation", region_name=region, config=_CLIENT_CONFIG)
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as error:
        raise TargetError(f"stack {stack_name}: {error.response.get('Error', {}).get('Message', error)}") from None
    except BotoCoreError as error:
        raise TargetError(f"cannot look up stack {stack_name}: {error}") from None
    for stack in stacks:
        for output in stack.get("Outputs", []):
            if output.get("OutputKey") == AGGREGATE_TABLE_OUTPUT and output.get("OutputValue"):
                return TableTarget(
                    table_name=output["OutputValue"],
                    region=cloudformation.meta.region_name,
                    endpoint_url=None,
                    description=f"stack {stack_name}",
                )
    raise TargetError(f"stack {stack_name} has no {AGGREGATE_TABLE_OUTPUT} output")
