"""checkov on what `cdk synth` produces: no failed check on the default or the hardened template,
every skip in the template with its reason from `stacks.checkov_skips`, and a resource nobody
reviewed reported in full.

checkov runs once per session over every template these tests need (`conftest.checkov_scans`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import CfnResource
from aws_cdk.assertions import Template
from constructs import IConstruct

from stacks import ExactlyOnceAggregationStack
from stacks.checkov_skips import CHECKOV_SKIPS, CheckovSkip
from stacks.template_scan import HARDENED_CONTEXT, Finding, Scan, main
from tests.stacks.conftest import BARE_RESOURCES
from tests.stacks.stack_helpers import REPOSITORY_ROOT

REASONS = {(skip.check, skip.reason) for skip in CHECKOV_SKIPS}


def logical_id(finding: Finding) -> str:
    """`MapMapFunction607F47A9` of checkov's `AWS::Lambda::Function.MapMapFunction607F47A9`."""
    return finding.resource.rpartition(".")[2]


def pairs(findings: tuple[Finding, ...]) -> set[tuple[str, str]]:
    return {(finding.check, logical_id(finding)) for finding in findings}


def resource_at(stack: ExactlyOnceAggregationStack, path: str) -> CfnResource:
    """The CloudFormation resource of the construct at `path` under the stack."""
    node: IConstruct = stack
    for name in path.split("/"):
        node = node.node.find_child(name)
    resource = node if isinstance(node, CfnResource) else node.node.default_child
    assert isinstance(resource, CfnResource), path
    return resource


def applicable(customer_managed_key: bool) -> list[CheckovSkip]:
    return [skip for skip in CHECKOV_SKIPS if not (skip.without_customer_managed_key and customer_managed_key)]


@pytest.mark.parametrize("name", ["default", "hardened"])
def test_checkov_fails_nothing_and_every_skip_it_applied_carries_its_reason(
    checkov_scans: dict[str, Scan], name: str
) -> None:
    scan = checkov_scans[name]
    assert scan.failed == () and scan.parsing_errors == (), [str(finding) for finding in scan.failed]
    assert scan.passed > 100 and scan.skipped
    for finding in scan.skipped:
        assert (finding.check, finding.comment) in REASONS, finding


def test_the_counts_are_what_the_readme_says(checkov_scans: dict[str, Scan]) -> None:
    """docs/security.md quotes them; a change to the stack or to checkov's pin shows here first."""
    assert checkov_scans["default"].summary() == "139 passed, 0 failed, 35 skipped"
    assert checkov_scans["hardened"].summary() == "155 passed, 0 failed, 19 skipped"
    text = (REPOSITORY_ROOT / "docs" / "security.md").read_text()
    assert "139 passed, 0 failed, 35 skipped" in text and "155 passed, 0 failed, 19 skipped" in text


@pytest.mark.parametrize("name", ["default", "hardened"])
def test_every_skip_hides_a_finding_checkov_would_otherwise_report(checkov_scans: dict[str, Scan], name: str) -> None:
    """No skip for a check that passes anyway: removed, each one is a failure again, and nothing else is."""
    assert pairs(checkov_scans[f"{name} without skips"].failed) == pairs(checkov_scans[name].skipped)


@pytest.mark.parametrize("customer_managed_key", [False, True])
def test_each_listed_resource_exists_and_carries_exactly_its_skips_in_the_template(
    default_synthesis: tuple[ExactlyOnceAggregationStack, Template],
    hardened_synthesis: tuple[ExactlyOnceAggregationStack, Template],
    customer_managed_key: bool,
) -> None:
    stack, template = hardened_synthesis if customer_managed_key else default_synthesis
    expected: dict[str, list[dict[str, str]]] = {}
    for skip in applicable(customer_managed_key):
        for path in skip.constructs:
            resource = resource_at(stack, path)
            assert resource.cfn_resource_type == skip.resource_type, path
            expected.setdefault(stack.get_logical_id(resource), []).append({"id": skip.check, "comment": skip.reason})
    written: dict[str, Any] = {
        logical_id: resource["Metadata"]["checkov"]["skip"]
        for logical_id, resource in template.to_json()["Resources"].items()
        if "checkov" in resource.get("Metadata", {})
    }
    assert written == expected


