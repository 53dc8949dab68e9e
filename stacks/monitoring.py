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

Every alarm notifies the stack's alarm topic (`AlarmTopic`, its ARN the `AlarmTopicArn` output)
when it fires and again when it recovers (OK actions), so on AWS a stalled shard pages someone
instead of retrying silently until the stream's retention drops its records. `alarmEmail`
subscribes an address (AWS mails it a confirmation link first); chat, pager or ticketing
subscribe to the topic the same way. The topic is encrypted with a customer-managed key
(`stacks.encryption`: CloudWatch cannot publish to a topic under the AWS-managed SNS key) and
refuses requests without TLS.

Each alarm reads only this stack's series (a second stack in the account must not fire them):
its functions' own metrics under the stack's namespace (`aggregation.names.stack_metrics_namespace`),
AWS's by the names of this stack's functions, which CloudFormation generates from the stack name.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from aggregation.names import (
    ARCHIVE_SERVICE,
    CONFLICTING_DUPLICATES,
    NON_INSERT_RECORDS_SKIPPED,
    QUARANTINED_RECORDS,
    REDUCE_SERVICE,
    STATE_SERVICE,
    stack_metrics_namespace,
)
from stacks.settings import PipelineSettings


class AlarmTopic(Construct):
    """The SNS topic every alarm notifies, encrypted, TLS only, optionally with an email subscription."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: PipelineSettings, key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(
            self, "Topic", display_name="Exactly-once aggregation alarms", master_key=key, enforce_ssl=True
        )
        # CloudWatch publishes to the topic as a service: only for this account's alarms.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsOfThisAccount",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )
        if settings.alarm_email is not None:
            self.topic.add_subscription(subscriptions.EmailSubscription(settings.alarm_email))


class PipelineAlarms(Construct):
    """One IteratorAge alarm per stage function, and alarms on any count of the unexpected, all on `topic`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        functions: Mapping[str, lambda_.IFunction],
        topic: sns.ITopic,
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
        action = cloudwatch_actions.SnsAction(topic)
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)

    @property
    def alarms(self) -> list[cloudwatch.Alarm]:
        """Every alarm of the stack."""
        return [
            *self.iterator_age_alarms.values(),
            self.quarantine_alarm,
            self.conflict_alarm,
            *self.non_insert_alarms.values(),
        ]

    def _metric_alarm(self, construct_id: str, service: str, metric_name: str, description: str) -> cloudwatch.Alarm:
        """An alarm on any non-zero count of one of a function's own metrics (this stack's namespace only)."""
        return cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=description,
            metric=cloudwatch.Metric(
                namespace=stack_metrics_namespace(Stack.of(self).stack_name),
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
