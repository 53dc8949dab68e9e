"""The CloudFormation outputs every client reads (docs/architecture.md, "Stack outputs").

Their keys are a contract with the producer, verifier, frontend and local deployer, so the
logical IDs are pinned instead of being derived from the construct path.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from aggregation.names import (
    AGGREGATE_TABLE_OUTPUT,
    ALARM_TOPIC_OUTPUT,
    ARCHIVE_BUCKET_OUTPUT,
    DASHBOARD_URL_OUTPUT,
    DELTA_TABLE_OUTPUT,
    METRICS_NAMESPACE_OUTPUT,
    QUARANTINE_TABLE_OUTPUT,
    STATE_TABLE_OUTPUT,
    STREAM_OUTPUT,
    stack_metrics_namespace,
)
from stacks.ingest import IngestStream
from stacks.tables import PipelineTables


class PipelineOutputs(Construct):
    """StreamName, StateTableName, DeltaTableName, AggregateTableName, QuarantineTableName,
    ArchiveBucketName, DashboardUrl, AlarmTopicArn, MetricsNamespace."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        ingest: IngestStream,
        tables: PipelineTables,
        archive_bucket: s3.IBucket,
        dashboard_url: str,
        alarm_topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        values = {
            STREAM_OUTPUT: (ingest.stream.stream_name, "Kinesis stream the producer writes trades to"),
            STATE_TABLE_OUTPUT: (tables.state_table.table_name, "Latest version of every trade"),
            DELTA_TABLE_OUTPUT: (tables.delta_table.table_name, "One delta item per map batch"),
            AGGREGATE_TABLE_OUTPUT: (tables.aggregate_table.table_name, "The aggregates"),
            QUARANTINE_TABLE_OUTPUT: (tables.quarantine_table.table_name, "Invalid input records"),
            ARCHIVE_BUCKET_OUTPUT: (archive_bucket.bucket_name, "Audit archive: every delta item, written once"),
            DASHBOARD_URL_OUTPUT: (
                dashboard_url,
                "CloudWatch dashboard of the pipeline (python -m producer send shows it)",
            ),
            ALARM_TOPIC_OUTPUT: (alarm_topic.topic_arn, "SNS topic every alarm notifies (subscribe to be told)"),
            METRICS_NAMESPACE_OUTPUT: (
                stack_metrics_namespace(Stack.of(self).stack_name),
                "CloudWatch namespace of this stack's function metrics (python -m producer send reads it)",
            ),
        }
        for key, (value, description) in values.items():
            output = CfnOutput(self, key, value=value, description=description)
            output.override_logical_id(key)
