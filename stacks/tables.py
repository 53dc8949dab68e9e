"""The four DynamoDB tables of docs/architecture.md ("Tables").

`aws_dynamodb.Table` (CloudFormation `AWS::DynamoDB::Table`) rather than `TableV2`: the
local emulator's CloudFormation cannot create `AWS::DynamoDB::GlobalTable`, and the same
template must deploy both locally and to AWS.

Physical names are left to CloudFormation so that several stacks can live in one account;
the stack outputs carry them to every client.
"""

from __future__ import annotations

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from aggregation.delta_items import FIRST_SEQUENCE_NUMBER, STREAM_SHARD
from aggregation.names import AGGREGATE_KEY, EXPIRES_AT, QUARANTINE_RECORD_ID, TRADE_ID
from planner.inputs import TableCapacity
from stacks.settings import PipelineSettings

ON_DEMAND = TableCapacity()


class PipelineTables(Construct):
    """StateTable, DeltaTable, AggregateTable and QuarantineTable, all with the same safety net.

    Every table has point-in-time recovery, deletion protection (`tableDeletionProtection`, on by
    default whenever `removalPolicy` is `retain`: a table CloudFormation keeps is not one a stray
    `DeleteTable` should take) and server-side encryption with the AWS-managed DynamoDB key, or
    the stack's data key (`customerManagedKey`). StateTable, DeltaTable and AggregateTable are on-demand by default (the
    load follows the producer, nothing to size) or provisioned with auto scaling (`loadProfile` steady, which
    sizes the minimums from the declared rate, or `stateTableCapacity`, ...: cheaper under a steady load); the
    quarantine is always on-demand, and its items expire `quarantineTtlDays` after they were
    written (the state function writes their `ExpiresAt`).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: PipelineSettings, key: kms.IKey | None
    ) -> None:
        super().__init__(scope, construct_id)
        self._settings = settings
        self._key = key

        self.state_table = self._table(
            "StateTable",
            partition_key=TRADE_ID,
            # The map function needs the old image to take a moved or revalued trade out of its
            # previous aggregates, and the new image to put it into the new ones.
            stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            capacity=settings.state_table_capacity,
        )
        self.delta_table = self._table(
            "DeltaTable",
            # One partition per StateTable stream shard, items ordered by their first record: the
            # map function finds which records earlier items cover with one Query
            # (`aggregation.stream_positions`).
            partition_key=STREAM_SHARD,
            sort_key=FIRST_SEQUENCE_NUMBER,
            # The reduce function applies the delta item it receives; it never needs the old one
            # (there is none: delta items are only ever inserted).
            stream=dynamodb.StreamViewType.NEW_IMAGE,
            time_to_live_attribute=EXPIRES_AT,
            capacity=settings.delta_table_capacity,
        )
        self.aggregate_table = self._table(
            "AggregateTable",
            partition_key=AGGREGATE_KEY,
            # Expires the `#applied#...` idempotency markers once no stream can replay them.
            time_to_live_attribute=EXPIRES_AT,
            capacity=settings.aggregate_table_capacity,
        )
        self.quarantine_table = self._table(
            "QuarantineTable", partition_key=QUARANTINE_RECORD_ID, time_to_live_attribute=EXPIRES_AT
        )

    def _table(
        self,
        construct_id: str,
        *,
        partition_key: str,
        sort_key: str | None = None,
        stream: dynamodb.StreamViewType | None = None,
        time_to_live_attribute: str | None = None,
        capacity: TableCapacity = ON_DEMAND,
    ) -> dynamodb.Table:
        provisioned = capacity.provisioned
        table = dynamodb.Table(
            self,
            construct_id,
            partition_key=dynamodb.Attribute(name=partition_key, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=sort_key, type=dynamodb.AttributeType.STRING) if sort_key else None,
            billing_mode=dynamodb.BillingMode.PROVISIONED if provisioned else dynamodb.BillingMode.PAY_PER_REQUEST,
            # Provisioned tables start at their minimum; auto scaling takes them from there.
            write_capacity=capacity.min_write_capacity if provisioned else None,
            read_capacity=capacity.min_read_capacity if provisioned else None,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED if self._key else dynamodb.TableEncryption.AWS_MANAGED,
            encryption_key=self._key,
            deletion_protection=self._settings.table_deletion_protection,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            stream=stream,
            time_to_live_attribute=time_to_live_attribute,
            removal_policy=self._settings.removal_policy,
        )
        if provisioned:
            auto_scale(table, capacity)
        return table


def auto_scale(table: dynamodb.Table, capacity: TableCapacity) -> None:
    """Application Auto Scaling target tracking on the table's write and read capacity.

    CDK's own constructs: a scalable target per dimension (with the service-linked role
    DynamoDB auto scaling uses) and a target-tracking policy on the utilisation metric.
    """
    target = capacity.target_utilization_percent
    table.auto_scale_write_capacity(
        min_capacity=capacity.min_write_capacity, max_capacity=capacity.max_write_capacity
    ).scale_on_utilization(target_utilization_percent=target)
    table.auto_scale_read_capacity(
        min_capacity=capacity.min_read_capacity, max_capacity=capacity.max_read_capacity
    ).scale_on_utilization(target_utilization_percent=target)