def test_a_resource_nobody_reviewed_is_reported_in_full(checkov_scans: dict[str, Scan]) -> None:
    """A function, a table, a log group and a bucket added bare to the stack: checkov reports each,
    and the reviewed resources stay as clean as in the default template."""
    failed = checkov_scans["with bare resources"].failed
    by_resource: dict[str, set[str]] = {}
    for finding in failed:
        by_resource.setdefault(logical_id(finding), set()).add(finding.check)
    bare = {
        name: {check for lid, checks in by_resource.items() if lid.startswith(name) for check in checks}
        for name in BARE_RESOURCES
    }
    assert bare["BareFunction"] >= {"CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117", "CKV_AWS_173"}
    assert bare["BareTable"] >= {"CKV_AWS_119"}
    assert bare["BareLogGroup"] >= {"CKV_AWS_158"}
    assert bare["BareBucket"] >= {"CKV_AWS_18", "CKV_AWS_21"}
    assert all(lid.startswith(BARE_RESOURCES) for lid in by_resource), sorted(by_resource)


def test_the_reasons_read_as_a_list() -> None:
    seen: set[tuple[str, str]] = set()
    for skip in CHECKOV_SKIPS:
        assert re.fullmatch(r"CKV2?_AWS_\d+", skip.check), skip.check
        assert re.fullmatch(r"AWS::\w+::\w+", skip.resource_type), skip.resource_type
        assert len(skip.reason) >= 200 and skip.reason.endswith("."), skip.check
        assert skip.constructs, skip.check
        for path in skip.constructs:
            assert (skip.check, path) not in seen, (skip.check, path)
            seen.add((skip.check, path))


# --- make synth ----------------------------------------------------------------------------------


def synth_recipe() -> list[str]:
    makefile = (REPOSITORY_ROOT / "Makefile").read_text()
    recipe = makefile.split("\nsynth:", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in recipe.splitlines()[1:]]


def test_make_synth_lints_and_scans_the_default_and_the_hardened_template() -> None:
    recipe = synth_recipe()
    assert "cdk synth --quiet" in recipe
    assert "cdk synth --quiet --output cdk.out/hardened $(HARDENED_CONTEXT)" in recipe
    assert "$(BIN)/python -m stacks.template_lint cdk.out" in recipe
    assert "$(BIN)/python -m stacks.template_lint cdk.out/hardened" in recipe
    assert "$(BIN)/python -m stacks.template_scan cdk.out cdk.out/hardened" in recipe


def test_make_synth_hardens_with_the_settings_the_tests_scan() -> None:
    makefile = (REPOSITORY_ROOT / "Makefile").read_text()
    definition = makefile.split("\nHARDENED_CONTEXT :=", 1)[1].split("\nsynth:", 1)[0].replace("\\\n", " ")
    words = shlex.split(definition)
    assert words[0::2] == ["-c"] * len(HARDENED_CONTEXT)
    assert dict(word.split("=", 1) for word in words[1::2]) == HARDENED_CONTEXT


def test_checkov_is_pinned_hashed_and_apart_from_the_project_venv() -> None:
    lock = (REPOSITORY_ROOT / "requirements-checkov.lock").read_text()
    assert re.search(r"^checkov==3\.3\.30 \\\n    --hash=sha256:[0-9a-f]{64}", lock, re.MULTILINE)
    assert "checkov" not in (REPOSITORY_ROOT / "requirements.lock").read_text()
    makefile = (REPOSITORY_ROOT / "Makefile").read_text()
    recipe = makefile.split("$(CHECKOV_VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    installs = [line.strip() for line in recipe.splitlines() if " install " in line]
    assert installs == [
        "$(CHECKOV_PIP) install --require-hashes -r requirements-pip.lock",
        "$(CHECKOV_PIP) install --require-hashes --only-binary=:all: -r requirements-checkov.lock",
    ]
    install = makefile.split("\ninstall:", 1)[1].splitlines()[0]
    assert "$(CHECKOV_VENV)/.installed" in install.split()


# --- the command line ----------------------------------------------------------------------------


def test_the_command_line_fails_on_a_finding_and_passes_a_clean_scan(
    checkov_scans: dict[str, Scan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `make synth` runs: exit 0 clean, 1 with each failed check on stderr, 2 without a template."""
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "Stack.template.json").write_text("{}")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "Stack.template.json").write_text("{}")
    verdicts = {
        str(tmp_path / "clean" / "Stack.template.json"): checkov_scans["default"],
        str(tmp_path / "broken" / "Stack.template.json"): checkov_scans["with bare resources"],
    }
    monkeypatch.setattr("stacks.template_scan.scan_templates", lambda templates: {n: verdicts[n] for n in templates})

    assert main([str(tmp_path / "clean")]) == 0
    out = capsys.readouterr()
    assert "139 passed, 0 failed, 35 skipped" in out.out and out.err == ""

    assert main([str(tmp_path / "clean"), str(tmp_path / "broken")]) == 1
    out = capsys.readouterr()
    assert "CKV_AWS_117 AWS::Lambda::Function.BareFunction" in out.err
    assert "clean" not in out.err

    assert main([str(tmp_path / "empty")]) == 2
    assert "run cdk synth first" in capsys.readouterr().err
