"""The process kills: the runner's process group and single function workers, SIGKILLed mid-batch.

Every victim is found from the runner pid `up` recorded (its children in /proc), never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from local.deploy import lifecycle
from local.paths import LocalPaths
from local.runner.execution_environment import BOOTSTRAP
from local.runner.stats import read_stats
from local.scenarios.chaos.figures import RunFigures, add_function_counters, stage_of
from local.scenarios.chaos.settings import ChaosError, ChaosSettings
from local.scenarios.demo import is_idle

IDLE_SECONDS_THAT_MEAN_DRAINED = 4.0
RUNNER_WARM_SECONDS = 5.0
"""A restarted runner counts as idle only after this long: it first has to read its shards."""
KILL_WAIT_FOR_BATCH_SECONDS = 20.0


def kill_plan(settings: ChaosSettings) -> list[str]:
    """What to kill, in order: workers of each stage in turn (map and reduce first), runner kills spread in."""
    order = ("map", "reduce", "archive", "state")
    plan = [order[index % len(order)] for index in range(settings.worker_kills)]
    for index in range(settings.runner_kills):
        plan.insert(min(len(plan), 2 * index + 1), "runner")
    return plan


class RunnerRestarts:
    """Kill the runner mid-batch and restart it, keeping its counters across lives."""

    def __init__(self, paths: LocalPaths, environment: Mapping[str, str], figures: RunFigures) -> None:
        self.paths = paths
        self.environment = environment
        self.figures = figures
        self.pid = lifecycle.running_runner_pid(paths)
        self.life_started = time.monotonic()
        self.last_stats: dict[str, Any] | None = None

    def stats(self) -> dict[str, Any]:
        """This life's counters (a stale file of a previous life reads as empty)."""
        stats = read_stats(self.paths.runner_stats)
        if stats and stats.get("pid") == self.pid:
            self.last_stats = stats
            return stats
        return {}

    def kill_runner_and_restart(self) -> list[str]:
        """SIGKILL the runner's process group (runner + workers), preferably inside a batch.

        Returns the stages that were inside an invocation. Found by this command, when the map
        stage was still keyed by the hash of its batch: a runner killed after the map function
        wrote its delta item re-read the shard from the checkpoint and formed a *different*
        batch, which was mapped again. The runner since re-delivers exactly the interrupted
        batch after a restart, and the map stage is idempotent per stream position, so either
        alone is enough.
        """
        deadline = time.monotonic() + KILL_WAIT_FOR_BATCH_SECONDS
        busy: list[str] = []
        while time.monotonic() < deadline and not busy:
            functions = self.stats().get("functions", {})
            busy = [stage_of(name) or name for name, c in functions.items() if c.get("in_flight")]
            if not busy:
                time.sleep(0.05)
        pid = lifecycle.running_runner_pid(self.paths)
        if pid is None or pid != self.pid:
            raise ChaosError(f"the runner recorded in {self.paths.runner_pid} is not running (pid {self.pid})")
        self.stats()
        add_function_counters(self.figures.functions, self.last_stats)
        os.killpg(pid, signal.SIGKILL)  # `up` starts the runner in its own session: its group is its own
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        deadline = time.monotonic() + 10
        while lifecycle.process_command_line(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.pid = lifecycle.start_runner(self.paths, self.environment)
        lifecycle.wait_for_runner_ready(self.paths, self.pid)
        self.life_started = time.monotonic()
        self.last_stats = None
        self.figures.runner_restarts += 1
        self.figures.killed_mid_batch += bool(busy)
        return busy

    def kill_worker(self, stage: str) -> bool:
        """SIGKILL one worker of `stage`'s function while it runs an invocation.

        The worker is a child of the recorded runner pid (its command line names the
        function's handler module); nothing is looked up by name system-wide. The runner sees
        the invocation fail (`Runtime.ExitError`), retries the identical batch and starts a
        fresh execution environment: a Lambda sandbox crash.
        """
        deadline = time.monotonic() + KILL_WAIT_FOR_BATCH_SECONDS
        while time.monotonic() < deadline:
            functions = self.stats().get("functions", {})
            busy = any(c.get("in_flight") for name, c in functions.items() if stage_of(name) == stage)
            workers = worker_pids(self.pid, f"{stage}_function") if busy and self.pid else []
            if workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(workers[0], signal.SIGKILL)
                    self.figures.workers_killed[stage] = self.figures.workers_killed.get(stage, 0) + 1
                    return True
            time.sleep(0.01)
        return False

    def finish(self) -> None:
        self.stats()
        add_function_counters(self.figures.functions, self.last_stats)

    def drained(self) -> bool:
        return time.monotonic() - self.life_started >= RUNNER_WARM_SECONDS and is_idle(
            self.stats(), IDLE_SECONDS_THAT_MEAN_DRAINED
        )


def child_pids(parent_pid: int) -> list[int]:
    """Live processes whose parent is `parent_pid` (from /proc/<pid>/stat, not by name)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "pid (command)": state, ppid, ...
        if len(fields) > 1 and fields[1] == str(parent_pid):
            children.append(int(entry.name))
    return children


def worker_pids(runner_pid: int, handler_package: str) -> list[int]:
    """Pids of the runner's function workers whose handler is in `handler_package` (`map_function`)."""
    found = []
    for child in child_pids(runner_pid):
        command_line = lifecycle.process_command_line(child) or ""
        if str(BOOTSTRAP) in command_line and f" {handler_package}." in command_line:
            found.append(child)
    return found
