"""checkov over the synthesized templates: what a security team's own scanner reports.

cdk-nag checks the stack against AWS's recommendations while it is built, cfn-lint checks the
template against CloudFormation's specification (`stacks/template_lint.py`); checkov is the
scanner a security team most often runs on a template before approving it for its accounts.
`make synth` runs it, pinned, over the default template and the hardened one (`HARDENED_CONTEXT`)
and fails on any failed check. Every finding the stack accepts is skipped in the template itself,
with its reason, from one list: `stacks.checkov_skips.CHECKOV_SKIPS`.

checkov lives in its own virtual environment, `.venv-checkov` (`make install`, from
requirements-checkov.lock with hashes): its pins (boto3 1.35, networkx < 2.7, packaging < 24)
conflict with the project's. It runs offline: `--skip-download` and no API key, so nothing is
fetched from Prisma Cloud, and no check for a newer checkov.

    python -m stacks.template_scan cdk.out [cdk.out/hardened ...]    # what `make synth` runs

Reproduce a count by hand (from the repository root, after `make synth`)::

    .venv-checkov/bin/checkov --framework cloudformation --skip-download --compact \\
        -f cdk.out/ExactlyOnceAggregationStack.template.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from toolkit.cli import exit_with

REPOSITORY_ROOT: Final[Path] = Path(__file__).resolve().parent.parent

CHECKOV: Final[Path] = REPOSITORY_ROOT / ".venv-checkov" / "bin" / "checkov"
"""The pinned checkov, in its own venv (`make install` builds it from requirements-checkov.lock)."""

CHECKOV_ENVIRONMENT: Final[Mapping[str, str]] = {
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true",  # no look-up of a newer release
    "BC_SKIP_MAPPING": "TRUE",  # no download of Prisma Cloud's check metadata (as --skip-download)
    "LOG_LEVEL": "WARNING",
}

HARDENED_CONTEXT: Final[Mapping[str, str]] = {
    "customerManagedKey": "true",
    "keyAdminRoleArn": "arn:aws:iam::111122223333:role/KeyAdmin",
    "keyUserRoleArns": "arn:aws:iam::111122223333:role/Producer",
    "archiveObjectLockDays": "365",
    "breakGlassRoleArn": "arn:aws:iam::111122223333:role/BreakGlass",
    "alarmEmail": "oncall@example.com",
}
"""The second template `make synth` scans (`-c key=value` each, into cdk.out/hardened): the
customer-managed key and every other optional protection on. The role ARNs are examples in AWS's
documentation account: the template is scanned, never deployed."""


@dataclass(frozen=True)
class Finding:
    """One checkov result on one resource."""

    check: str
    resource: str
    """checkov's name for it: `<type>.<logical id>`, as `AWS::Lambda::Function.MapMapFunction607F47A9`."""
    name: str
    comment: str = ""
    """A skip's reason (`suppress_comment`), as checkov read it from the template."""

    def __str__(self) -> str:
        return f"{self.check} {self.resource}: {self.name}"


@dataclass(frozen=True)
class Scan:
    """checkov's verdict on one template."""

    passed: int
    failed: tuple[Finding, ...]
    skipped: tuple[Finding, ...]
    parsing_errors: tuple[str, ...] = field(default=())

    @property
    def clean(self) -> bool:
        return not self.failed and not self.parsing_errors

    def summary(self) -> str:
        return f"{self.passed} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"


def _findings(results: Sequence[Mapping[str, Any]], path: str) -> tuple[Finding, ...]:
    return tuple(
        Finding(
            check=str(result["check_id"]),
            resource=str(result["resource"]),
            name=str(result["check_name"]),
            comment=str(result.get("check_result", {}).get("suppress_comment", "")),
        )
        for result in results
        if result["file_path"] == path
    )


def scan_templates(templates: Mapping[str, str], checkov: Path = CHECKOV) -> dict[str, Scan]:
    """checkov's verdict on each template of `templates` (any name -> its JSON text), in one run.

    One process for all of them: checkov takes seconds to start, and a few more per template.
    """
    if not checkov.exists():
        raise FileNotFoundError(f"{checkov} is missing: `make install` builds checkov's venv")
    files = {name: f"{index}.template.json" for index, name in enumerate(templates)}
    with tempfile.TemporaryDirectory(prefix="checkov-") as directory:
        root = Path(directory)
        for name, body in templates.items():
            (root / files[name]).write_text(body)
        result = subprocess.run(
            [
                str(checkov),
                "--directory",
                str(root),
                "--framework",
                "cloudformation",
                "--skip-download",
                "--compact",
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, **CHECKOV_ENVIRONMENT},
        )
    try:
        report = json.loads(result.stdout)
    except ValueError as error:
        raise RuntimeError(f"checkov exited {result.returncode} without a report: {result.stderr.strip()}") from error
    reports = report if isinstance(report, list) else [report]
    if [part.get("check_type") for part in reports] != ["cloudformation"]:
        raise RuntimeError(
            f"checkov reported {[part.get('check_type') for part in reports]}, not one CloudFormation report"
        )
    results = reports[0]["results"]
    scans: dict[str, Scan] = {}
    for name in templates:
        path = f"/{files[name]}"
        scans[name] = Scan(
            passed=len(_findings(results["passed_checks"], path)),
            failed=_findings(results["failed_checks"], path),
            skipped=_findings(results["skipped_checks"], path),
            parsing_errors=tuple(error for error in results.get("parsing_errors", []) if error.endswith(path)),
        )
    return scans


def templates_of(cloud_assemblies: Sequence[Path]) -> dict[str, str]:
    """Every stack template of the `cdk.out`-like directories, by its path."""
    return {
        str(template): template.read_text()
        for assembly in cloud_assemblies
        for template in sorted(assembly.glob("*.template.json"))
    }


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    assemblies = [Path(argument) for argument in arguments] or [Path("cdk.out")]
    templates = templates_of(assemblies)
    missing = [str(assembly) for assembly in assemblies if not any(assembly.glob("*.template.json"))]
    if missing:
        print(f"error: no *.template.json in {', '.join(missing)}: run cdk synth first", file=sys.stderr)
        return 2
    try:
        scans = scan_templates(templates)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    failed = False
    for name, scan in scans.items():
        for finding in scan.failed:
            print(f"{name}: {finding}", file=sys.stderr)
        for unparsed in scan.parsing_errors:
            print(f"{name}: checkov could not parse {unparsed}", file=sys.stderr)
        failed = failed or not scan.clean
        print(f"checkov {name}: {scan.summary()} (each skip's reason: stacks/checkov_skips.py)")
    return 1 if failed else 0


if __name__ == "__main__":
    exit_with(main)
