"""The Kinesis data stream the producer writes to."""

from __future__ import annotations

from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from stacks.settings import PipelineSettings


class IngestStream(Construct):
    """An ON_DEMAND or PROVISIONED stream (`streamMode`), KMS-encrypted at rest with the AWS-managed `aws/kinesis` key.

    ON_DEMAND (the default, `loadProfile` spiky): capacity follows the producer; no shard count to plan or
    re-shard. PROVISIONED with `shardCount` shards (`loadProfile` steady, when cheaper: the shards that
    fill each to 70 % at the declared rate): a steady high rate costs several times
    less (shard-hours instead of every gigabyte in and out; `python -m benchmarks.capacity`
    prices both), but the shards are fixed and a rate above their write limits is throttled
    at the producer until someone reshards.

    `aws/kinesis` rather than a customer-managed key (cdk-nag AwsSolutions-KDS3): the data is
    still KMS-encrypted, but there is no key to pay for, to rotate, or to leave behind after
    `cdk destroy`, and neither producers nor the state function need KMS permissions. Switch
    to a customer-managed key only if a compliance regime demands one: `customerManagedKey`
    encrypts the stream with the stack's data key (`stacks.encryption`), and producers then need
    a role the key's policy names (`keyUserRoleArns`).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: PipelineSettings, key: kms.IKey | None
    ) -> None:
        super().__init__(scope, construct_id)
        stream = settings.stream_mode
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_mode=kinesis.StreamMode.PROVISIONED if stream.provisioned else kinesis.StreamMode.ON_DEMAND,
            shard_count=stream.shard_count if stream.provisioned else None,
            encryption=kinesis.StreamEncryption.KMS if key else kinesis.StreamEncryption.MANAGED,
            encryption_key=key,
            removal_policy=settings.removal_policy,
        )
        if key is not None:
            NagSuppressions.add_resource_suppressions(
                self.stream,
                [
                    NagPackSuppression(
                        id="AwsSolutions-KDS3",
                        reason=(
                            "The operator asked for a customer-managed key (customerManagedKey: true), which is "
                            "the point of the setting: a key policy naming who may read the stream, at the "
                            "cost of KMS requests per producer and consumer that aws/kinesis would not bill."
                        ),
                    )
                ],
            )
