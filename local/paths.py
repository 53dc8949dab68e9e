"""Where the local runtime keeps its state: one `.local/` directory per checkout.

Every file `make up` writes, and every file another part reads (the producer reads
`outputs.json`, `make status` reads `runner-stats.json`), is named here once, so a
newcomer can find them all in one place and tests can point the whole runtime at a
temporary directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class LocalPaths:
    """The files of one local runtime, all under `state_dir` (default `<repo>/.local`)."""

    state_dir: Path

    @classmethod
    def default(cls) -> LocalPaths:
        """`<repo>/.local`, or `$LOCAL_STATE_DIR` (tests point the CLI at a temporary directory)."""
        override = os.environ.get("LOCAL_STATE_DIR")
        return cls(Path(override) if override else REPO_ROOT / ".local")

    @property
    def outputs(self) -> Path:
        """The contract with every client (docs/design.md, "Local runtime")."""
        return self.state_dir / "outputs.json"

    @property
    def emulator_log(self) -> Path:
        return self.state_dir / "emulator.log"

    @property
    def emulator_pid(self) -> Path:
        return self.state_dir / "emulator.pid"

    @property
    def runner_log(self) -> Path:
        return self.state_dir / "runner.log"

    @property
    def runner_pid(self) -> Path:
        return self.state_dir / "runner.pid"

    @property
    def runner_stats(self) -> Path:
        """Counters and lag the runner rewrites about once a second; `status` renders it."""
        return self.state_dir / "runner-stats.json"

    @property
    def checkpoints(self) -> Path:
        """Committed position of every (event source mapping, shard)."""
        return self.state_dir / "checkpoints.json"

    @property
    def functions_dir(self) -> Path:
        """Deployed function code, extracted one directory per function."""
        return self.state_dir / "functions"

    @property
    def deployment(self) -> Path:
        """What the deployer created: stack name, template hash, resources (for the runner)."""
        return self.state_dir / "deployment.json"

    @property
    def ledger(self) -> Path:
        return self.state_dir / "ledger.json"

    def ensure(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
