"""Invoking one deployed function: its pool of execution environments and its concurrency limit.

Like Lambda, a function has as many execution environments as it has concurrent
invocations, reused while warm; with reserved concurrency N at most N invocations run at
once (the state, map and reduce functions reserve 1, so their invocations are serialised
across shards). An environment that timed out or crashed is dropped; the next invocation
starts a fresh one (a cold start).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import boto3

from local.deploy.deployer import CLIENT_CONFIG
from local.runner.discovery import FunctionConfig
from local.runner.execution_environment import ExecutionEnvironment, InvocationResult
from local.runner.lambda_packages import import_directories, runtime_directory
from local.runner.stats import RunnerStats

log = logging.getLogger(__name__)

FAULT_INJECTION_PREFIX = "FAILURE_"
FAULT_INJECTION_SUFFIXES = ("_PCT", "_FIRST")
REDUCE_IDEMPOTENCY_VARIABLE = "REDUCE_IDEMPOTENCY"
AGGREGATE_SLICES_VARIABLE = "AGGREGATE_SLICES"
LOCAL_OVERRIDES = (REDUCE_IDEMPOTENCY_VARIABLE, AGGREGATE_SLICES_VARIABLE)
"""Also overridable locally: the chaos command's negative control runs the reduce function with
`unsafe-add`, a mode the CDK settings refuse, so only the local runtime can ever set it; and the
chaos run gives reduce fewer slices than shards, so that concurrent reducers contend for items."""
INJECTED_FAILURE_ERROR_TYPE = "InjectedFailure"
"""`function_support.faults.InjectedFailure`: an invocation failed on purpose."""


def fault_injection_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's `FAILURE_*_PCT`, `FAILURE_*_FIRST` (and `LOCAL_OVERRIDES`) variables: locally they win.

    In AWS they are set through `cdk.json` context at deploy time; `make up` / `make demo`
    take them from the caller's shell instead (docs/design.md, "Fault injection").
    """
    return {
        name: value
        for name, value in environ.items()
        if (name.startswith(FAULT_INJECTION_PREFIX) and name.endswith(FAULT_INJECTION_SUFFIXES))
        or name in LOCAL_OVERRIDES
    }


def injected_failure_point(error: Mapping[str, Any] | None) -> str | None:
    """`before_write` / `after_write` when an invocation failed by fault injection, else None.

    The message names the variable that fired (`FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT=6`,
    `FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST=1`), which tells the two points apart; the chaos
    command reports them per stage.
    """
    if not error or error.get("errorType") != INJECTED_FAILURE_ERROR_TYPE:
        return None
    return "after_write" if "_AFTER_WRITE_" in str(error.get("errorMessage", "")) else "before_write"


LAMBDA_PATH: Final[str] = "/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin"
"""`PATH` as Lambda sets it (Lambda Developer Guide, "Defined runtime environment variables")."""
LAMBDA_LANG: Final[str] = "en_US.UTF-8"
LAMBDA_TZ: Final[str] = ":UTC"
INITIALIZATION_TYPE: Final[str] = "on-demand"
"""`AWS_LAMBDA_INITIALIZATION_TYPE` of an environment without provisioned concurrency or SnapStart."""
LOCAL_ONLY_VARIABLES: Final[tuple[str, ...]] = ("AWS_ENDPOINT_URL",)
"""The one variable Lambda does not set: where the emulator is."""


@dataclass(frozen=True)
class RoleCredentials:
    """Temporary credentials of a function's execution role, as Lambda gives them to the runtime."""

    access_key_id: str
    secret_access_key: str
    session_token: str

    def client(self, service: str, endpoint_url: str, region: str) -> Any:
        """A boto3 client calling as the role: what the event source mapping reads the function's
        stream with (Lambda uses the execution role's permissions to read it), and sends a discarded
        batch's record to the mapping's on-failure destination with (`local.runner.expiry`)."""
        return boto3.client(
            service,  # type: ignore[call-overload]  # any service, by name
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
            config=CLIENT_CONFIG,
        )


@functools.cache
def _runtime_directory() -> Path:
    return runtime_directory()


def assume_execution_role(sts: Any, function: FunctionConfig) -> RoleCredentials:
    """The function's execution role assumed as Lambda assumes it, the session named after the
    function (the role's identity is ``assumed-role/<role>/<function>``): the emulator allows the
    worker, and the mapping reading its stream, what the role's policies allow
    (`local.emulator.iam_check`; docs/design.md, "IAM, locally")."""
    if not function.role_arn:
        raise LookupError(f"function {function.name}: the Lambda service reports no execution role")
    session = function.name[:64]  # STS allows 64 characters; Lambda function names are at most 64
    issued = sts.assume_role(RoleArn=function.role_arn, RoleSessionName=session)["Credentials"]
    return RoleCredentials(issued["AccessKeyId"], issued["SecretAccessKey"], issued["SessionToken"])


