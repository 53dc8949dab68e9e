"""A `make up` stack of the test's own (temporary state directory), without function faults."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from local.deploy import lifecycle
from local.deploy.deployer import Deployment
from local.paths import LocalPaths

StartStack = Callable[..., tuple[Deployment, LocalPaths]]


@pytest.fixture
def local_stack(tmp_path: Path) -> Iterator[StartStack]:
    """`local_stack(NAME=value, ...)` brings the stack up with those variables added; down afterwards.

    `cdk_out`: a cloud assembly of the test's own (other `cdk.json` settings) instead of `cdk synth`'s.
    """
    paths = LocalPaths(tmp_path / ".local")

    def start(cdk_out: Path | None = None, **variables: str) -> tuple[Deployment, LocalPaths]:
        environment = {name: value for name, value in os.environ.items() if not name.startswith("FAILURE_")}
        return lifecycle.up(paths, environment=environment | variables, report=lambda _: None, cdk_out=cdk_out), paths

    yield start
    lifecycle.down(paths, report=lambda _: None)
