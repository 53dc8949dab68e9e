"""CloudWatch alarms for the two ways the pipeline can go wrong without losing anything.

* **Falling behind** (IteratorAge): every mapping retries until success, so a stage that keeps
  failing does not drop records; it stalls, and its iterator age grows. Records older than the
  24-hour stream retention would be lost, so a stall has to page someone long before that.
* **Invalid input** (QuarantinedRecords): quarantined records never reach the aggregates by
  design; any of them means the producer sent something it should not have.
* **Conflicting duplicates** (ConflictingDuplicates): a message reused a TradeID and Version
  with other content; the first applied version stands, and the producer has a bug.
* **Unexpected stream records** (NonInsertRecordsSkipped, reduce and archive): the DeltaTable
  mapping's filter let through a record that is not an INSERT (a delta item was modified, which
  nothing in the pipeline does); the handler skipped it, and someone should find out why.

No alarm actions: where notifications go (SNS, chat, pager) is the operator's choice.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from aggregation.names import (
    ARCHIVE_SERVICE,
    CONFLICTING_DUPLICATES,
    METRICS_NAMESPACE,
    NON_INSERT_RECORDS_SKIPPED,
    QUARANTINED_RECORDS,
    REDUCE_SERVICE,
    STATE_SERVICE,
)
from stacks.settings import PipelineSettings


class PipelineAlarms(Construct):
    """One IteratorAge alarm per stage function, and alarms on any count of the unexpected."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        functions: Mapping[str, lambda_.IFunction],
    ) -> None:
        super().__init__(scope, construct_id)
        self.iterator_age_alarms: dict[str, cloudwatch.Alarm] = {}
        for stage, function in functions.items():
            self.iterator_age_alarms[stage] = cloudwatch.Alarm(
                self,
                f"{stage.capitalize()}IteratorAgeAlarm",
                alarm_description=(
                    f"The {stage} function is more than {settings.iterator_age_alarm_ms} ms behind its "
                    "stream: a batch keeps failing (it is retried until it succeeds) or the stage is "
                    "under-provisioned."
                ),
                metric=function.metric("IteratorAge", statistic=cloudwatch.Stats.MAXIMUM, period=Duration.minutes(1)),
                threshold=settings.iterator_age_alarm_ms,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                # No data means no traffic, not a stall.
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        self.quarantine_alarm = self._metric_alarm(
            "QuarantinedRecordsAlarm",
            STATE_SERVICE,
            QUARANTINED_RECORDS,
            "The state function quarantined invalid input records (see the QuarantineTable for "
            "each record's bytes and reason).",
        )
        self.conflict_alarm = self._metric_alarm(
            "ConflictingDuplicatesAlarm",
            STATE_SERVICE,
            CONFLICTING_DUPLICATES,
            "A message repeated a TradeID and Version with a different Value or Hierarchy; the first "
            "applied version stands and the conflicting record is in the QuarantineTable.",
        )
        self.non_insert_alarms = {
            service: self._metric_alarm(
                f"{service.capitalize()}NonInsertRecordsAlarm",
                service,
                NON_INSERT_RECORDS_SKIPPED,
                f"The {service} function was given DeltaTable stream records that are not INSERTs and "
                "skipped them: a delta item was modified (nothing in the pipeline modifies one), or the "
                "mapping's filter no longer drops such records.",
            )
            for service in (REDUCE_SERVICE, ARCHIVE_SERVICE)
        }

    def _metric_alarm(self, construct_id: str, service: str, metric_name: str, description: str) -> cloudwatch.Alarm:
        """An alarm on any non-zero count of one of a function's own metrics."""
        return cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=description,
            metric=cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name=metric_name,
                dimensions_map={"service": service},
                statistic=cloudwatch.Stats.SUM,
                period=Duration.minutes(1),
            ),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
