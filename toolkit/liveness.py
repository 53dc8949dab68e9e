"""Whether the pipeline runs at all: what tells a stopped pipeline from a wrong one.

A view that compares the totals with the ledger sees the same thing when the pipeline is
stopped and when it is wrong: nodes that differ. Only the process that runs the functions can
tell them apart, so the views ask it (issue 38):

- locally, the runner `make up` started: `runner.pid` beside the outputs file names it, and a
  pid file whose process is gone (the runner killed, the machine's processes restarted) means
  the pipeline is not running; no pid file at all says nothing (an outputs file copied
  elsewhere);
- on AWS, the stack's functions: none invoked over the last minutes while records wait (the
  caller knows they wait: the ledger's backlog, the messages just sent) means it is not
  running (an event source mapping disabled, a function throttled to zero, a deleted stack).

Each answer is True (running), False (not running, with why) or None (cannot tell).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

RUNNER_PID_FILE: Final = "runner.pid"
RUNNER_MODULE: Final = "local.runner"
INVOCATION_WINDOW_SECONDS: Final = 300
"""How far back the functions' invocations count on AWS: Lambda polls a stream every second, and
CloudWatch shows an invocation a minute or two after it."""
RECHECK_SECONDS: Final = 60.0
"""The AWS answer is kept this long: the views refresh every second, CloudWatch moves by the minute."""


@dataclass(frozen=True)
class Liveness:
    running: bool | None
    reason: str = ""
    """Why it is not running, for the view's one line."""


UNKNOWN: Final = Liveness(None)


def process_command_line(pid: int) -> str | None:
    """The command line of a live process, or None when there is no such process.

    A process that has exited but is not reaped yet (a zombie) counts as gone: `make down` is
    not the runner's parent, so it cannot reap it, and whoever can may take seconds to.
    """
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state in {"Z", "X"}:
            return None
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError):
        return None


def local_runner(state_dir: Path) -> Liveness:
    """The local runtime in `state_dir` (the outputs file's directory): its runner's pid file."""
    pid_file = state_dir / RUNNER_PID_FILE
    try:
        text = pid_file.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return UNKNOWN
    except (OSError, ValueError):
        return Liveness(False, f"{pid_file} is unreadable")
    if not text.isdigit():
        return Liveness(False, f"{pid_file} names no process")
    command_line = process_command_line(int(text))
    if command_line is None or RUNNER_MODULE not in command_line:
        return Liveness(False, f"its runner (pid {text}) is gone: `make up` starts it again")
    return Liveness(True)


class StackInvocations:
    """On AWS: has any of the stack's functions run within `INVOCATION_WINDOW_SECONDS`?

    The functions are the stack's `AWS::Lambda::Function` resources; their `Invocations` come from
    CloudWatch. Asked at most every `RECHECK_SECONDS`; any AWS error answers None (unknown).
    """

    def __init__(
        self,
        cloudformation: Any,
        cloudwatch: Any,
        stack_name: str,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self._cloudformation = cloudformation
        self._cloudwatch = cloudwatch
        self._stack_name = stack_name
        self._clock = clock
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._checked_at: float | None = None
        self._answer = UNKNOWN

    def __call__(self) -> Liveness:
        if self._checked_at is not None and self._clock() - self._checked_at < RECHECK_SECONDS:
            return self._answer
        self._checked_at = self._clock()
        try:
            self._answer = self._ask()
        except (BotoCoreError, ClientError):
            self._answer = UNKNOWN
        return self._answer

    def _functions(self) -> list[str]:
        paginator = self._cloudformation.get_paginator("list_stack_resources")
        return [
            resource["PhysicalResourceId"]
            for page in paginator.paginate(StackName=self._stack_name)
            for resource in page["StackResourceSummaries"]
            if resource["ResourceType"] == "AWS::Lambda::Function" and resource.get("PhysicalResourceId")
        ]

    def _ask(self) -> Liveness:
        functions = self._functions()[:500]  # GetMetricData takes 500 queries
        if not functions:
            return Liveness(False, f"stack {self._stack_name} has no functions")
        end = self._now()
        queries = [
            {
                "Id": f"f{index}",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/Lambda",
                        "MetricName": "Invocations",
                        "Dimensions": [{"Name": "FunctionName", "Value": name}],
                    },
                    "Period": INVOCATION_WINDOW_SECONDS,
                    "Stat": "Sum",
                },
            }
            for index, name in enumerate(functions)
        ]
        invocations = 0.0
        paginator = self._cloudwatch.get_paginator("get_metric_data")
        start = end - dt.timedelta(seconds=INVOCATION_WINDOW_SECONDS)
        for page in paginator.paginate(MetricDataQueries=queries, StartTime=start, EndTime=end):
            invocations += sum(sum(result["Values"]) for result in page["MetricDataResults"])
        if invocations > 0:
            return Liveness(True)
        minutes = INVOCATION_WINDOW_SECONDS // 60
        return Liveness(False, f"none of stack {self._stack_name}'s functions ran in the last {minutes} minutes")


def pipeline_liveness(target: Any) -> Callable[[], Liveness]:
    """The check for a `toolkit.pipeline.PipelineTarget`-like target (an outputs file or a stack)."""
    source = str(getattr(target, "source", ""))
    if source.startswith("stack "):
        if getattr(target, "is_local", False):
            return lambda: UNKNOWN  # a stack in the emulator: no CloudWatch there
        return StackInvocations(target.client("cloudformation"), target.client("cloudwatch"), source[len("stack ") :])
    if source:
        state_dir = Path(source).parent
        return lambda: local_runner(state_dir)
    return lambda: UNKNOWN
