"""Which AggregateTable to watch, and how to reach it.

``--table-name`` (with ``AWS_ENDPOINT_URL`` for an emulator) names the table directly;
otherwise the pipeline is found as every operator tool finds it (`toolkit.pipeline`:
``--stack-name``, else the local runtime's ``.local/outputs.json`` or ``--outputs``).

A local runtime can be restarted under the dashboard (`make down`, `make up`: a new emulator
on a new port, maybe new table names): :class:`WatchedPipeline` re-reads the outputs file
whenever it changes and moves to the new stack on its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.config import Config

from frontend.snapshot import QuarantineSummary, TableReading
from frontend.table_reader import AggregateTableReader, QuarantineReader
from toolkit.liveness import UNKNOWN, Liveness, pipeline_liveness
from toolkit.pipeline import DEFAULT_OUTPUTS_PATH, PipelineTarget, TargetError, locate_pipeline, session

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
    quarantine_table: str | None = None
    pipeline: PipelineTarget | None = field(default=None, compare=False)
    """The pipeline the table belongs to, when known (not for --table-name): whether it runs (`liveness`)."""

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
    return TableTarget(
        pipeline.aggregate_table,
        pipeline.region,
        pipeline.endpoint_url,
        description,
        pipeline.quarantine or None,
        pipeline,
    )


class WatchedPipeline:
    """The tables to read, following the outputs file to a restarted local runtime.

    ``outputs_path`` None (a stack or a table named on the command line): the target never
    moves. Otherwise each read first looks at the file's modification time and size; when
    they changed and the file names a complete pipeline, the readers move to it (a file
    half-written by `make up`, or removed by `make down`, leaves them where they are, and
    the next read looks again).
    """

    def __init__(self, resolve: Callable[[], TableTarget], outputs_path: Path | None) -> None:
        self._resolve = resolve
        self._outputs_path = outputs_path
        self._version = self._outputs_version()
        self.target = resolve()
        self._table, self._quarantine = self._readers(self.target)
        self._liveness = self._liveness_of(self.target)

    @staticmethod
    def _liveness_of(target: TableTarget) -> Callable[[], Liveness]:
        return pipeline_liveness(target.pipeline) if target.pipeline is not None else lambda: UNKNOWN

    def liveness(self) -> Liveness:
        """Whether the pipeline runs (`toolkit.liveness`): its runner locally, its functions on AWS."""
        return self._liveness()

    @staticmethod
    def _readers(target: TableTarget) -> tuple[AggregateTableReader, QuarantineReader | None]:
        dynamodb = target.dynamodb()
        quarantine = QuarantineReader(dynamodb, target.quarantine_table) if target.quarantine_table else None
        return AggregateTableReader(dynamodb, target.table_name), quarantine

    def _outputs_version(self) -> tuple[int, int] | None:
        if self._outputs_path is None:
            return None
        try:
            status = os.stat(self._outputs_path)
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size

    def _follow(self) -> None:
        if self._outputs_path is None:
            return
        version = self._outputs_version()
        if version is None or version == self._version:
            return
        try:
            target = self._resolve()
        except TargetError:
            return  # still being written: look again on the next read
        self._version = version
        if target != self.target:
            self.target = target
            self._table, self._quarantine = self._readers(target)
            self._liveness = self._liveness_of(target)

    def table_name(self) -> str:
        """The AggregateTable's name (it changes when the runtime is redeployed)."""
        return self.target.table_name

    def read_table(self) -> TableReading:
        """Nodes and stats of the current AggregateTable (see :class:`AggregateTableReader`)."""
        self._follow()
        return self._table()

    def read_quarantine(self) -> QuarantineSummary | None:
        """The quarantine summary, None when the target names no QuarantineTable."""
        return self._quarantine() if self._quarantine is not None else None
