"""A Lambda execution environment: one long-lived worker process per warm function instance.

Why a process per instance, as Lambda has: each function gets its own `sys.path` (its
extracted deployment package, its layers and the runtime's SDK, and nothing of the development
environment: `lambda_bootstrap`, `lambda_packages`), its own `os.environ` (its configured
environment plus the emulator endpoint), module-level state that survives between invocations
(boto3 clients created once, Powertools set up once), and can be killed with SIGKILL when
it overruns its timeout, after which the next invocation is a cold start. The worker's side of
the protocol is `lambda_bootstrap`.

What Lambda's execution environment lifecycle promises, kept here (docs/design.md, "Lambda's
environment"): the Init phase (the handler's import) has `INIT_TIMEOUT_SECONDS`, and one that
overruns it is run again as part of the invocation, within the function's timeout; an Init that
fails fails the invocation and leaves no environment behind, so the next invocation runs Init
again; each environment has a `/tmp` of its own (`TMPDIR`), kept while it is warm and removed with
it; and its memory is held to the function's MemorySize (`MemoryWatch`).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from local.memory import MALLOC_ENVIRONMENT

BOOTSTRAP: Final[Path] = Path(__file__).with_name("lambda_bootstrap.py")
"""The worker, run by path (`lambda_bootstrap`): its name is also how `make chaos` finds workers."""
ISOLATED_INTERPRETER_FLAGS: Final[tuple[str, ...]] = ("-I", "-S", "-u", "-B")
"""Isolated (no ``PYTHON*`` variables, no user site, not the script's directory), no `site` (no
site-packages), unbuffered, no bytecode written into the extracted package."""
INIT_TIMEOUT_SECONDS: Final[float] = 10.0
"""Lambda Developer Guide, "Understanding the Lambda execution environment lifecycle": "The Init
phase is limited to 10 seconds. If all three tasks do not complete within 10 seconds, Lambda
retries the Init phase at the time of the first function invocation with the configured function
timeout." """
MEMORY_SAMPLE_SECONDS: Final[float] = 0.1
"""How often a running invocation's worker has its memory read (`MemoryWatch`)."""
OUT_OF_MEMORY_MESSAGE: Final[str] = "Runtime exited with error: signal: killed"
"""What Lambda reports (`Runtime.ExitError`) for a function its memory limit killed."""


