"""cdk-nag AwsSolutions checks and cfn-lint's, and the findings reviewed and accepted (each with its reason).

`make synth` fails on any AwsSolutions error that is not suppressed here, and on any
cfn-lint finding (error or warning) whose rule is not in `CFN_LINT_IGNORED_RULES`
(`stacks/template_lint.py` runs it). A cdk-nag suppression is scoped to the construct (and,
for IAM5, to the exact wildcard) it was reviewed for; cfn-lint can only ignore a rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from aws_cdk import Aspects, CfnResource, IAspect, Stack
from cdk_nag import AwsSolutionsChecks, NagPackSuppression, NagSuppressions
from constructs import IConstruct

if TYPE_CHECKING:
    from stacks.pipeline_stack import ExactlyOnceAggregationStack


CFN_LINT_IGNORED_RULES: Final[Mapping[str, str]] = {
    "W3005": (
        "Redundant DependsOn: CDK makes every Lambda function depend explicitly on its execution role "
        "(and the role's default policy, so the function is created only once its permissions exist) while "
        "the function also names the role with Fn::GetAtt. The duplicate edge changes nothing in the order "
        "CloudFormation creates or deletes resources; removing it would mean overriding CDK's own output."
    ),
}
"""cfn-lint rules ignored for the whole template, each with the reason it was accepted."""


def add_aws_solutions_checks(scope: IConstruct) -> None:
    """Run the AwsSolutions rule pack over everything under `scope` at synthesis."""
    checks: IAspect = AwsSolutionsChecks(verbose=True)
    Aspects.of(scope).add(checks)


def suppress_reviewed_findings(stack: ExactlyOnceAggregationStack) -> None:
    """Suppress the findings that were reviewed and accepted, each with its specific reason."""
    for stage in (stack.map_stage, stack.reduce_stage, stack.archive_stage):
        NagSuppressions.add_resource_suppressions(
            stage.handler.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    applies_to=["Resource::*"],
                    reason=(
                        "dynamodb:ListStreams on '*' comes from CDK's grantStreamRead for the "
                        "DynamoDB Streams event source mapping (Lambda documents it as a required "
                        "execution-role permission; AWSLambdaDynamoDBExecutionRole grants it the "
                        "same way). It lists stream ARNs and reads no data: DescribeStream, "
                        "GetRecords and GetShardIterator stay scoped to the one table's StreamArn."
                    ),
                )
            ],
            apply_to_children=True,
        )

    archive_bucket = stack.archive_stage.buckets.bucket.node.default_child
    assert isinstance(archive_bucket, CfnResource)
    NagSuppressions.add_resource_suppressions(
        stack.archive_stage.handler.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                applies_to=[f"Resource::<{Stack.of(stack).get_logical_id(archive_bucket)}.Arn>/deltas/*"],
                reason=(
                    "The archive function creates one object per delta item under deltas/<hh>/<batch "
                    "hash>.json; the keys are content-addressed and not known in advance, so the grant "
                    "is the deltas/ prefix. The bucket policy denies any PutObject there without "
                    "If-None-Match, so the grant can only ever create, never overwrite. It reads them "
                    "back (GetObject, which also authorises HeadObject) to learn which registry claim "
                    "created an object."
                ),
            )
        ],
        apply_to_children=True,
    )
