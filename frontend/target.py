"""Which AggregateTable to watch, and how to reach it.

``--table-name`` (with ``AWS_ENDPOINT_URL`` for an emulator) names the table directly;
otherwise the pipeline is found as every operator tool finds it (`toolkit.pipeline`:
``--stack-name``, else the local runtime's ``.local/outputs.json`` or ``--outputs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.config import Config

from toolkit.pipeline import DEFAULT_OUTPUTS_PATH, TargetError, locate_pipeline, session

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource

#: A dashboard must stay responsive when the endpoint goes away: fail fast, retry next refresh.
_CLIENT_CONFIG = Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"})


@dataclass(frozen=True)
class TableTarget:
    """A resolved AggregateTable and how to reach it (``endpoint_url`` None: the SDK's own lookup)."""

    table_name: str
    region: str | None
    endpoint_url: str | None
    description: str

    def dynamodb(self) -> DynamoDBServiceResource:
        """A DynamoDB resource for this target (numbers come back as exact ``Decimal``)."""
        return session(self.region, self.endpoint_url).resource(
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
    pipeline = locate_pipeline(
        stack_name, region, outputs_path, needs=("aggregate_table",), outputs_must_exist=outputs_path is not None
    )
    if pipeline is None:
        raise TargetError(
            f"no pipeline to watch: {DEFAULT_OUTPUTS_PATH} does not exist (run `make up`), "
            "and neither --stack-name nor --table-name was given"
        )
    description = pipeline.source if pipeline.from_stack else f"local runtime ({pipeline.source})"
    return TableTarget(pipeline.aggregate_table, pipeline.region, pipeline.endpoint_url, description)
