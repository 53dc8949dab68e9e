"""cdk-nag AwsSolutions checks and cfn-lint's, and the cfn-lint rules reviewed and ignored (each with its reason).

`make synth` fails on any AwsSolutions error that is not suppressed, and on any cfn-lint
finding (error or warning) whose rule is not in `CFN_LINT_IGNORED_RULES`
(`stacks/template_lint.py` runs it). A cdk-nag suppression sits beside the construct or grant
it was reviewed for, scoped to it (and, for IAM5, to the exact wildcard), with its reason
(`stacks/stages.py`: the stream-read grant; `stacks/archive.py`: the delta objects' prefix;
`stacks/ingest.py`: the stream's customer-managed key, when `customerManagedKey` asks for one);
cfn-lint can only ignore a rule, for the whole template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from aws_cdk import Aspects, IAspect
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

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
