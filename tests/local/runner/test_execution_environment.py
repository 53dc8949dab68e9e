"""A local execution environment is Lambda's: its variables, Init limit and retry, /tmp, memory.

Each test starts real workers (`lambda_bootstrap` under ``python -I -S``) on small handlers
written for it; none needs the emulator. docs/design.md, "Lambda's environment".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from local.runner.discovery import FunctionConfig
from local.runner.execution_environment import ExecutionEnvironment, MemoryWatch, function_runtimes, interpreter_note
from local.runner.invoker import LAMBDA_PATH, RoleCredentials, function_environment

CREDENTIALS = RoleCredentials("ASIAEXAMPLE", "secret", "token")
RESERVED = (
    "_HANDLER",
    "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_INITIALIZATION_TYPE",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "LAMBDA_TASK_ROOT",
    "LAMBDA_RUNTIME_DIR",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "TZ",
)
"""Lambda Developer Guide, "Defined runtime environment variables": reserved (and `AWS_DEFAULT_REGION`)."""


def config(code_dir: Path, variables: dict[str, str] | None = None, memory_mb: int = 256) -> FunctionConfig:
    return FunctionConfig(
        name="fn",
        arn="arn:aws:lambda:us-east-1:123456789012:function:fn",
        handler="probe.handler",
        environment=variables or {},
        timeout_seconds=10,
        memory_mb=memory_mb,
        reserved_concurrency=None,
        code_sha256="",
        code_dir=code_dir,
        runtime="python3.14",
        role_arn="arn:aws:iam::123456789012:role/fn-role",
    )


def worker(tmp_path: Path, source: str, **options: Any) -> ExecutionEnvironment:
    code_dir = tmp_path / "task"
    code_dir.mkdir(exist_ok=True)
    (code_dir / "probe.py").write_text(source)
    function = config(code_dir, memory_mb=options.pop("memory_mb", 256))
    environment = function_environment(
        function, endpoint_url="http://127.0.0.1:1", region="us-east-1", overrides={}, credentials=CREDENTIALS
    )
    return ExecutionEnvironment(
        function_name="fn",
        code_dir=code_dir,
        handler="probe.handler",
        environment=environment,
        timeout_seconds=options.pop("timeout_seconds", 10),
        import_dirs=[],
        memory_mb=function.memory_mb,
        function_arn=function.arn,
        **options,
    )


ENVIRONMENT_PROBE = """
import os, tempfile

def handler(event, context):
    return {"environ": dict(os.environ), "arn": context.invoked_function_arn, "tmp": tempfile.gettempdir()}
"""


def test_the_worker_sees_what_lambda_sets_and_nothing_of_the_host(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HOST_ONLY_VARIABLE", "leak")
    environment = worker(tmp_path, ENVIRONMENT_PROBE)
    try:
        result = environment.invoke({})
    finally:
        environment.kill()
    assert result.error is None, result.error
    environ = result.payload["environ"]
    local_additions = {"AWS_ENDPOINT_URL", "TMPDIR", "MALLOC_ARENA_MAX", "LC_CTYPE"}
    assert set(environ) - local_additions == {*RESERVED, "PATH", "LANG"}
    assert "HOME" not in environ and "HOST_ONLY_VARIABLE" not in environ
    assert environ["PATH"] == LAMBDA_PATH and environ["LANG"] == "en_US.UTF-8" and environ["TZ"] == ":UTC"
    assert environ["_HANDLER"] == "probe.handler"
    assert environ["AWS_EXECUTION_ENV"] == "AWS_Lambda_python3.14"
    assert environ["AWS_LAMBDA_INITIALIZATION_TYPE"] == "on-demand"
    assert environ["AWS_SESSION_TOKEN"] == "token"
    assert result.payload["arn"].endswith(":function:fn")


@given(
    configured=st.dictionaries(
        st.sampled_from([*RESERVED, "PATH", "LANG", "STATE_TABLE", "POWERTOOLS_SERVICE_NAME"]),
        st.text(min_size=1, max_size=8),
        max_size=8,
    )
)
def test_a_configuration_replaces_unreserved_variables_and_never_reserved_ones(configured: dict[str, str]) -> None:
    """Lambda refuses a reserved key in a function's configuration and lets it set the others."""

    def environment_of(variables: dict[str, str]) -> dict[str, str]:
        return function_environment(
            config(Path("/task"), variables),
            endpoint_url="http://e",
            region="eu-west-1",
            overrides={},
            credentials=CREDENTIALS,
        )

    unconfigured, environment = environment_of({}), environment_of(configured)
    assert {key: environment[key] for key in RESERVED} == {key: unconfigured[key] for key in RESERVED}
    assert all(environment[key] == value for key, value in configured.items() if key not in RESERVED)


