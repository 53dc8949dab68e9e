"""The audit archive: an S3 bucket that keeps every delta item for ever, and the function filling it.

The archive function is a second consumer of the DeltaTable stream, set up like reduce (INSERT
records only, retried until success), with a batching window (`archiveBatchingWindowSeconds`)
so that its invocations are large. Each invocation creates one batch object under ``deltas/``
and its receipt under ``metastore/receipts/`` (the registry), both with ``If-None-Match: *``
(`aggregation.archive`). The bucket policy makes conditions mandatory for every writer, the
archive role included: an unconditional ``PutObject`` under ``deltas/`` or ``metastore/`` is denied.

Why the bucket is always retained (whatever `removalPolicy` says): it is the audit trail and
the disaster-recovery source of the aggregates; deleting it with the stack would defeat both.

Why versioning is on: the function cannot delete or overwrite an object (no DeleteObject
grant, and the policy forces write-once), but a person or another tool with broader rights
could; versioning keeps what they removed recoverable (`python -m audit reconcile` finds a batch
object gone missing by its receipt). Nothing is rewritten any more; the counting registry of
earlier releases was, on every batch, so noncurrent versions under ``metastore/`` expire after 30
days instead of accumulating. The access-log bucket is versioned too, for the same reason: a
server access log deleted before `archiveAccessLogRetentionDays` stays recoverable for 30 days.

Why only the archive role may write or delete there (`deny_writes_but_the_archive_role`): `audit
rebuild` trusts what it finds under ``deltas/`` and in the registry, so any principal of the
account with a broad `s3:PutObject` (an administrator, a CI role) could otherwise add a delta
object or a receipt, and If-None-Match would stop only overwrites. The bucket policy denies
writes and deletes of both, and of the earlier releases' registry, to everyone but the archive
function's role and, when `breakGlassRoleArn` is set, that one role for repairs.

Object Lock (`archiveObjectLockDays`): the bucket is created with Object Lock enabled and the
archive function gives every batch object a governance-mode retention of that many days, so not
even the archive role can delete a version (a principal with `s3:BypassGovernanceRetention`
can, deliberately). Only ``deltas/``, as before receipts existed: a receipt is a record about an
object, and losing one is reported, not a loss of data. S3 can enable Object Lock only on a
versioned bucket; switching it on for an already deployed bucket is supported by S3 but not reversible.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from aggregation.names import (
    ARCHIVE_SERVICE,
    DELTA_PREFIX,
    LEGACY_REGISTRY_KEY,
    METASTORE_PREFIX,
    RECEIPT_PREFIX,
    REGISTRY_SHARD_PREFIX,
)
from planner.inputs import ArchiveLifecycle
from stacks.encryption import StackKeys
from stacks.functions import PipelineFunction, SharedFunctionAssets
from stacks.settings import PipelineSettings
from stacks.stages import consume_table_stream
from stacks.tables import PipelineTables

ACCESS_LOG_PREFIX: Final = "archive-bucket/"
SUPERSEDED_REGISTRY_VERSION_DAYS: Final = 30
ARCHIVE_MEMORY_MB: Final = 256
"""The archive function's memory (the planner's `planner.archive.ARCHIVE_MEMORY_MB`, a test keeps them equal)."""
DELETED_ACCESS_LOG_DAYS: Final = 30
"""How long an access log stays recoverable once deleted, or once `archiveAccessLogRetentionDays` expired it."""


def written_object_arns(bucket: s3.IBucket) -> list[str]:
    """What the archive function creates: batch objects ``deltas/*`` and receipts ``metastore/receipts/*``."""
    return [bucket.arn_for_objects(f"{DELTA_PREFIX}*"), bucket.arn_for_objects(f"{RECEIPT_PREFIX}*")]


def protected_object_arns(bucket: s3.IBucket) -> list[str]:
    """Everything `audit` trusts: what the function writes, and the counting registry of earlier
    releases (``metastore/registry/<k>.json``, ``metastore/registry.json``), read after an upgrade."""
    return [
        *written_object_arns(bucket),
        bucket.arn_for_objects(f"{REGISTRY_SHARD_PREFIX}*"),
        bucket.arn_for_objects(LEGACY_REGISTRY_KEY),
    ]


def deny_unconditional_puts(bucket: s3.IBucket) -> list[iam.PolicyStatement]:
    """The two Deny statements that make conditional writes mandatory (S3's conditional-write keys).

    * ``deltas/*``: denied unless the request carries ``If-None-Match`` (write-once objects);
    * ``metastore/*``: denied unless it carries ``If-Match`` or ``If-None-Match`` (receipts are
      written once; the earlier releases' registry was updated by compare-and-swap).

    Principal ``*`` binds every caller, the archive role included: conditional writes only
    protect anything if *no* writer can bypass them. ``s3:ObjectCreationOperation`` limits the
    deny to requests that create an object (PutObject, CompleteMultipartUpload); the parts of
    a multipart upload cannot carry the headers, and their completion still must.
    """
    creating = {"Bool": {"s3:ObjectCreationOperation": "true"}}
    return [
        iam.PolicyStatement(
            sid="DenyDeltaObjectWritesWithoutIfNoneMatch",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=["s3:PutObject"],
            resources=[bucket.arn_for_objects(f"{DELTA_PREFIX}*")],
            conditions={"Null": {"s3:if-none-match": "true"}, **creating},
        ),
        iam.PolicyStatement(
            sid="DenyMetastoreWritesWithoutIfMatchOrIfNoneMatch",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=["s3:PutObject"],
            resources=[bucket.arn_for_objects(f"{METASTORE_PREFIX}*")],
            # Keys inside one operator are ANDed: denied only when BOTH headers are absent.
            conditions={"Null": {"s3:if-match": "true", "s3:if-none-match": "true"}, **creating},
        ),
    ]


STORAGE_CLASSES: Final = {
    "STANDARD_IA": s3.StorageClass.INFREQUENT_ACCESS,
    "GLACIER_IR": s3.StorageClass.GLACIER_INSTANT_RETRIEVAL,
    "GLACIER": s3.StorageClass.GLACIER,
    "DEEP_ARCHIVE": s3.StorageClass.DEEP_ARCHIVE,
}
"""`archiveLifecycle`'s storage classes (`planner.inputs.ARCHIVE_STORAGE_CLASSES` but STANDARD)."""


def archived_delta_transitions(lifecycle: ArchiveLifecycle) -> list[s3.LifecycleRule]:
    """The rule moving archived batch objects to a cheaper class after `afterDays`, if one is set.

    Only `deltas/`: receipts are small and must stay readable at once. S3 leaves objects below
    128 KB where they are (its default minimum for transitions since September 2024), which is
    right for a small object (a quiet stream's invocation, or a per-item object of an earlier
    release): the infrequent-access and Glacier classes would bill it as 128 KB or add 40 KB.
    A batch object holds an invocation's items, usually well above it (the planner prices both).
    """
    if not lifecycle.transitions:
        return []
    return [
        s3.LifecycleRule(
            id="MoveArchivedDeltas",
            prefix=DELTA_PREFIX,
            transitions=[
                s3.Transition(
                    storage_class=STORAGE_CLASSES[lifecycle.storage_class],
                    transition_after=Duration.days(lifecycle.after_days),
                )
            ],
        )
    ]


PROTECTED_OBJECT_ACTIONS: Final[list[str]] = [
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:PutObjectRetention",
    "s3:PutObjectLegalHold",
    "s3:ReplicateObject",
    "s3:ReplicateDelete",
]
"""Every object action that creates, replaces, deletes or unlocks a batch object or a registry record."""


def deny_writes_but_the_archive_role(
    bucket: s3.IBucket, archive_role: iam.IRole, break_glass_role_arn: str | None
) -> iam.PolicyStatement:
    """Deny creating, deleting or unlocking archived objects and the registry to all but the archive role.

    `aws:PrincipalArn` is the role's ARN for any of its sessions, so the condition names roles, not
    sessions. A break-glass role, when configured, is the one exception for a human repair.
    """
    writers = [archive_role.role_arn, *([break_glass_role_arn] if break_glass_role_arn else [])]
    return iam.PolicyStatement(
        sid="DenyArchiveWritesExceptTheArchiveRole",
        effect=iam.Effect.DENY,
        principals=[iam.AnyPrincipal()],
        actions=PROTECTED_OBJECT_ACTIONS,
        resources=protected_object_arns(bucket),
        conditions={"ArnNotEquals": {"aws:PrincipalArn": writers}},
    )


class ArchiveBuckets(Construct):
    """The archive bucket and the bucket receiving its server access logs."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: PipelineSettings, key: kms.IKey | None
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs_bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the only encryption S3 log delivery supports
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # Versioned, so a log deleted before its time (covering someone's tracks) stays recoverable
            # for DELETED_ACCESS_LOG_DAYS; S3 log delivery never overwrites an object, so versioning
            # stores nothing more until a log is deleted or expires.
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs",
                    expiration=Duration.days(settings.archive_access_log_retention_days),
                    noncurrent_version_expiration=Duration.days(DELETED_ACCESS_LOG_DAYS),
                ),
                s3.LifecycleRule(id="RemoveExpiredDeleteMarkers", expired_object_delete_marker=True),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.KMS if key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=key,
            # An S3 Bucket Key: one data key per bucket and period instead of a KMS call per object.
            bucket_key_enabled=True if key else None,
            object_lock_enabled=True if settings.archive_object_lock_days else None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix=ACCESS_LOG_PREFIX,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireSupersededRegistryVersions",
                    prefix=METASTORE_PREFIX,
                    noncurrent_version_expiration=Duration.days(SUPERSEDED_REGISTRY_VERSION_DAYS),
                ),
                s3.LifecycleRule(
                    id="AbortIncompleteMultipartUploads", abort_incomplete_multipart_upload_after=Duration.days(1)
                ),
                *archived_delta_transitions(settings.archive_lifecycle),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        for statement in deny_unconditional_puts(self.bucket):
            self.bucket.add_to_resource_policy(statement)


class ArchiveStage(Construct):
    """DeltaTable stream (INSERTs) -> archive function -> a write-once batch object and its receipt per invocation."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        assets: SharedFunctionAssets,
        tables: PipelineTables,
        keys: StackKeys,
    ) -> None:
        super().__init__(scope, construct_id)
        self.buckets = ArchiveBuckets(self, "Storage", settings=settings, key=keys.data_key)
        bucket = self.buckets.bucket
        self.handler = PipelineFunction(
            self,
            "Function",
            settings=settings,
            assets=assets,
            service=ARCHIVE_SERVICE,
            handler="archive_function.handler.lambda_handler",
            description="Archives each invocation's delta items in one write-once S3 object, with its receipt",
            memory_size=ARCHIVE_MEMORY_MB,
            # Two conditional writes (each may back off on 409) of up to a 6 MB payload's items.
            timeout=Duration.seconds(120),
            environment={
                "ARCHIVE_BUCKET": bucket.bucket_name,
                "ARCHIVE_OBJECT_LOCK_DAYS": str(settings.archive_object_lock_days),
                **settings.fault_injection_environment("ARCHIVE"),
            },
        )
        # Retries need not repeat the batch's boundaries, nor its order: an object's key is the set
        # of its items, and readers count each item once (`aggregation.archive`). So a shard's
        # batches may run side by side (`archiveParallelizationFactor`: the archive's lanes), and
        # wait to fill (`archiveBatchingWindowSeconds`: two requests an invocation, whatever its size).
        window = settings.archive_batching_window_seconds
        self.event_source = consume_table_stream(
            self.handler,
            tables.delta_table,
            batch_size=settings.archive_batch_size,
            inserts_only=True,
            max_batching_window=Duration.seconds(window) if window else None,
            parallelization_factor=settings.archive_parallelization_factor,
        )
        self.handler.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="WriteBatchObjectsAndReceipts", actions=["s3:PutObject"], resources=written_object_arns(bucket)
            )
        )
        if settings.archive_object_lock_days:
            # The retention sent with each batch object's PutObject is authorised as this action.
            self.handler.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="LockDeltaObjects",
                    actions=["s3:PutObjectRetention"],
                    resources=[bucket.arn_for_objects(f"{DELTA_PREFIX}*")],
                )
            )
        bucket.add_to_resource_policy(
            deny_writes_but_the_archive_role(bucket, self.handler.role, settings.break_glass_role_arn)
        )
        keys.allow_roles([self.handler.role], ["dynamodb", "s3"], sid="ArchiveFunction")
        # It reads nothing from the bucket: a 412 already says the very bytes are there (every key
        # names its content), so it has no GetObject, and no ListBucket either.
        bucket_resource = bucket.node.default_child
        assert isinstance(bucket_resource, CfnResource)
        bucket_arn = f"Resource::<{Stack.of(self).get_logical_id(bucket_resource)}.Arn>"
        NagSuppressions.add_resource_suppressions(
            self.handler.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    applies_to=[f"{bucket_arn}/{DELTA_PREFIX}*"],
                    reason=(
                        "The archive function creates one object per invocation under deltas/<hh>/<object "
                        "id>.batch.json; the keys are content-addressed (the set of delta items the object "
                        "holds) and not known in advance, so the grant is the deltas/ prefix. The bucket "
                        "policy denies any PutObject there without If-None-Match, so the grant can only ever "
                        "create, never overwrite."
                    ),
                ),
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    applies_to=[f"{bucket_arn}/{RECEIPT_PREFIX}*"],
                    reason=(
                        "The registry is one receipt per batch object, metastore/receipts/<hh>/<object id>.json, "
                        "content-addressed like the objects; the grant is their prefix. The bucket policy denies "
                        "any PutObject under metastore/ without If-Match or If-None-Match, and the function "
                        "sends If-None-Match: receipts are created once, never rewritten."
                    ),
                ),
            ],
            apply_to_children=True,
        )
