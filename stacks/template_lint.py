"""cfn-lint over the synthesized template: does CloudFormation itself accept it?

cdk-nag checks the stack against AWS's security recommendations; cfn-lint checks the
template against CloudFormation's resource specification (property names, types, allowed
values, references, what each region offers), which is where a template the CDK happily
synthesizes can still be refused by a real deployment. Every error and warning counts;
the rules ignored for the whole template are `stacks.nag.CFN_LINT_IGNORED_RULES`, each
with its reason.

    python -m stacks.template_lint [cdk.out]     # what `make synth` runs after `cdk synth`
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from cfnlint.api import lint
from cfnlint.config import ManualArgs

from stacks.nag import CFN_LINT_IGNORED_RULES
from toolkit.cli import exit_with

LINT_REGIONS = ("us-east-1",)
"""cfn-lint's own default region: the price table's, and the one the README deploys to."""


def lint_template(template_body: str) -> list[str]:
    """Every finding of cfn-lint on one template, one line each (`rule: message (path)`)."""
    config = ManualArgs(ignore_checks=list(CFN_LINT_IGNORED_RULES), regions=list(LINT_REGIONS))
    return [
        f"{match.rule.id}: {match.message} ({'/'.join(map(str, match.path))})"
        for match in lint(template_body, config=config)
    ]


def lint_cloud_assembly(cdk_out: Path) -> dict[str, list[str]]:
    """The findings per stack template of a `cdk.out/` directory."""
    return {template.name: lint_template(template.read_text()) for template in sorted(cdk_out.glob("*.template.json"))}


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    cdk_out = Path(arguments[0] if arguments else "cdk.out")
    findings = lint_cloud_assembly(cdk_out)
    if not findings:
        print(f"error: no *.template.json in {cdk_out}: run cdk synth first", file=sys.stderr)
        return 2
    failed = False
    for name, lines in findings.items():
        for line in lines:
            print(f"{name}: {line}", file=sys.stderr)
        failed = failed or bool(lines)
        print(f"cfn-lint {name}: {len(lines)} finding(s), ignoring {', '.join(sorted(CFN_LINT_IGNORED_RULES))}")
    return 1 if failed else 0


if __name__ == "__main__":
    exit_with(main)
