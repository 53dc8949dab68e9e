"""A `make up`-style local stack for the producer's end-to-end tests, and running a tool against it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from local.deploy import lifecycle
from local.paths import REPO_ROOT, LocalPaths


@contextlib.contextmanager
def started_local_stack(tmp_path: Path) -> Iterator[LocalPaths]:
    """The synthesized stack in the emulator and the runner, without faults, in a tmp state dir
    (the `local_stack` fixture of this directory's conftest)."""
    paths = LocalPaths(tmp_path / ".local")
    environment = {name: value for name, value in os.environ.items() if not name.startswith("FAILURE_")}
    lifecycle.up(paths, environment=environment, report=lambda _: None)
    try:
        yield paths
    finally:
        lifecycle.down(paths, report=lambda _: None)


def run_tool(module: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if not name.startswith("AWS_ENDPOINT")}
    return subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
