"""`ExactlyOnceAggregationStack`: the whole pipeline in one stack, one construct per concern."""

from __future__ import annotations

from typing import Any

from aws_cdk import Aspects, Stack
from constructs import Construct

from stacks.archive import ArchiveStage
from stacks.capacity import check_capacity
from stacks.checkov_skips import CheckovSkips
from stacks.dashboard import PipelineDashboard
from stacks.encryption import StackKeys
from stacks.functions import SharedFunctionAssets
from stacks.ingest import IngestStream
from stacks.monitoring import AlarmTopic, PipelineAlarms
from stacks.outputs import PipelineOutputs
from stacks.settings import PipelineSettings
from stacks.settings_guard import SettingsGuard
from stacks.stages import MapStage, ReduceStage, StateStage
from stacks.tables import PipelineTables


class ExactlyOnceAggregationStack(Stack):
    """Kinesis -> state -> StateTable -> map -> DeltaTable -> reduce -> AggregateTable (+ archive -> S3).

    Construct IDs are part of the resources' logical IDs: renaming one replaces the resource
    (and, for a table, its data), so they are deliberately short and stable.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: PipelineSettings, **kwargs: Any) -> None:
        super().__init__(
            scope,
            construct_id,
            description="Serverless exactly-once stream aggregation (Kinesis, Lambda, DynamoDB)",
            **kwargs,
        )
        self.settings = settings
        check_capacity(self, settings)
        self.keys = StackKeys(self, "Keys", settings=settings)
        self.ingest = IngestStream(self, "Ingest", settings=settings, key=self.keys.data_key)
        self.tables = PipelineTables(self, "Tables", settings=settings, key=self.keys.data_key)
        assets = SharedFunctionAssets(self, "FunctionAssets", settings=settings, key=self.keys.data_key)
        self.state_stage = StateStage(
            self, "State", settings=settings, assets=assets, ingest=self.ingest, tables=self.tables, keys=self.keys
        )
        self.map_stage = MapStage(self, "Map", settings=settings, assets=assets, tables=self.tables, keys=self.keys)
        self.reduce_stage = ReduceStage(
            self, "Reduce", settings=settings, assets=assets, tables=self.tables, keys=self.keys
        )
        self.archive_stage = ArchiveStage(
            self, "Archive", settings=settings, assets=assets, tables=self.tables, keys=self.keys
        )
        stages = (self.state_stage, self.map_stage, self.reduce_stage, self.archive_stage)
        functions = {
            "state": self.state_stage.handler.function,
            "map": self.map_stage.handler.function,
            "reduce": self.reduce_stage.handler.function,
            "archive": self.archive_stage.handler.function,
        }
        self.alarm_topic = AlarmTopic(self, "AlarmTopic", settings=settings, key=self.keys.topic_key)
        self.alarms = PipelineAlarms(
            self, "Alarms", settings=settings, functions=functions, topic=self.alarm_topic.topic
        )
        tables = {
            "StateTable": self.tables.state_table,
            "DeltaTable": self.tables.delta_table,
            "AggregateTable": self.tables.aggregate_table,
            "QuarantineTable": self.tables.quarantine_table,
        }
        capacities = {
            "StateTable": settings.state_table_capacity,
            "DeltaTable": settings.delta_table_capacity,
            "AggregateTable": settings.aggregate_table_capacity,
        }
        self.dashboard = PipelineDashboard(
            self,
            "Dashboard",
            stream=self.ingest.stream,
            functions=functions,
            tables=tables,
            provisioned_tables=frozenset(name for name, capacity in capacities.items() if capacity.provisioned),
        )
        # Every function is updated only after the guard accepted the new settings.
        self.settings_guard = SettingsGuard(
            self,
            "SettingsGuard",
            settings=settings,
            assets=assets,
            aggregate_table=self.tables.aggregate_table,
            keys=self.keys,
        )
        self.settings_guard.protect(
            self.state_stage.handler.function,
            self.map_stage.handler.function,
            self.reduce_stage.handler.function,
            self.archive_stage.handler.function,
        )
        self.keys.allow_environment_decryption(
            [
                *(stage.handler.role for stage in stages),
                self.settings_guard.handler.role,
                self.settings_guard.framework_role,
            ]
        )
        # checkov's accepted findings, each with its reason, in the resources' Metadata (stacks/checkov_skips.py).
        Aspects.of(self).add(CheckovSkips(customer_managed_key=settings.customer_managed_key))
        PipelineOutputs(
            self,
            "Outputs",
            ingest=self.ingest,
            tables=self.tables,
            archive_bucket=self.archive_stage.buckets.bucket,
            dashboard_url=self.dashboard.url,
            alarm_topic=self.alarm_topic.topic,
        )
