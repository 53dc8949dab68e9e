"""`make up` and `make down`: start, deploy, and stop the whole local runtime.

`up` = start the emulator (its own process) -> synthesize the CDK app -> deploy it into
the emulator -> start the runner (its own detached process) -> wait until every shard
poller holds its iterator and every function has a warm environment -> write
`.local/outputs.json`. It is idempotent: with everything already running, the
template unchanged and the same `FAILURE_*_PCT` settings it only reports; with changed
fault settings it restarts the runner; with a changed template it redeploys (CloudFormation
update) and restarts the runner. Checkpoints are kept in both cases. `down` stops what
`up` started, whatever state the pid files are in.

Process bookkeeping lives in `.local/`: `emulator.json` (pid, port), `runner.pid`,
`deployment.json` (what was deployed; the runner reads it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from local.deploy import deployer
from local.emulator.control import EmulatorError, EmulatorProcess, attach_emulator, start_emulator
from local.memory import MALLOC_ENVIRONMENT
from local.paths import REPO_ROOT, LocalPaths
from local.runner.execution_environment import function_runtimes, interpreter_note
from local.runner.invoker import fault_injection_overrides
from local.runner.stats import read_stats
from toolkit import liveness

log = logging.getLogger(__name__)

RUNNER_READY_TIMEOUT_SECONDS = 120.0
PROCESS_STOP_TIMEOUT_SECONDS = 10.0
DOWN_GRACE_SECONDS = 0.5
"""How long `down` lets the runner and the emulator stop on SIGTERM before it kills them. `down`
discards everything (the emulator keeps its data in memory), so there is nothing to finish: a
busy runner took 7-13 s to end its in-flight batches and join its pollers, for nothing. A batch
cut short is what a crash does, which the pipeline is built for."""

Report = Callable[[str], None]


class LifecycleError(RuntimeError):
    """`up` could not bring the runtime up; the message says why in one line."""


@dataclass(frozen=True)
class RunningState:
    emulator: EmulatorProcess | None
    runner_pid: int | None

    @property
    def complete(self) -> bool:
        return self.emulator is not None and self.runner_pid is not None


# ------------------------------------------------------------- processes


def process_command_line(pid: int) -> str | None:
    """The command line of a live process, None when there is none (a zombie counts as gone): the
    check the views make of the runner too (`toolkit.liveness`)."""
    return liveness.process_command_line(pid)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _emulator_record(paths: LocalPaths) -> dict[str, int] | None:
    path = paths.state_dir / "emulator.json"
    try:
        record = json.loads(path.read_text())
        return {"pid": int(record["pid"]), "port": int(record["port"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_runner_pid(paths: LocalPaths) -> int | None:
    """The runner's pid if `runner.pid` names a live `local.runner` process (stale files: None)."""
    pid = _read_pid(paths.runner_pid)
    if pid is None:
        return None
    command_line = process_command_line(pid)
    return pid if command_line and "local.runner" in command_line else None


def running_emulator(paths: LocalPaths) -> EmulatorProcess | None:
    record = _emulator_record(paths)
    if record is None:
        return None
    try:
        return attach_emulator(record["pid"], record["port"])
    except EmulatorError:
        return None


def running_state(paths: LocalPaths) -> RunningState:
    return RunningState(running_emulator(paths), running_runner_pid(paths))


def _wait_until_gone(pid: int, timeout_seconds: float) -> bool:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if process_command_line(pid) is None:
            return True
        time.sleep(0.05)
    return False


def stop_runner(paths: LocalPaths, grace_seconds: float = PROCESS_STOP_TIMEOUT_SECONDS) -> bool:
    """SIGTERM the runner (it kills its workers), then SIGKILL its process group after ``grace_seconds``."""
    pid = running_runner_pid(paths)
    paths.runner_pid.unlink(missing_ok=True)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_until_gone(pid, grace_seconds):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # its own session: the runner and its workers
        _wait_until_gone(pid, PROCESS_STOP_TIMEOUT_SECONDS)
    return True


