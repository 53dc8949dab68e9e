"""Fixtures shared by the whole suite: one embedded emulator (moto server + compat fixes)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from local.emulator import EmulatorProcess, start_emulator

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    """The emulator every AWS-facing test talks to over HTTP, as clients talk to AWS."""
    process = start_emulator(tmp_path_factory.mktemp("emulator") / "emulator.log")
    yield process
    process.stop()


@pytest.fixture
def aws_environment(emulator: EmulatorProcess, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point boto3 (and the functions' cached clients) at the emulator; returns its URL."""
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator.endpoint_url)
    return emulator.endpoint_url


def repository_root() -> Path:
    return Path(__file__).resolve().parents[1]
