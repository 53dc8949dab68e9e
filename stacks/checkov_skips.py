"""Every checkov finding the stack accepts, with its reason: the list a security team reads.

checkov (`make synth` runs it: `stacks/template_scan.py`) reads a suppression from the
resource's own CloudFormation ``Metadata``, the way cdk-nag's sit beside the grant they cover::

    "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_117", "comment": "<the reason>"}]}}

(`checkov/cloudformation/context_parser.py`, `collect_skip_comments`, of the pinned release.)
`CHECKOV_SKIPS` is the one place those reasons are written; the aspect `CheckovSkips` copies each
into the Metadata of exactly the resources it names, nothing else: a resource added later is
scanned in full until someone reviews it and adds its construct path here. A skip marked
`without_customer_managed_key` applies only to the default template: with
`customerManagedKey: true` the stack does what the check asks (the log groups, the tables and
the functions' environments under the stack's key), so the check must pass there.

What checkov reported that the stack changed instead of accepting: with `customerManagedKey` the
functions' environment variables are encrypted with the stack's key too (CKV_AWS_173), and the
access-log bucket is versioned (CKV_AWS_21).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import jsii
from aws_cdk import CfnResource, IAspect, Stack
from constructs import IConstruct

STAGE_FUNCTIONS: Final[tuple[str, ...]] = (
    "State/StateFunction/Function",
    "Map/MapFunction/Function",
    "Reduce/ReduceFunction/Function",
    "Archive/Function/Function",
)
"""The four stages' functions, each invoked by its stream's event source mapping."""

SETTINGS_GUARD_FUNCTIONS: Final[tuple[str, ...]] = (
    "SettingsGuard/GuardFunction/Function",
    "SettingsGuard/Provider/framework-onEvent",
)
"""The settings guard's handler and CDK's provider function that CloudFormation calls (`stacks/settings_guard.py`)."""

FUNCTIONS: Final[tuple[str, ...]] = STAGE_FUNCTIONS + SETTINGS_GUARD_FUNCTIONS

LOG_GROUPS: Final[tuple[str, ...]] = (
    "State/StateFunction/LogGroup",
    "Map/MapFunction/LogGroup",
    "Reduce/ReduceFunction/LogGroup",
    "Archive/Function/LogGroup",
    "SettingsGuard/GuardFunction/LogGroup",
    "SettingsGuard/ProviderLogGroup",
)

TABLES: Final[tuple[str, ...]] = (
    "Tables/StateTable",
    "Tables/DeltaTable",
    "Tables/AggregateTable",
    "Tables/QuarantineTable",
)

ACCESS_LOG_BUCKET: Final[str] = "Archive/Storage/AccessLogs"


@dataclass(frozen=True)
class CheckovSkip:
    """One accepted finding: a checkov check, the resources it was reviewed for, and why."""

    check: str
    """checkov's check id (`CKV_AWS_117`)."""
    resource_type: str
    """The CloudFormation type of every resource in `constructs`."""
    constructs: tuple[str, ...]
    """Construct paths under the stack (`Map/MapFunction/Function`): the resources reviewed."""
    reason: str
    without_customer_managed_key: bool = False
    """Only without `customerManagedKey`: with it the stack does what the check asks."""


