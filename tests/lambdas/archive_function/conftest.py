"""A fresh archive bucket per test, with every PutObject checked on the wire; S3 faults on demand."""

from collections.abc import Iterator

import pytest

from tests.lambdas.archive_function.archive_helpers import WireRecorder, archive_bucket_environment
from tests.local.emulator.fault_control import FaultControl


@pytest.fixture
def wire(aws_environment: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WireRecorder]:
    with archive_bucket_environment(monkeypatch) as recorder:
        yield recorder


@pytest.fixture
def s3_faults(aws_environment: str) -> Iterator[FaultControl]:
    """The emulator's injected faults (`local.emulator.injected_faults`), none before and after the test.

    Rules must target the test's own bucket (``table``): the emulator is shared by the suite.
    """
    control = FaultControl(aws_environment)
    control.clear()
    yield control
    control.clear()
