"""`make` says once, in one line, when the machine's Node.js is older than the pinned CDK supports."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from local.deploy import deployer
from toolkit.node_runtime import SUPPORTED_NODE_MAJORS

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def make_help_with_node(tmp_path: Path, version: str) -> list[str]:
    """`make help`'s lines on a machine whose `node --version` says ``version``."""
    bin_directory = tmp_path / "bin"
    bin_directory.mkdir()
    node = bin_directory / "node"
    node.write_text(f"#!/bin/sh\necho {version}\n")
    node.chmod(0o755)
    environment = {name: value for name, value in os.environ.items() if not name.startswith("MAKE")}
    environment["PATH"] = f"{bin_directory}:{environment['PATH']}"
    result = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=REPOSITORY_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return (result.stdout + result.stderr).splitlines()


@pytest.mark.parametrize("version", ["v18.19.0", "v20.20.2"])
def test_an_older_node_gets_one_warning_line(tmp_path: Path, version: str) -> None:
    warnings = [line for line in make_help_with_node(tmp_path, version) if "Node.js" in line]
    major = version[1:].split(".", maxsplit=1)[0]
    supported = " or ".join(str(release) for release in SUPPORTED_NODE_MAJORS)
    assert warnings == [
        f"warning: Node.js {major} is older than the pinned CDK supports ({supported}); "
        "it still works today, but upgrade Node.js"
    ]


@pytest.mark.parametrize("version", [f"v{major}.1.0" for major in SUPPORTED_NODE_MAJORS])
def test_a_supported_node_gets_none(tmp_path: Path, version: str) -> None:
    assert not [line for line in make_help_with_node(tmp_path, version) if "Node.js" in line]


def test_the_readme_names_the_supported_releases() -> None:
    readme = (REPOSITORY_ROOT / "README.md").read_text(encoding="utf-8")
    assert "Node.js " + " or ".join(str(release) for release in SUPPORTED_NODE_MAJORS) in readme


@pytest.mark.parametrize("inherited", ["16,18,20", None])
def test_the_deployers_cdk_synth_keeps_the_banners_silenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inherited: str | None
) -> None:
    """jsii silences its end-of-life banner only for the Node majors its variable lists: the deployer's
    `cdk synth` gets the Makefile's list (or one naming every older major), never a bare "1", which
    brought back eleven lines of banner before the one real error on Node 20 (issue 38)."""
    if inherited is None:
        monkeypatch.delenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", raising=False)
    else:
        monkeypatch.setenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", inherited)
    cdk = tmp_path / "node_modules" / ".bin" / "cdk"
    cdk.parent.mkdir(parents=True)
    cdk.touch()
    seen: dict[str, str] = {}

    def run(*_arguments: object, env: dict[str, str], **_options: object) -> subprocess.CompletedProcess[str]:
        seen.update(env)
        return subprocess.CompletedProcess([], 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    deployer.run_cdk_synth(tmp_path, tools_root=tmp_path)
    silenced = seen["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"].split(",")
    assert silenced == (inherited.split(",") if inherited else silenced)
    assert {"18", "20"} <= set(silenced)
    assert all(int(major) < min(SUPPORTED_NODE_MAJORS) for major in silenced)