CHECKOV_SKIPS: Final[tuple[CheckovSkip, ...]] = (
    CheckovSkip(
        "CKV_AWS_116",  # "Ensure that AWS Lambda function is configured for a Dead Letter Queue (DLQ)"
        "AWS::Lambda::Function",
        FUNCTIONS,
        "A function's dead-letter queue receives only the events of failed asynchronous invocations. The "
        "four stage functions are invoked synchronously by their event source mappings, which retry a failed "
        "batch until it succeeds: exactly-once depends on it (a batch set aside would be missing from the "
        "totals), and the iterator-age alarms fire while a shard waits. The settings guard is invoked "
        "synchronously by its provider, and the provider by CloudFormation, which fails and rolls back the "
        "deploy when either fails: the failure shows where the operator deploys, and a queued event would be "
        "a stale deploy request that nobody can answer.",
    ),
    CheckovSkip(
        "CKV_AWS_117",  # "Ensure that AWS Lambda function is configured inside a VPC"
        "AWS::Lambda::Function",
        FUNCTIONS,
        "The functions call only AWS service APIs (Kinesis, DynamoDB, S3, CloudWatch, Lambda) and reach no "
        "resource in a VPC. Inside one they would need a NAT gateway or an interface endpoint per service "
        "(billed by the hour in every Availability Zone) to reach the same endpoints, over the same TLS, "
        "authorised by the same IAM roles and resource policies: a network boundary would add no control "
        "over what they can touch, which their roles already confine to the exact actions and resources.",
    ),
    CheckovSkip(
        "CKV_AWS_115",  # "Ensure that AWS Lambda function is configured for function-level concurrent execution limit"
        "AWS::Lambda::Function",
        FUNCTIONS,
        "The stage functions' concurrency is set by their event source mappings: at most one batch per shard "
        "and parallelization factor at a time, the lanes the capacity check sizes for targetMessagesPerSecond. "
        "A reserved concurrency would be a second limit that, set lower, throttles the mappings' own "
        "invocations and stalls shards, and, set to the bound, takes that much from the account's unreserved "
        "pool whether the pipeline runs or not. The settings guard and its provider run once per deploy.",
    ),
    CheckovSkip(
        "CKV_AWS_173",  # "Check encryption settings for Lambda environment variable"
        "AWS::Lambda::Function",
        FUNCTIONS,
        "Lambda encrypts every function's environment variables at rest, by default with its AWS managed key. "
        "These hold no secret: resource names, the metrics namespace and numeric settings, all readable in "
        "the template itself. customerManagedKey: true encrypts them with the stack's key, and the check "
        "passes there.",
        without_customer_managed_key=True,
    ),
    CheckovSkip(
        "CKV_AWS_158",  # "Ensure that CloudWatch Log Group is encrypted by KMS"
        "AWS::Logs::LogGroup",
        LOG_GROUPS,
        "CloudWatch Logs encrypts every log group at rest with keys it manages. A key of the stack's own "
        "adds control over who may decrypt, for $1 a month and a key policy that must admit CloudWatch Logs: "
        "customerManagedKey: true puts the six log groups under the stack's key (the key policy lets "
        "CloudWatch Logs of this account and region use it for its log groups only), and the check passes "
        "there.",
        without_customer_managed_key=True,
    ),
    CheckovSkip(
        "CKV_AWS_119",  # "Ensure DynamoDB Tables are encrypted using a KMS Customer Managed CMK"
        "AWS::DynamoDB::Table",
        TABLES,
        "DynamoDB encrypts every table at rest, by default with an AWS owned key at no cost. "
        "customerManagedKey: true encrypts the four tables, with the stream, the archive, the log groups and "
        "the functions' environments, under one rotated key of the stack's whose policy names every "
        "principal that may use it, and the check passes there.",
        without_customer_managed_key=True,
    ),
    CheckovSkip(
        "CKV_AWS_18",  # "Ensure the S3 bucket has access logging enabled"
        "AWS::S3::Bucket",
        (ACCESS_LOG_BUCKET,),
        "This bucket receives the archive bucket's server access logs. Logging it into itself would log "
        "every log delivery, a loop S3 advises against, and logging it into another bucket would need that "
        "one logged in turn. What is audited is access to the archive. The logs are versioned, so a deleted one "
        "stays recoverable for 30 days, and CloudTrail records changes to the bucket (and the calls on its "
        "objects where the account enables S3 data events).",
    ),
)
"""Every accepted checkov finding, with the resources it was reviewed for and its reason."""


def skips_for(construct_path: str, resource_type: str, *, customer_managed_key: bool) -> list[CheckovSkip]:
    """The skips that apply to the resource at `construct_path` (under the stack) with these settings."""
    return [
        skip
        for skip in CHECKOV_SKIPS
        if construct_path in skip.constructs
        and resource_type == skip.resource_type
        and not (skip.without_customer_managed_key and customer_managed_key)
    ]


def checkov_metadata(skips: Iterable[CheckovSkip]) -> dict[str, Any]:
    """The `checkov` Metadata entry checkov reads: `{"skip": [{"id", "comment"}, ...]}`."""
    return {"skip": [{"id": skip.check, "comment": skip.reason} for skip in skips]}


def construct_path_in_stack(resource: CfnResource) -> str:
    """`Map/MapFunction/Function` for the L1 resource `<stack>/Map/MapFunction/Function/Resource`."""
    stack_path = Stack.of(resource).node.path
    path = resource.node.path.removeprefix(f"{stack_path}/")
    return path.removesuffix("/Resource")


@jsii.implements(IAspect)
class CheckovSkips:
    """Writes each applicable `CHECKOV_SKIPS` entry into the Metadata of the resource it names."""

    def __init__(self, *, customer_managed_key: bool) -> None:
        self.customer_managed_key = customer_managed_key

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, CfnResource):
            return
        skips = skips_for(
            construct_path_in_stack(node), node.cfn_resource_type, customer_managed_key=self.customer_managed_key
        )
        if skips:
            node.add_metadata("checkov", checkov_metadata(skips))
