"""The emulator process: it starts, answers, can be attached to, and leaves nothing behind."""

from __future__ import annotations

import socket
from pathlib import Path

import boto3
import pytest

from local.emulator.control import (
    EmulatorError,
    attach_emulator,
    free_port,
    is_ready,
    start_emulator,
)
from local.memory import MALLOC_ENVIRONMENT

pytestmark = pytest.mark.emulator


def port_is_free(port: int) -> bool:
    """Whether a new emulator could listen on `port`: nothing listens there.

    Binds as the emulator's server does (SO_REUSEADDR), so connections the stopped server
    closed itself (TIME_WAIT, normal with kept-alive connections) do not count as taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_start_emulator_serves_aws_apis_and_stop_ends_the_process_and_frees_the_port(tmp_path: Path) -> None:
    log_path = tmp_path / "logs" / "emulator.log"
    port = free_port()

    emulator = start_emulator(log_path, port)
    try:
        assert emulator.endpoint_url == f"http://127.0.0.1:{port}"
        assert emulator.is_running() and is_ready(emulator.endpoint_url)
        environment = dict(
            entry.split(b"=", 1) for entry in Path(f"/proc/{emulator.pid}/environ").read_bytes().split(b"\0") if entry
        )
        assert {
            name.encode(): value.encode() for name, value in MALLOC_ENVIRONMENT.items()
        }.items() <= environment.items()
        sqs = boto3.client(
            "sqs",
            endpoint_url=emulator.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        assert "QueueUrl" in sqs.create_queue(QueueName="started")
    finally:
        emulator.stop()

    assert not emulator.is_running()
    assert not is_ready(emulator.endpoint_url)
    assert port_is_free(port)
    assert "emulator serving on" in log_path.read_text()
    emulator.stop()  # stopping twice is harmless


def test_attach_emulator_controls_a_server_started_elsewhere(tmp_path: Path) -> None:
    started = start_emulator(tmp_path / "emulator.log")
    try:
        attached = attach_emulator(started.pid, started.port)
        assert attached.endpoint_url == started.endpoint_url
        assert attached.is_running()

        attached.stop()

        assert not attached.is_running()
        assert not started.is_running()
        assert port_is_free(started.port)
    finally:
        started.stop()


def test_attach_emulator_refuses_when_nothing_answers(tmp_path: Path) -> None:
    started = start_emulator(tmp_path / "emulator.log")
    started.stop()

    with pytest.raises(EmulatorError):
        attach_emulator(started.pid, started.port)


def test_start_emulator_reports_a_taken_port_instead_of_hanging(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        taken_port = occupant.getsockname()[1]

        with pytest.raises(EmulatorError, match="exited during start-up"):
            start_emulator(tmp_path / "emulator.log", taken_port, startup_timeout_seconds=20)
