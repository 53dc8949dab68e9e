"""A fresh archive bucket per test, with every PutObject checked on the wire."""

from collections.abc import Iterator

import pytest

from tests.lambdas.archive_function.archive_helpers import WireRecorder, archive_bucket_environment


@pytest.fixture
def wire(aws_environment: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WireRecorder]:
    with archive_bucket_environment(monkeypatch) as recorder:
        yield recorder
