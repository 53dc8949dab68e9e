"""A Lambda execution environment: one long-lived worker process per warm function instance.

Why a process per instance, as Lambda has: each function gets its own `sys.path` (its
extracted deployment package, its layers and the runtime's SDK, and nothing of the development
environment: `lambda_bootstrap`, `lambda_packages`), its own `os.environ` (its configured
environment plus the emulator endpoint), module-level state that survives between invocations
(boto3 clients created once, Powertools set up once), and can be killed with SIGKILL when
it overruns its timeout, after which the next invocation is a cold start. The worker's side of
the protocol is `lambda_bootstrap`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from local.memory import MALLOC_ENVIRONMENT

BOOTSTRAP: Final[Path] = Path(__file__).with_name("lambda_bootstrap.py")
"""The worker, run by path (`lambda_bootstrap`): its name is also how `make chaos` finds workers."""
ISOLATED_INTERPRETER_FLAGS: Final[tuple[str, ...]] = ("-I", "-S", "-u", "-B")
"""Isolated (no ``PYTHON*`` variables, no user site, not the script's directory), no `site` (no
site-packages), unbuffered, no bytecode written into the extracted package."""


@dataclass(frozen=True)
class InvocationResult:
    """How one invocation ended. `error` is None on success; `timed_out` implies an error."""

    payload: Any = None
    error: dict[str, Any] | None = None
    timed_out: bool = False
    cold_start: bool = False
    duration_seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.error is not None


# ------------------------------------------------------------------ parent side


class ExecutionEnvironment:
    """Parent-side handle on one worker: start lazily, invoke with a timeout, kill on overrun."""

    def __init__(
        self,
        *,
        function_name: str,
        code_dir: Path,
        handler: str,
        environment: Mapping[str, str],
        timeout_seconds: float,
        import_dirs: Sequence[Path],
        log_file: IO[bytes] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.function_name = function_name
        self.code_dir = code_dir
        self.import_dirs = list(import_dirs)
        self.handler = handler
        self.environment = dict(environment)
        self.timeout_seconds = timeout_seconds
        self.log_file = log_file
        self.python = python
        self._process: subprocess.Popen[bytes] | None = None
        self._init_error: dict[str, Any] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_warm(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the worker and wait for its init phase (the handler import) to finish."""
        environment = dict(self.environment)
        environment.update(MALLOC_ENVIRONMENT)
        self._process = subprocess.Popen(
            [
                self.python,
                *ISOLATED_INTERPRETER_FLAGS,
                str(BOOTSTRAP),
                str(self.code_dir),
                self.handler,
                *map(str, self.import_dirs),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log_file,  # None: the runner's own stderr, i.e. its log
            env=environment,
            cwd=self.code_dir,
        )
        # Init has its own 10 s limit in Lambda; imports here are local, so be generous.
        hello = self._read_line(deadline=time.monotonic() + max(30.0, self.timeout_seconds))
        if hello is None:
            self.kill()
            raise RuntimeError(f"{self.function_name}: the execution environment did not start")
        self._init_error = json.loads(hello).get("error")
        if self._init_error:
            print(
                f"{self.function_name}: init error (every invocation will fail): "
                f"{self._init_error['errorType']}: {self._init_error['errorMessage']}",
                file=sys.stderr,
                flush=True,
            )

    def invoke(self, event: Any) -> InvocationResult:
        """Run one invocation; on timeout or a crashed worker, kill it (next call is a cold start)."""
        cold_start = not self.is_warm()
        started = time.monotonic()
        if cold_start:
            try:
                self.start()
            except (OSError, RuntimeError) as error:  # failed init: a function error, retried
                return InvocationResult(
                    error={"errorType": "Runtime.InitError", "errorMessage": str(error)},
                    cold_start=True,
                    duration_seconds=time.monotonic() - started,
                )
        process = self._process
        assert process is not None and process.stdin is not None
        request_id = str(uuid.uuid4())
        deadline = time.monotonic() + self.timeout_seconds
        request = {
            "id": request_id,
            "event": event,
            "deadline_ms": int((time.time() + self.timeout_seconds) * 1000),
        }
        try:
            process.stdin.write((json.dumps(request) + "\n").encode())
            process.stdin.flush()
        except (BrokenPipeError, ValueError):  # ValueError: closed by a concurrent kill
            self.kill()
            return InvocationResult(
                error={"errorType": "Runtime.ExitError", "errorMessage": "worker exited"},
                cold_start=cold_start,
                duration_seconds=time.monotonic() - started,
            )
        line = self._read_line(deadline, process)
        duration = time.monotonic() - started
        if line is None:
            timed_out = process.poll() is None
            self.kill()
            message = (
                f"Task timed out after {self.timeout_seconds:.2f} seconds"
                if timed_out
                else "Runtime exited without providing a reason"
            )
            error_type = "Sandbox.Timedout" if timed_out else "Runtime.ExitError"
            return InvocationResult(
                error={"errorType": error_type, "errorMessage": message},
                timed_out=timed_out,
                cold_start=cold_start,
                duration_seconds=duration,
            )
        reply = json.loads(line)
        return InvocationResult(
            payload=reply.get("result"),
            error=reply.get("error"),
            cold_start=cold_start,
            duration_seconds=duration,
        )

    def _read_line(self, deadline: float, process: subprocess.Popen[bytes] | None = None) -> str | None:
        """One protocol line before `deadline`, or None (timeout, or the worker died or was killed)."""
        process = process or self._process
        assert process is not None and process.stdout is not None
        stream = process.stdout
        buffer = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                readable, _, _ = select.select([stream], [], [], remaining)
                if not readable:
                    return None
                chunk = os.read(stream.fileno(), 65536)
            except (OSError, ValueError):  # closed by a concurrent kill
                return None
            if not chunk:
                return None
            buffer += chunk
            if buffer.endswith(b"\n"):
                return buffer.decode()

    def kill(self) -> None:
        """SIGKILL the worker, as Lambda ends an environment that overran its timeout."""
        process, self._process = self._process, None  # safe against a concurrent kill
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
