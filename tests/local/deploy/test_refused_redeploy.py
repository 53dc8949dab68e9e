"""A redeploy the deployer refuses (the settings guard) says so in one line and touches nothing else."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from local.deploy import deployer, lifecycle
from local.emulator.control import EmulatorProcess
from local.paths import LocalPaths


def test_a_refused_redeploy_never_announces_a_runner_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: `make up` after `reduceIdempotency` crt+marker -> crt was refused in one line, but only
    after "redeploying and restarting the runner", which it never did."""
    paths = LocalPaths(tmp_path)
    monkeypatch.setattr(deployer, "synthesize", lambda: tmp_path)
    monkeypatch.setattr(deployer, "read_cloud_assembly", lambda _: SimpleNamespace(template_sha256="new"))

    def refuse(*_arguments: object, **_options: object) -> None:
        raise deployer.DeploymentError("the settings guard refused the change: reduceIdempotency crt+marker -> crt")

    monkeypatch.setattr(deployer, "deploy", refuse)
    restarted: list[str] = []
    monkeypatch.setattr(lifecycle, "stop_runner", lambda *_: restarted.append("stop"))
    monkeypatch.setattr(lifecycle, "start_runner", lambda *_: restarted.append("start"))
    reports: list[str] = []
    state = lifecycle.RunningState(EmulatorProcess(endpoint_url="http://127.0.0.1:1", pid=1, port=1), 2)
    with pytest.raises(deployer.DeploymentError, match="refused"):
        lifecycle._bring_up_to_date(paths, state, {}, reports.append, tmp_path)
    assert restarted == []
    assert not any("restart" in report for report in reports), reports
