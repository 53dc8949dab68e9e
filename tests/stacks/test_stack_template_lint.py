"""cfn-lint on what `cdk synth` produces: zero findings, and every ignored rule has its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aws_cdk.assertions import Template

from stacks.nag import CFN_LINT_IGNORED_RULES
from stacks.template_lint import lint_template
from tests.stacks.stack_helpers import REPOSITORY_ROOT, synthesize, table_logical_id

PROVISIONED = {"mode": "provisioned", "minWriteCapacity": 50, "maxWriteCapacity": 4000}


def test_cfn_lint_finds_nothing_in_the_default_template(template: Template) -> None:
    assert lint_template(json.dumps(template.to_json())) == []


def test_cfn_lint_finds_nothing_with_provisioned_tables_and_a_batching_window() -> None:
    context = {
        "stateTableCapacity": PROVISIONED,
        "deltaTableCapacity": PROVISIONED,
        "aggregateTableCapacity": PROVISIONED,
        "mapBatchingWindowSeconds": 30,
        "reduceMemoryMb": 1769,
    }
    _stack, template = synthesize(context)
    assert lint_template(json.dumps(template.to_json())) == []


def test_cfn_lint_does_find_what_cloudformation_refuses(template: Template) -> None:
    broken = template.to_json()
    table_id = table_logical_id(template, "TradeID")
    broken["Resources"][table_id]["Properties"]["BillingMode"] = "ON_DEMAND"  # not a CloudFormation value
    findings = lint_template(json.dumps(broken))
    assert findings and all(finding.startswith("E") for finding in findings), findings
    assert any("ON_DEMAND" in finding for finding in findings)


def test_every_ignored_cfn_lint_rule_has_its_reason() -> None:
    for rule, reason in CFN_LINT_IGNORED_RULES.items():
        assert rule[0] in "EWI" and rule[1:].isdigit()
        assert len(reason) >= 80, rule


def test_the_command_line_fails_on_a_finding_and_passes_a_clean_assembly(template: Template, tmp_path: Path) -> None:
    """What `make synth` runs after `cdk synth`: exit 0 clean, 1 with a finding on stderr, 2 without a template."""

    def run(directory: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stacks.template_lint", str(directory)],
            cwd=REPOSITORY_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "Stack.template.json").write_text(json.dumps(template.to_json()))
    result = run(clean)
    assert result.returncode == 0, result.stderr
    assert "Stack.template.json: 0 finding(s)" in result.stdout

    broken = tmp_path / "broken"
    broken.mkdir()
    body = template.to_json()
    body["Resources"][table_logical_id(template, "TradeID")]["Properties"]["BillingMode"] = "ON_DEMAND"
    (broken / "Stack.template.json").write_text(json.dumps(body))
    result = run(broken)
    assert result.returncode == 1 and "ON_DEMAND" in result.stderr

    assert run(tmp_path / "empty").returncode == 2
