"""`python -m local synth` (what `make install` runs): the deployer's synthesis, which reuses a fresh cdk.out."""

from pathlib import Path

import pytest

import local.__main__ as cli


def test_synth_runs_the_deployers_synthesis_and_names_the_assembly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    calls: list[bool] = []

    def synthesize() -> Path:
        calls.append(True)
        return tmp_path / "cdk.out"

    monkeypatch.setattr(cli, "synthesize", synthesize)
    assert cli.main(["synth"]) == 0
    assert calls == [True]
    assert "cdk.out" in capsys.readouterr().out
