"""Ctrl-C and SIGTERM while `producer send --processes N` starts its children: one line, no traceback.

A terminal's Ctrl-C goes to the whole process group: the children spawned by `--processes` got it
while still importing, and each printed a KeyboardInterrupt traceback (12 with N = 12, issue 38).
The run is started in its own session, as a shell starts a foreground job, and the signal goes
to that group (or to the parent alone) as soon as the first child exists. The pipeline is an
address nothing listens on: nothing is sent, the point is the start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 6


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return children


def _importing(pid: int) -> bool:
    """A child runs Python already (spawn's exec is done): it is importing what its task needs."""
    for child in _children(pid):
        try:
            if b"multiprocessing" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


@pytest.mark.parametrize(
    ("number", "to_group", "after"),
    [
        (signal.SIGINT, True, 0.0),
        (signal.SIGINT, True, 0.3),
        (signal.SIGINT, True, 0.8),
        (signal.SIGTERM, True, 0.5),
        (signal.SIGTERM, False, 0.5),
    ],
)
def test_a_signal_while_the_children_start_is_one_line(
    tmp_path: Path, number: int, to_group: bool, after: float
) -> None:
    """`after`: seconds after the first child began to run Python (they import for about a second)."""
    outputs = tmp_path / "outputs.json"
    names = {"endpoint_url": "http://127.0.0.1:9", "stream_name": "S", "state_table": "T", "aggregate_table": "A"}
    outputs.write_text(json.dumps(names))
    environment = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    environment.pop("AWS_ENDPOINT_URL", None)
    command = [
        sys.executable,
        "-m",
        "producer",
        "send",
        "--outputs",
        str(outputs),
        "--ledger",
        str(tmp_path / "l.json"),
    ]
    command += ["--processes", str(PROCESSES), "--count", "100000", "--watch", "0", "--no-progress"]
    process = subprocess.Popen(
        command,
        cwd=REPOSITORY_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # As from a terminal: a suite run as a background job inherits SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:
        deadline = time.monotonic() + 60
        while not _importing(process.pid) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert _importing(process.pid), "no child started"
        time.sleep(after)
        if to_group:
            os.killpg(process.pid, number)
        else:
            process.send_signal(number)
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert "Traceback" not in err, err
    assert "KeyboardInterrupt" not in err, err
    lines = err.strip().splitlines()
    assert lines == ["producer: interrupted (accepted messages are in the ledger, those in doubt counted)"], err
    assert process.returncode == 130, (process.returncode, err)
    assert not _children(process.pid)


def test_processes_have_an_upper_bound() -> None:
    """`--processes 1000 --count 10` hung starting a thousand interpreters."""
    completed = subprocess.run(
        [sys.executable, "-m", "producer", "send", "--processes", "1000", "--count", "10"],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.startswith("producer: error: argument --processes: must be between 1 and 64, got 1000")
    assert completed.stderr.count("\n") == 1