def function_environment(
    function: FunctionConfig,
    *,
    endpoint_url: str,
    region: str,
    overrides: Mapping[str, str],
    credentials: RoleCredentials,
) -> dict[str, str]:
    """The worker's whole `os.environ`: what Lambda sets, the configured variables, the emulator.

    Lambda's defined runtime environment variables and nothing of the host's (no `HOME`, no host
    `PATH`): the unreserved ones (`PATH`, `LANG`) first, so the function's configuration may
    replace them as on Lambda, then the configured variables, then the reserved ones, which a
    configuration cannot set. Besides: `AWS_ENDPOINT_URL` (`LOCAL_ONLY_VARIABLES`), the caller's
    fault injection `overrides`, and, added by the execution environment, its own `TMPDIR` and
    `MALLOC_ARENA_MAX` (docs/design.md, "Lambda's environment").
    """
    environment = {
        "PATH": LAMBDA_PATH,
        "LANG": LAMBDA_LANG,
        **function.environment,
        "_HANDLER": function.handler,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{function.runtime}",
        "AWS_LAMBDA_FUNCTION_NAME": function.name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_mb),
        "AWS_LAMBDA_INITIALIZATION_TYPE": INITIALIZATION_TYPE,
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "local",
        "LAMBDA_TASK_ROOT": str(function.code_dir),
        "LAMBDA_RUNTIME_DIR": str(_runtime_directory()),
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_SESSION_TOKEN": credentials.session_token,
        "TZ": LAMBDA_TZ,
        "AWS_ENDPOINT_URL": endpoint_url,
        **overrides,
    }
    return environment


class FunctionInvoker:
    """Runs invocations of one function, each in a free warm environment or a new one."""

    def __init__(
        self,
        function: FunctionConfig,
        *,
        environment: Mapping[str, str],
        stats: RunnerStats,
        log_file: IO[bytes] | None = None,
    ) -> None:
        self.function = function
        self.environment = dict(environment)
        self.stats = stats
        self.log_file = log_file
        limit = function.reserved_concurrency
        self._concurrency = threading.BoundedSemaphore(limit) if limit else None
        self._import_dirs = import_directories(function.layers)
        self._idle: list[ExecutionEnvironment] = []
        self._all: list[ExecutionEnvironment] = []
        self._lock = threading.Lock()

    def _new_environment(self) -> ExecutionEnvironment:
        environment = ExecutionEnvironment(
            function_name=self.function.name,
            code_dir=self.function.code_dir,
            handler=self.function.handler,
            environment=self.environment,
            timeout_seconds=self.function.timeout_seconds,
            import_dirs=self._import_dirs,
            log_file=self.log_file,
            memory_mb=self.function.memory_mb,
            function_arn=self.function.arn,
        )
        with self._lock:
            self._all.append(environment)
        return environment

    def warm_up(self) -> None:
        """Start one environment ahead of the first record, so `make up` returns warm."""
        environment = self._new_environment()
        environment.start()
        with self._lock:
            self._idle.append(environment)

    def invoke(self, event: Mapping[str, Any]) -> InvocationResult:
        if self._concurrency is not None:
            self._concurrency.acquire()
        try:
            with self._lock:
                environment = self._idle.pop() if self._idle else None
            if environment is None:
                environment = self._new_environment()
            counters = self.stats.function(self.function.name)
            with self.stats.lock:
                counters.in_flight += 1
                counters.peak_in_flight = max(counters.peak_in_flight, counters.in_flight)
            try:
                result = environment.invoke(event)
            except BaseException:
                # Not a function error: the runner's own. The worker may still be running the
                # event, so it is killed (and dropped) before the batch can be sent again.
                environment.kill()
                with self._lock:
                    if environment in self._all:
                        self._all.remove(environment)
                raise
            finally:
                with self.stats.lock:
                    counters.in_flight -= 1
                    counters.invocations += 1
                    self.stats.last_invocation_at = time.time()
            with self.stats.lock:
                if result.cold_start:
                    counters.cold_starts += 1
                if result.failed:
                    counters.errors += 1
                    point = injected_failure_point(result.error)
                    if point is not None:
                        counters.injected_failures[point] = counters.injected_failures.get(point, 0) + 1
                    counters.last_error = (
                        f"{result.error.get('errorType')}: {result.error.get('errorMessage')}"[:300]
                        if result.error
                        else ""
                    )
                if result.timed_out:
                    counters.timeouts += 1
            with self._lock:
                self._idle.append(environment)  # a killed one restarts on its next use
            return result
        finally:
            if self._concurrency is not None:
                self._concurrency.release()

    def shutdown(self) -> None:
        with self._lock:
            environments, self._all, self._idle = self._all, [], []
        for environment in environments:
            environment.kill()
