"""mypy checks every aws_cdk module the code imports, and skips the services it does not.

`aws_cdk/__init__.py` imports each of the CDK's ~300 service modules, and mypy spent 77 of its
97 s on them (`mypy --timing-stats`). pyproject.toml skips `aws_cdk.*` and follows back only the
modules the code imports. A module imported but missing from that list would be typed `Any`
everywhere it is used, so its misuse (a wrong keyword, a wrong type) would pass `make typecheck`
silently: the list is checked against the imports here, both ways.
"""

from __future__ import annotations

import ast
import subprocess
import tomllib

from tests.environment import repository_root

ROOT = repository_root()


def imported_cdk_modules() -> set[str]:
    """Every `aws_cdk` module a tracked Python file imports, the package itself included."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    modules: set[str] = set()
    for path in tracked:
        for node in ast.walk(ast.parse((ROOT / path).read_text(), filename=path)):
            if isinstance(node, ast.Import):
                modules |= {alias.name for alias in node.names if alias.name.split(".")[0] == "aws_cdk"}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "aws_cdk":
                modules.add(node.module)
                if node.module == "aws_cdk":
                    modules |= {f"aws_cdk.{alias.name}" for alias in node.names if alias.name.startswith("aws_")}
    return modules


def cdk_modules_mypy_follows() -> set[str]:
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    skipped = [o for o in overrides if o.get("follow_imports") == "skip"]
    assert [o["module"] for o in skipped] == [["aws_cdk.*"]]
    return {
        module
        for override in overrides
        if override.get("follow_imports") == "normal"
        for module in override["module"]
        if module.split(".")[0] == "aws_cdk"
    }


def test_every_cdk_module_the_code_imports_is_type_checked_and_no_other_is_listed() -> None:
    imported = imported_cdk_modules()
    assert {"aws_cdk", "aws_cdk.aws_lambda", "aws_cdk.assertions"} <= imported
    assert cdk_modules_mypy_follows() == imported
