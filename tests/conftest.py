"""Fixtures shared by the whole suite: one embedded emulator (moto server + compat fixes).

Every test that uses a fixture starting an emulator process (`EMULATOR_FIXTURES`, directly
or through `aws_environment` or `pipeline`) is marked ``emulator`` here, so
``pytest -m "not emulator"`` runs only the tests that need no emulator.
"""

import os
from collections.abc import Iterator

# The protobuf the function asset carries is pure Python (`stacks.functions.FUNCTION_DEPENDENCIES`):
# the handlers' tests read KPL aggregates with that implementation, not the development
# environment's compiled one, which answers some records differently (a `string` field holding
# invalid UTF-8). Set before anything imports protobuf.
os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"

import pytest
from hypothesis import settings

from function_support import aws
from local.emulator.control import EmulatorProcess, start_emulator
from local.runner.inprocess import Pipeline, create_pipeline_tables, handler_environment
from tests.environment import DUMMY_CREDENTIALS

settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
"""No per-example deadline: on a shared 2-core machine an example's time says how busy the machine
is, not whether the property holds (timing is for `benchmarks/`). Examples are bounded by count."""

EMULATOR_FIXTURES = frozenset({"emulator", "module_emulator"})
"""The fixtures that start an emulator process (this file's and tests/local/conftest.py's)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if EMULATOR_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.emulator)


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


@pytest.fixture
def pipeline(aws_environment: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    """The four tables in the emulator `aws_environment` names, and the handlers set up to use them.

    The driver is `local.runner.inprocess.Pipeline`, which the benchmarks use too.
    """
    names = create_pipeline_tables(prefix="")
    for name, value in handler_environment(names, "test").items():
        monkeypatch.setenv(name, value)
    aws.dynamodb_client.cache_clear()
    aws.state_update_client.cache_clear()
    aws.prevalidated_write_client.cache_clear()
    yield Pipeline(names)
    aws.dynamodb_client.cache_clear()
    aws.state_update_client.cache_clear()
    aws.prevalidated_write_client.cache_clear()