FAILS_ITS_FIRST_INIT = """
import os
marker = os.path.join(os.environ["LAMBDA_TASK_ROOT"], "inits")
with open(marker, "a") as inits:
    inits.write("init\\n")
with open(marker) as inits:
    if len(inits.readlines()) == 1:
        raise RuntimeError("first init fails")

def handler(event, context):
    return os.getpid()
"""


def test_a_failed_init_fails_its_invocation_and_runs_again_on_the_next(tmp_path: Path) -> None:
    environment = worker(tmp_path, FAILS_ITS_FIRST_INIT)
    try:
        first = environment.invoke({})
        second = environment.invoke({})
    finally:
        environment.kill()
    assert first.error is not None and first.error["errorMessage"] == "first init fails" and first.cold_start
    assert not environment.is_warm() or second.payload is not None
    assert second.error is None and second.cold_start, "Init runs again in a new environment"
    assert (tmp_path / "task" / "inits").read_text().count("init") == 2


SLOW_INIT = """
import os, time
with open(os.path.join(os.environ["LAMBDA_TASK_ROOT"], "inits"), "a") as inits:
    inits.write("init\\n")
time.sleep(1.5)

def handler(event, context):
    return "ok"
"""


def test_an_init_over_its_limit_is_run_again_within_the_invocation(tmp_path: Path) -> None:
    environment = worker(tmp_path, SLOW_INIT, init_timeout_seconds=0.5)
    try:
        assert environment.start() == {
            "errorType": "Sandbox.Timedout",
            "errorMessage": "Init timed out after 0.50 seconds",
        }
        assert not environment.is_warm()
        result = environment.invoke({})
    finally:
        environment.kill()
    assert result.error is None and result.payload == "ok" and result.cold_start
    assert (tmp_path / "task" / "inits").read_text().count("init") == 3, "cut at the limit, then once more"


def test_an_init_that_outlasts_the_function_timeout_too_times_the_invocation_out(tmp_path: Path) -> None:
    environment = worker(tmp_path, SLOW_INIT, init_timeout_seconds=0.3, timeout_seconds=1)
    try:
        result = environment.invoke({})
    finally:
        environment.kill()
    assert result.timed_out and result.error is not None and result.error["errorType"] == "Sandbox.Timedout"


TMP_PROBE = """
import os, tempfile

def handler(event, context):
    here = tempfile.gettempdir()
    if event.get("write"):
        with open(os.path.join(here, "kept"), "w") as kept:
            kept.write("x")
    return {"tmp": here, "files": sorted(os.listdir(here))}
"""


def test_each_environment_has_a_tmp_of_its_own_for_as_long_as_it_lives(tmp_path: Path) -> None:
    first, second = worker(tmp_path, TMP_PROBE), worker(tmp_path, TMP_PROBE)
    try:
        wrote = first.invoke({"write": True}).payload
        again = first.invoke({}).payload
        other = second.invoke({}).payload
    finally:
        first.kill()
        second.kill()
    assert again == {"tmp": wrote["tmp"], "files": ["kept"]}, "kept while the environment is warm"
    assert other["tmp"] != wrote["tmp"] and other["files"] == []
    assert not Path(wrote["tmp"]).exists(), "gone with its environment"


ALLOCATES = """
def handler(event, context):
    block = b"x" * (event["mb"] * 1024 * 1024)
    return len(block)
"""


def test_a_function_over_its_memory_size_is_killed_as_lambda_kills_it(tmp_path: Path) -> None:
    assert MemoryWatch.available(), "the local runtime holds memory on Linux"
    environment = worker(tmp_path, ALLOCATES, memory_mb=128)
    try:
        within = environment.invoke({"mb": 16})
        over = environment.invoke({"mb": 200})
        after = environment.invoke({"mb": 16})
    finally:
        environment.kill()
    assert within.error is None
    assert over.error is not None and over.error["errorType"] == "Runtime.ExitError"
    assert "signal: killed" in over.error["errorMessage"] and "MemorySize of 128 MB" in over.error["errorMessage"]
    assert after.error is None and after.cold_start, "the killed environment is replaced"


def test_a_differing_interpreter_is_named_in_one_line() -> None:
    template = {
        "Resources": {
            "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Runtime": "python3.14"}},
            "Provider": {"Type": "AWS::Lambda::Function", "Properties": {"Runtime": "nodejs24.x"}},
        }
    }
    assert function_runtimes(template) == {"python3.14"}, "the runner runs Python functions only"
    assert interpreter_note({"python3.14"}, (3, 14)) is None
    note = interpreter_note({"python3.14"}, (3, 11))
    assert note is not None and "\n" not in note and "python3.14" in note and "Python 3.11" in note
