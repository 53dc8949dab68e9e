"""The embedded AWS emulator: moto in server mode, in its own process, with the compat fixes.

Why its own process: the functions, the runner and the tests reach it over HTTP exactly
as they reach AWS (``AWS_ENDPOINT_URL``), DynamoDB Streams only works through an endpoint
(see `local.emulator.moto_compat`), and moto's GIL-bound work does not slow the caller.

    emulator = start_emulator(Path(".local/emulator.log"))
    ... AWS_ENDPOINT_URL=emulator.endpoint_url ...
    emulator.stop()

`attach_emulator(pid, port)` returns the same handle for a server started earlier (for
example by ``make up``, which records the pid and port). The server itself is
``python -m local.emulator serve`` (`local/emulator/__main__.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local.memory import MALLOC_ENVIRONMENT
from local.paths import REPO_ROOT

HOST = "127.0.0.1"
HEALTH_PATH = "/_compat/health"


class EmulatorError(RuntimeError):
    """The emulator did not start, or the process given is not a live emulator."""


@dataclass
class EmulatorProcess:
    """A running emulator: where to reach it and how to stop it."""

    endpoint_url: str
    pid: int
    port: int
    log_path: Path | None = None
    _child: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def is_running(self) -> bool:
        """Whether the server process still exists (a stopped child is reaped, not a zombie)."""
        if self._child is not None:
            return self._child.poll() is None
        return _process_exists(self.pid)

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout_seconds`) and wait until it is gone.

        Safe to call twice. For an attached server, the pid is signalled only while it is
        still an emulator process, so a recycled pid is never killed.
        """
        if self._child is not None:
            if self._child.poll() is None:
                self._child.terminate()
                try:
                    self._child.wait(timeout_seconds)
                except subprocess.TimeoutExpired:
                    self._child.kill()
                    self._child.wait(timeout_seconds)
            return
        if not _process_exists(self.pid) or not _is_emulator_process(self.pid):
            return
        os.kill(self.pid, signal.SIGTERM)
        if not _wait_until_gone(self.pid, timeout_seconds):
            os.kill(self.pid, signal.SIGKILL)
            _wait_until_gone(self.pid, timeout_seconds)


def free_port(host: str = HOST) -> int:
    """A TCP port that nothing listens on right now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def endpoint_url_for(port: int, host: str = HOST) -> str:
    """The endpoint URL clients use for a server listening on `port`."""
    return f"http://{host}:{port}"


def is_ready(endpoint_url: str, timeout_seconds: float = 1.0) -> bool:
    """Whether an emulator with the compat fixes answers at `endpoint_url`."""
    try:
        with urllib.request.urlopen(endpoint_url + HEALTH_PATH, timeout=timeout_seconds) as response:
            payload = json.loads(response.read())
    except (OSError, ValueError):
        return False
    return isinstance(payload, dict) and payload.get("status") == "ok"


def advance_clock(endpoint_url: str, seconds: float) -> float:
    """Advance the emulator's compatibility clock (``POST /_compat/clock/advance``); returns its time.

    Lets a test expire DynamoDB ClientRequestTokens (10-minute window) without waiting.
    """
    request = urllib.request.Request(
        endpoint_url + "/_compat/clock/advance",
        data=json.dumps({"seconds": seconds}).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return float(json.loads(response.read())["now"])


TRANSACTIONS_CONTROL_PATH = "/_compat/transactions"


def transaction_figures(endpoint_url: str) -> dict[str, int]:
    """The emulator's transaction counters since it started (``GET /_compat/transactions``): `conflicts`
    (cancelled for a conflict), `token_replays` and `token_mismatches` (met a live ClientRequestToken
    with the same parameters, or with others)."""
    with urllib.request.urlopen(endpoint_url + TRANSACTIONS_CONTROL_PATH, timeout=10) as response:
        return {name: int(value) for name, value in json.loads(response.read()).items()}


IAM_CONTROL_PATH = "/_compat/iam"


def iam_report(endpoint_url: str) -> dict[str, Any]:
    """What the emulator's IAM check saw since it started (``GET /_compat/iam``, `local.emulator.iam_check`):
    its `mode` (``enforce`` or ``off``), `requests_checked` (requests of the functions' roles), `denied` (calls
    refused, `unevaluable` of them for want of evaluating a policy) and `denials` (message -> count)."""
    with urllib.request.urlopen(endpoint_url + IAM_CONTROL_PATH, timeout=10) as response:
        report: dict[str, Any] = json.loads(response.read())
    return report


def transaction_conflicts(endpoint_url: str) -> int:
    """How many transactions the emulator has cancelled for a conflict."""
    return transaction_figures(endpoint_url)["conflicts"]


def start_emulator(
    log_path: Path,
    port: int | None = None,
    *,
    startup_timeout_seconds: float = 30.0,
    environment: Mapping[str, str] | None = None,
) -> EmulatorProcess:
    """Start the emulator in a new process and return once it answers requests.

    `port` None picks a free port (and retries with another if it is taken between the
    choice and the bind). Output goes to `log_path`. The process runs in its own session,
    so it outlives the caller (``make up``) until `EmulatorProcess.stop`. `environment`
    (default: this process's) is where the emulator reads `EMULATOR_*` settings.
    """
    attempts = 1 if port is not None else 3
    failure = "not started"
    for _ in range(attempts):
        chosen_port = port if port is not None else free_port()
        emulator = _spawn(log_path, chosen_port, os.environ if environment is None else environment)
        deadline = time.monotonic() + startup_timeout_seconds
        while time.monotonic() < deadline:
            if is_ready(emulator.endpoint_url):
                return emulator
            if not emulator.is_running():
                failure = f"exited during start-up (see {log_path})"
                break
            time.sleep(0.05)
        else:
            emulator.stop()
            failure = f"did not answer within {startup_timeout_seconds} s (see {log_path})"
    raise EmulatorError(f"the emulator {failure}")


def attach_emulator(pid: int, port: int, host: str = HOST) -> EmulatorProcess:
    """A handle on an emulator started earlier, after checking it is alive and answers."""
    endpoint_url = endpoint_url_for(port, host)
    if not _process_exists(pid) or not is_ready(endpoint_url):
        raise EmulatorError(f"no emulator with pid {pid} answers at {endpoint_url}")
    return EmulatorProcess(endpoint_url=endpoint_url, pid=pid, port=port)


def _spawn(log_path: Path, port: int, inherited: Mapping[str, str]) -> EmulatorProcess:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "local.emulator", "serve", "--host", HOST, "--port", str(port)]
    environment = {**inherited, **MALLOC_ENVIRONMENT, "PYTHONUNBUFFERED": "1"}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [environment.get("PYTHONPATH")])])
    with log_path.open("ab") as log:
        child = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return EmulatorProcess(
        endpoint_url=endpoint_url_for(port), pid=child.pid, port=port, log_path=log_path, _child=child
    )


def _process_exists(pid: int) -> bool:
    """Whether `pid` is a live process (an exited one awaiting its parent's reaping is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in {"Z", "X"}


def _is_emulator_process(pid: int) -> bool:
    """Whether `pid` runs ``local.emulator`` (True where the command line cannot be read)."""
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"local.emulator" in command_line


def _wait_until_gone(pid: int, timeout_seconds: float) -> bool:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaps it when it happens to be our child
        if not _process_exists(pid):
            return True
        time.sleep(0.05)
    return False
