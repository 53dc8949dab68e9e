"""A Lambda execution environment: one long-lived worker process per warm function instance.

Why a process per instance, as Lambda has: each function gets its own `sys.path` (its
extracted deployment package first), its own `os.environ` (its configured environment
plus the emulator endpoint), module-level state that survives between invocations
(boto3 clients created once, Powertools set up once), and can be killed with SIGKILL when
it overruns its timeout, after which the next invocation is a cold start.

Protocol (JSON lines): the parent writes ``{"id": ..., "event": ..., "deadline_ms": ...}``
to the worker's stdin; the worker answers ``{"id": ..., "result": ...}`` or
``{"id": ..., "error": {"errorType", "errorMessage", "stackTrace"}}`` on a private pipe,
the worker's original stdout. The handler's own prints and logs (Powertools writes JSON
to stdout) go to stderr, which the runner sends to its log, like CloudWatch Logs.

    python -m local.runner.execution_environment <code dir> <handler string>
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from local.memory import MALLOC_ENVIRONMENT
from local.paths import REPO_ROOT


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


# ------------------------------------------------------------------ worker side


class LambdaContext:
    """The subset of the Lambda context object handlers and Powertools use."""

    def __init__(self, request_id: str, deadline_ms: int) -> None:
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "local")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = os.environ.get("LOCAL_FUNCTION_ARN", "")
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.aws_request_id = request_id
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def _load_handler(handler: str) -> Any:
    module_name, _, function_name = handler.rpartition(".")
    module = importlib.import_module(module_name)
    return getattr(module, function_name)


def _error(exception: BaseException) -> dict[str, Any]:
    return {
        "errorType": type(exception).__name__,
        "errorMessage": str(exception),
        "stackTrace": traceback.format_exception(exception),
    }


def serve(code_dir: str, handler: str) -> int:
    """Worker main loop: import the handler once (the init phase), then answer invocations."""
    protocol_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # everything the function prints goes to stderr (the runner's log)
    sys.stdout = sys.stderr
    sys.path.insert(0, code_dir)
    try:
        function = _load_handler(handler)
        init_error: dict[str, Any] | None = None
    except Exception as exception:  # an init error fails every invocation, as in Lambda
        init_error = _error(exception)
    protocol_out.write(json.dumps({"ready": init_error is None, "error": init_error}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if init_error is not None:
            reply: dict[str, Any] = {"id": request["id"], "error": init_error}
        else:
            context = LambdaContext(request["id"], int(request["deadline_ms"]))
            try:
                result = function(request["event"], context)
                json.dumps(result)  # a result Lambda could not serialise is an error
                reply = {"id": request["id"], "result": result}
            except Exception as exception:
                reply = {"id": request["id"], "error": _error(exception)}
                # What the Lambda Python runtime writes to the function's log on an unhandled error.
                print(f"[ERROR] {type(exception).__name__}: {exception}", file=sys.stderr)
                traceback.print_exception(exception, file=sys.stderr)
        sys.stderr.flush()
        protocol_out.write(json.dumps(reply) + "\n")
    return 0


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
        log_file: IO[bytes] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.function_name = function_name
        self.code_dir = code_dir
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
        # The worker imports local.runner.execution_environment from the repository; the function's
        # own code directory goes first on its sys.path inside `serve`.
        environment["PYTHONPATH"] = str(REPO_ROOT)
        environment["PYTHONUNBUFFERED"] = "1"
        environment.update(MALLOC_ENVIRONMENT)
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
        self._process = subprocess.Popen(
            [self.python, "-m", "local.runner.execution_environment", str(self.code_dir), self.handler],
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


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 2:
        print("usage: python -m local.runner.execution_environment <code dir> <handler>", file=sys.stderr)
        return 2
    return serve(arguments[0], arguments[1])


if __name__ == "__main__":
    sys.exit(main())
