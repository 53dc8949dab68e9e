"""Fixtures for tests that need their own emulator process (one per test module).

`emulator_endpoint` starts the embedded emulator (moto server with `local.emulator.moto_compat`) on
a free port for the module and yields its endpoint URL; `aws_client` builds boto3 clients
for it with dummy credentials. A module of its own keeps state such as the compat clock,
which tests advance, away from the rest of the suite (the session-wide `emulator` fixture
of tests/conftest.py). `emulator_faults` configures and reads the module emulator's
injected AWS-side faults (lost responses, throttling) and clears them after each test.
`pipeline` (tests/conftest.py) runs the real handlers against the emulator that the
requesting module's `aws_environment` names.
"""

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from local.emulator.control import EmulatorProcess, start_emulator
from tests.local.emulator.fault_control import FaultControl

REGION = "us-east-1"


@pytest.fixture(scope="module")
def module_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    """An emulator process of this test module's own, stopped when the module is done."""
    process = start_emulator(tmp_path_factory.mktemp("emulator") / "emulator.log")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def emulator_endpoint(module_emulator: EmulatorProcess) -> str:
    """The endpoint URL of this module's emulator (what ``AWS_ENDPOINT_URL`` would hold)."""
    return module_emulator.endpoint_url


AwsClientFactory = Callable[[str], Any]


@pytest.fixture(scope="module")
def aws_client(emulator_endpoint: str) -> AwsClientFactory:
    """``aws_client("dynamodb")``: a boto3 client for the module's emulator, no retries.

    No retries, so a test sees each response the emulator gives, not a retried one.
    """
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"}, max_pool_connections=32)

    def make(service_name: str) -> Any:
        return session.client(service_name, endpoint_url=emulator_endpoint, config=config)  # type: ignore[call-overload]

    return make


@pytest.fixture
def emulator_faults(emulator_endpoint: str) -> Iterator[FaultControl]:
    """Faults of the module's emulator, none at the start and cleared again after the test."""
    control = FaultControl(emulator_endpoint)
    control.clear()
    yield control
    control.clear()