def stop_emulator(paths: LocalPaths, grace_seconds: float = PROCESS_STOP_TIMEOUT_SECONDS) -> bool:
    record = _emulator_record(paths)
    (paths.state_dir / "emulator.json").unlink(missing_ok=True)
    if record is None:
        return False
    command_line = process_command_line(record["pid"])
    if command_line is None or "local.emulator" not in command_line:
        return False  # stale record: that pid is gone, or is someone else's now
    EmulatorProcess(endpoint_url="", pid=record["pid"], port=record["port"]).stop(grace_seconds)
    return True


def start_runner(paths: LocalPaths, environment: Mapping[str, str]) -> int:
    """Start `python -m local.runner` detached (own session), logging to `.local/runner.log`."""
    paths.runner_stats.unlink(missing_ok=True)
    with paths.runner_log.open("ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "local.runner", "--state-dir", str(paths.state_dir)],
            cwd=REPO_ROOT,
            env={**environment, **MALLOC_ENVIRONMENT, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    paths.runner_pid.write_text(str(process.pid))
    return process.pid


def wait_for_runner_ready(paths: LocalPaths, pid: int, timeout_seconds: float = RUNNER_READY_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        stats = read_stats(paths.runner_stats)
        if stats and stats.get("pid") == pid and stats.get("ready"):
            return
        if process_command_line(pid) is None:
            raise LifecycleError(f"the runner exited during start-up:\n{_tail(paths.runner_log)}")
        time.sleep(0.1)
    raise LifecycleError(f"the runner was not ready after {timeout_seconds:.0f} s (see {paths.runner_log})")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------- up


def _write_outputs(paths: LocalPaths, deployment: deployer.Deployment) -> None:
    paths.deployment.write_text(json.dumps(deployment.to_json()))
    temporary = paths.outputs.with_name(".outputs.json.tmp")
    temporary.write_text(json.dumps(deployment.local_outputs(), indent=2) + "\n")
    os.replace(temporary, paths.outputs)


def _recorded_template_sha256(paths: LocalPaths) -> str | None:
    try:
        return str(json.loads(paths.deployment.read_text())["template_sha256"])
    except (OSError, ValueError, KeyError):
        return None


def _forget_previous_run(paths: LocalPaths, report: Report) -> None:
    """A new emulator starts empty: positions, counters and the ledger of the last run are void."""
    for stale in (paths.checkpoints, paths.runner_stats, paths.outputs, paths.deployment):
        stale.unlink(missing_ok=True)
    if paths.ledger.exists():
        paths.ledger.unlink()
        report(f"removed {paths.ledger}: it described the previous emulator's data")


def up(
    paths: LocalPaths,
    *,
    environment: Mapping[str, str] | None = None,
    report: Report = print,
    cdk_out: Path | None = None,
    drained: bool = False,
) -> deployer.Deployment:
    """Bring the runtime up (or confirm it is up) and return the deployment (`drained`: the caller
    declares no batch in flight, for an upgrade the deployer refuses otherwise)."""
    environment = dict(os.environ if environment is None else environment)
    paths.ensure()
    state = running_state(paths)
    if state.complete:
        return _bring_up_to_date(paths, state, environment, report, cdk_out, drained=drained)

    started_emulator = state.emulator is None
    if state.emulator is None:
        emulator = _start_fresh_emulator(paths, report, environment)
    else:
        emulator = state.emulator
        report(f"emulator already running at {emulator.endpoint_url}")
    try:
        started = time.monotonic()
        assembly_dir = cdk_out or deployer.synthesize()
        deployment = deployer.deploy(assembly_dir, emulator.endpoint_url, require_outputs=_required(), drained=drained)
        report(f"stack {deployment.stack_name} deployed in {time.monotonic() - started:.1f} s")
        note = interpreter_note(function_runtimes(deployment.template))
        if note:
            report(note)
        _write_outputs(paths, deployment)
        pid = start_runner(paths, environment)
        wait_for_runner_ready(paths, pid)
    except BaseException:
        stop_runner(paths)
        if started_emulator:  # leave nothing half-up behind
            stop_emulator(paths)
            paths.emulator_pid.unlink(missing_ok=True)
        raise
    report(f"runner ready (pid {pid}); fault injection: {fault_injection_overrides(environment) or 'off'}")
    report(f"outputs in {paths.outputs}")
    return deployment


def _bring_up_to_date(
    paths: LocalPaths,
    state: RunningState,
    environment: Mapping[str, str],
    report: Report,
    cdk_out: Path | None,
    *,
    drained: bool = False,
) -> deployer.Deployment:
    """A complete runtime is kept: redeploy only if the template changed, restart the runner only if needed."""
    assert state.emulator is not None
    assembly_dir = cdk_out or deployer.synthesize()
    assembly = deployer.read_cloud_assembly(assembly_dir)
    if assembly.template_sha256 == _recorded_template_sha256(paths) and paths.outputs.exists():
        deployment = deployer.Deployment.from_json(json.loads(paths.deployment.read_text()))
        running_faults = (read_stats(paths.runner_stats) or {}).get("fault_injection")
        if running_faults is None or running_faults == fault_injection_overrides(environment):
            report(f"already running: emulator {state.emulator.endpoint_url}, runner pid {state.runner_pid}")
            return deployment
        report("fault injection changed: restarting the runner (checkpoints kept)")
        stop_runner(paths)
        pid = start_runner(paths, environment)
        wait_for_runner_ready(paths, pid)
        report(f"runner ready (pid {pid}); fault injection: {fault_injection_overrides(environment) or 'off'}")
        return deployment
    report("the template changed: redeploying")
    deployment = deployer.deploy(
        assembly_dir, state.emulator.endpoint_url, require_outputs=_required(), drained=drained
    )  # a refused change (the settings guard) ends here, in one line, the runner untouched
    _write_outputs(paths, deployment)
    report("redeployed: restarting the runner (checkpoints kept)")
    stop_runner(paths)
    pid = start_runner(paths, environment)
    wait_for_runner_ready(paths, pid)
    return deployment


def _start_fresh_emulator(paths: LocalPaths, report: Report, environment: Mapping[str, str]) -> EmulatorProcess:
    """Start an empty emulator, after clearing whatever described the previous one."""
    stop_runner(paths)  # a runner without its emulator is useless
    stop_emulator(paths)  # a live but unresponsive one, if any
    _forget_previous_run(paths, report)
    started = time.monotonic()
    emulator = start_emulator(paths.emulator_log, environment=environment)
    (paths.state_dir / "emulator.json").write_text(
        json.dumps({"pid": emulator.pid, "port": emulator.port, "endpoint_url": emulator.endpoint_url})
    )
    paths.emulator_pid.write_text(str(emulator.pid))
    report(f"emulator started at {emulator.endpoint_url} in {time.monotonic() - started:.1f} s")
    return emulator


def _required() -> tuple[str, ...]:
    return deployer.REQUIRED_OUTPUT_KEYS


# ------------------------------------------------------------------ down


def down(paths: LocalPaths, report: Report = print) -> None:
    """Stop the runner (and its workers) and the emulator at once (`DOWN_GRACE_SECONDS`); tolerate
    stale or missing pid files."""
    stopped_runner = stop_runner(paths, DOWN_GRACE_SECONDS)
    stopped_emulator = stop_emulator(paths, DOWN_GRACE_SECONDS)
    paths.emulator_pid.unlink(missing_ok=True)
    paths.outputs.unlink(missing_ok=True)  # clients must not find a runtime that is gone
    if stopped_runner or stopped_emulator:
        report(
            "stopped "
            + " and ".join(n for n, s in (("the runner", stopped_runner), ("the emulator", stopped_emulator)) if s)
        )
    else:
        report("nothing was running")