class MemoryWatch:
    """The worker's memory against the function's MemorySize: its peak resident set (VmHWM).

    Lambda's limit is on the environment's memory, enforced by the kernel at the allocation. A
    process resource limit is a poor stand-in: RLIMIT_AS counts address space (thread stacks,
    glibc arenas, mapped files), not memory, and refuses with a MemoryError the handler may catch,
    where Lambda kills. So the parent reads the worker's peak resident size, which the kernel
    keeps (a spike between two reads is still seen), every `MEMORY_SAMPLE_SECONDS` while an
    invocation runs and once at its end, and kills a worker whose peak is over MemorySize, failing
    the invocation as Lambda does. The kill comes at the next read, not at the allocation: up to
    a tenth of a second of work past the limit may land (a retry covers it, as after any kill).
    Linux only (``/proc``); elsewhere memory is not held, and `available` says so.
    """

    def __init__(self, pid: int, limit_mb: int | None) -> None:
        self.status = Path(f"/proc/{pid}/status")
        self.limit_bytes = limit_mb * 1024 * 1024 if limit_mb else None

    @staticmethod
    def available() -> bool:
        return Path("/proc/self/status").exists()

    def peak_bytes(self) -> int | None:
        """The worker's peak resident size so far, or None if it cannot be read."""
        try:
            for line in self.status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        return None

    def exceeded(self) -> int | None:
        """The peak in bytes when it is over the limit, else None."""
        if self.limit_bytes is None:
            return None
        peak = self.peak_bytes()
        return peak if peak is not None and peak > self.limit_bytes else None


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
        memory_mb: int | None = None,
        function_arn: str = "",
        init_timeout_seconds: float = INIT_TIMEOUT_SECONDS,
    ) -> None:
        """`environment` is the worker's whole environment (`invoker.function_environment`) but
        `TMPDIR`, its own /tmp; `memory_mb` the function's MemorySize (None: not held)."""
        self.function_name = function_name
        self.code_dir = code_dir
        self.import_dirs = list(import_dirs)
        self.handler = handler
        self.environment = dict(environment)
        self.timeout_seconds = timeout_seconds
        self.log_file = log_file
        self.python = python
        self.memory_mb = memory_mb
        self.function_arn = function_arn
        self.init_timeout_seconds = init_timeout_seconds
        self._process: subprocess.Popen[bytes] | None = None
        self._tmp_dir: Path | None = None
        self._memory: MemoryWatch | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_warm(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, init_timeout_seconds: float | None = None) -> dict[str, Any] | None:
        """Start the worker and run its Init phase (the handler import) within the limit.

        Returns None when the environment is ready, else the error that ended Init (the handler's
        exception, or `Sandbox.Timedout` past the limit); a failed Init leaves no worker behind.
        """
        limit = self.init_timeout_seconds if init_timeout_seconds is None else init_timeout_seconds
        self._tmp_dir = Path(tempfile.mkdtemp(prefix=f"lambda-tmp-{self.function_name}-"))
        environment = {**self.environment, **MALLOC_ENVIRONMENT, "TMPDIR": str(self._tmp_dir)}
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
        self._memory = MemoryWatch(self._process.pid, self.memory_mb)
        hello = self._read_line(deadline=time.monotonic() + limit)
        if hello is None:
            exited = self._process is None or self._process.poll() is not None
            self.kill()
            if exited:
                return {"errorType": "Runtime.ExitError", "errorMessage": "Runtime exited during Init"}
            return {"errorType": "Sandbox.Timedout", "errorMessage": f"Init timed out after {limit:.2f} seconds"}
        init_error: dict[str, Any] | None = json.loads(hello).get("error")
        if init_error:
            print(
                f"{self.function_name}: init error (the next invocation runs Init again): "
                f"{init_error['errorType']}: {init_error['errorMessage']}",
                file=sys.stderr,
                flush=True,
            )
            self.kill()
        return init_error

    def _cold_start(self, started: float) -> InvocationResult | None:
        """Init for an invocation; None when ready, else the failed invocation.

        An Init over `init_timeout_seconds` runs once more within what is left of the function's
        timeout (`INIT_TIMEOUT_SECONDS`); an Init error fails the invocation, and the environment
        is gone, so the next invocation runs Init again.
        """
        try:
            error = self.start()
            if error is not None and error["errorType"] == "Sandbox.Timedout":
                print(
                    f"{self.function_name}: Init overran {self.init_timeout_seconds:.0f} s; "
                    "running it again within the invocation's timeout",
                    file=sys.stderr,
                    flush=True,
                )
                remaining = self.timeout_seconds - (time.monotonic() - started)
                error = self.start(init_timeout_seconds=max(0.0, remaining))
        except OSError as exception:
            error = {"errorType": "Runtime.InitError", "errorMessage": str(exception)}
        if error is None:
            return None
        return InvocationResult(
            error=error,
            timed_out=error["errorType"] == "Sandbox.Timedout",
            cold_start=True,
            duration_seconds=time.monotonic() - started,
        )

    def invoke(self, event: Any) -> InvocationResult:
        """Run one invocation; on timeout or a crashed worker, kill it (next call is a cold start)."""
        cold_start = not self.is_warm()
        started = time.monotonic()
        if cold_start:
            failed = self._cold_start(started)
            if failed is not None:
                return failed
        process = self._process
        assert process is not None and process.stdin is not None
        request_id = str(uuid.uuid4())
        deadline = time.monotonic() + self.timeout_seconds
        request = {
            "id": request_id,
            "event": event,
            "deadline_ms": int((time.time() + self.timeout_seconds) * 1000),
            "function_arn": self.function_arn,
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
        line = self._read_line(deadline, process, watch_memory=True)
        duration = time.monotonic() - started
        out_of_memory = self._memory.exceeded() if self._memory is not None else None
        if out_of_memory is not None:
            self.kill()
            message = (
                f"{OUT_OF_MEMORY_MESSAGE} (peak resident {out_of_memory / 2**20:.0f} MB "
                f"over the function's MemorySize of {self.memory_mb} MB)"
            )
            return InvocationResult(
                error={"errorType": "Runtime.ExitError", "errorMessage": message},
                cold_start=cold_start,
                duration_seconds=duration,
            )
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

    def _read_line(
        self, deadline: float, process: subprocess.Popen[bytes] | None = None, *, watch_memory: bool = False
    ) -> str | None:
        """One protocol line before `deadline`, or None (timeout, the worker died or was killed, or,
        with `watch_memory`, its memory went over MemorySize)."""
        process = process or self._process
        assert process is not None and process.stdout is not None
        stream = process.stdout
        memory = self._memory if watch_memory and self.memory_mb else None
        buffer = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if memory is not None and memory.exceeded() is not None:
                return None
            try:
                wait = min(remaining, MEMORY_SAMPLE_SECONDS) if memory is not None else remaining
                readable, _, _ = select.select([stream], [], [], wait)
                if not readable:
                    if memory is not None and time.monotonic() < deadline:
                        continue
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
        tmp_dir, self._tmp_dir = self._tmp_dir, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
        if tmp_dir is not None:  # the environment's /tmp goes with it
            shutil.rmtree(tmp_dir, ignore_errors=True)


def function_runtimes(template: Mapping[str, Any]) -> set[str]:
    """The Python `Runtime` of every function a template deploys (the runner runs no other: CDK's
    Node.js custom resource providers are run by the deployer or not at all)."""
    return {
        str(resource["Properties"]["Runtime"])
        for resource in template.get("Resources", {}).values()
        if resource.get("Type") == "AWS::Lambda::Function"
        and str(resource.get("Properties", {}).get("Runtime", "")).startswith("python")
    }


def interpreter_note(runtimes: Iterable[str], version: Sequence[int] = sys.version_info[:2]) -> str | None:
    """One line when the functions' runtime is not the local interpreter's version, else None.

    The workers run on the interpreter of the local runtime, whatever the function's `Runtime`:
    language and standard library differences between the two versions are not seen locally.
    """
    here = f"python{version[0]}.{version[1]}"
    other = sorted(runtime for runtime in set(runtimes) if runtime != here)
    if not other:
        return None
    return (
        f"note: the functions' runtime is {', '.join(other)}, but locally they run on this machine's "
        f'Python {version[0]}.{version[1]} (docs/design.md, "Lambda\'s environment")'
    )
