"""The stack's KMS keys: one for the alarm topic always, and optionally one for all the data.

**The alarm topic's key.** An SNS topic encrypted with the AWS-managed `aws/sns` key cannot
receive CloudWatch alarm notifications (that key's policy cannot be changed to let CloudWatch
use it), so the topic always has a customer-managed key, rotated yearly, whose policy lets
CloudWatch (of this account only) encrypt the messages it publishes. Without
`customerManagedKey` that key's policy also trusts the account, as CDK's default does: the
account's IAM policies decide who else may use it.

**The data key (`customerManagedKey: true`).** One customer-managed key, rotated yearly, for the
Kinesis stream, the four tables, the archive bucket, every log group, every function's environment
variables and the alarm topic (the archive's access-log bucket keeps SSE-S3: S3 server access log
delivery supports nothing else).
Its policy does not trust the account: it names its principals, and nothing else may use it:

* `keyAdminRoleArn`: administers the key (and may use it, to inspect and recover data);
* each pipeline function's role: encrypt and decrypt through the services it calls; and every
  function's role (the settings guard's provider included) decrypt through Lambda, which reads
  the function's environment variables with it (Lambda also creates a grant for the role when
  CloudFormation creates the function; the statement keeps a function startable if that grant is
  ever lost, as when a role is replaced);
* `keyUserRoleArns`: producers and readers (the producer writing to the encrypted stream, an
  operator running the frontend or `audit`), through Kinesis, DynamoDB and S3 only;
* CDK's CloudFormation execution role: it creates, updates and schedules the deletion of the key
  (KMS refuses a key policy that would lock its creator out of `PutKeyPolicy`), so it administers
  the key; and creating the encrypted resources makes the services use the key on its behalf
  (DynamoDB's and Lambda's grants, for two), through those services only;
* the CloudWatch Logs service for this stack's account and region, and CloudWatch for the topic.

The data key is always retained, whatever `removalPolicy` says: the archive bucket is retained
(it is the audit trail), and a bucket whose key is gone cannot be read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from aws_cdk import Aws, Fn, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.settings import PipelineSettings

USE_ACTIONS: Final[list[str]] = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:DescribeKey"]
"""What a principal needs to read and write data a service encrypts with the key."""

DEPLOY_ACTIONS: Final[list[str]] = [*USE_ACTIONS, "kms:ReEncrypt*", "kms:CreateGrant"]
"""What creating the encrypted resources needs (DynamoDB and Kinesis create grants for themselves)."""

ADMINISTRATION_ACTIONS: Final[list[str]] = [
    "kms:Create*",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
]
"""AWS's "key administrators" set: manage the key, never use it for data."""

DATA_SERVICES: Final[tuple[str, ...]] = ("kinesis", "dynamodb", "s3", "logs", "sns", "lambda")


def via(*services: str) -> dict[str, dict[str, list[str]]]:
    """The condition limiting a key-policy statement to requests these services make on the caller's behalf."""
    return {"StringEquals": {"kms:ViaService": [f"{service}.{Aws.REGION}.amazonaws.com" for service in services]}}


class StackKeys(Construct):
    """`topic_key` always; `data_key` (the same key) only with `customerManagedKey`."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: PipelineSettings) -> None:
        super().__init__(scope, construct_id)
        self.data_key: kms.Key | None = None
        if settings.customer_managed_key:
            assert settings.key_admin_role_arn is not None  # the settings require one with the key
            self.data_key = kms.Key(
                self,
                "DataKey",
                description="Encrypts the pipeline's stream, tables, archive, logs, function settings and alarm topic",
                enable_key_rotation=True,
                # A policy of our own: CDK's default would trust the whole account.
                policy=iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="Administrator",
                            principals=[iam.ArnPrincipal(settings.key_admin_role_arn)],
                            actions=["kms:*"],
                            resources=["*"],
                        ),
                        iam.PolicyStatement(
                            sid="CloudFormationManagesTheKey",
                            principals=[iam.ArnPrincipal(self._deploy_role_arn())],
                            actions=ADMINISTRATION_ACTIONS,
                            resources=["*"],
                        ),
                        iam.PolicyStatement(
                            sid="CloudFormationCreatesEncryptedResources",
                            principals=[iam.ArnPrincipal(self._deploy_role_arn())],
                            actions=DEPLOY_ACTIONS,
                            resources=["*"],
                            conditions=via(*DATA_SERVICES),
                        ),
                    ]
                ),
                removal_policy=RemovalPolicy.RETAIN,
            )
            if settings.key_user_role_arns:
                self.data_key.add_to_resource_policy(
                    iam.PolicyStatement(
                        sid="ProducersAndReaders",
                        principals=[iam.ArnPrincipal(arn) for arn in settings.key_user_role_arns],
                        actions=USE_ACTIONS,
                        resources=["*"],
                        conditions=via("kinesis", "dynamodb", "s3"),
                    )
                )
            self._allow_log_groups(self.data_key)
            self.topic_key: kms.Key = self.data_key
        else:
            self.topic_key = kms.Key(
                self,
                "AlarmTopicKey",
                description="Encrypts the pipeline's alarm notifications",
                enable_key_rotation=True,
                removal_policy=settings.removal_policy,
            )
        self.topic_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchPublishesAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )

    def _deploy_role_arn(self) -> str:
        """The role CloudFormation deploys this stack with (CDK's bootstrap `cfn-exec-role`)."""
        synthesizer = Stack.of(self).synthesizer
        arn = getattr(synthesizer, "cloud_formation_execution_role_arn", None)
        if not isinstance(arn, str):
            raise TypeError("customerManagedKey needs CDK's default stack synthesizer (its CloudFormation role)")
        return Fn.sub(arn)  # its ${AWS::AccountId} and ${AWS::Region}, resolved at deploy time

    def _allow_log_groups(self, key: kms.Key) -> None:
        """CloudWatch Logs encrypts this account's and region's log groups with the key."""
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsEncryptsLogGroups",
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                        )
                    }
                },
            )
        )

    def allow_roles(self, roles: Iterable[iam.IRole], services: Iterable[str], sid: str) -> None:
        """Let the stack's `roles` use the data key through `services` (no-op without one)."""
        if self.data_key is None:
            return
        self.data_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                principals=[iam.ArnPrincipal(role.role_arn) for role in roles],
                actions=USE_ACTIONS,
                resources=["*"],
                conditions=via(*services),
            )
        )

    def allow_environment_decryption(self, roles: Iterable[iam.IRole]) -> None:
        """Let the functions' `roles` decrypt their environment variables through Lambda (no-op without a data key)."""
        if self.data_key is None:
            return
        self.data_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="FunctionsReadTheirEnvironment",
                principals=[iam.ArnPrincipal(role.role_arn) for role in roles],
                actions=["kms:Decrypt"],
                resources=["*"],
                conditions=via("lambda"),
            )
        )
